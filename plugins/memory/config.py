"""The `memory:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from antler.plugin_api import ModelSpec


class MemoryConfig(BaseModel):
    """`memory:` - learn durable facts about the user from finished conversations."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        default=None,
        description="Queue finished conversations for memory extraction (on by default).",
    )
    debounce_seconds: float = Field(
        default=30.0, ge=0, le=86_400,
        description="Wait this long after a run before extracting; a newer run of the same "
        "thread within the wait replaces the pending one. 0 processes right away.",
    )
    queue: Literal["auto", "thread", "store"] = Field(
        default="auto",
        description="Where the debounce waits: 'thread', a timer thread of this process; "
        "'store', a record in the shared store that the next run processes when due (no "
        "thread: for LangGraph Server and several replicas); 'auto', 'store' when the agent "
        "is built for LangGraph Server, else 'thread'.",
    )
    model: ModelSpec = Field(
        default=None,
        description="Model that extracts facts, as an `init_chat_model` string such as "
        "'openai:gpt-4o-mini'. Default: the `memory_model` service if the application "
        "provides one, else the agent's own model.",
    )
    max_facts: int = Field(
        default=100, ge=1, le=10_000,
        description="Most facts kept per user; past it the least recently seen are dropped.",
    )

