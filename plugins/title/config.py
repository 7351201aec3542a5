"""The `title:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from antler.plugin_api import ModelSpec


class TitleConfig(BaseModel):
    """`title:` - name the thread after its first complete exchange."""

    model_config = ConfigDict(extra="forbid")

    # Declarations only: `enabled` and `model` read like memory's and summarization's,
    # each section naming its own default model service.
    enabled: bool | None = Field(
        default=None, description="Generate thread titles (on by default)."
    )
    model: ModelSpec = Field(
        default=None,
        description="Lightweight model for titles, as an `init_chat_model` string such as "
        "'openai:gpt-4o-mini'. Default: the `title_model` service if the application "
        "provides one, else the agent's own model.",
    )
    max_chars: int = Field(
        default=60, ge=10, le=200,
        description="Longest title kept, in characters; a longer model answer is cut.",
    )
    first_exchange_only: bool = Field(
        default=True,
        description="Title a thread after its first complete exchange only; "
        "false also titles a thread left untitled then (the plugin was off) at its next "
        "complete exchange.",
    )

