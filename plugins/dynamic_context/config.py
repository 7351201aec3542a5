"""The `dynamic_context:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DynamicContextConfig(BaseModel):
    """`dynamic_context:` - the current date, and the user's memory, as a hidden reminder."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None, description="Inject the date (and memory) reminder (on by default); false "
        "also turns off the subagents' date context.")
    memory: bool = Field(
        True, description="Also inject the user's memory facts on the run's first turn.")
    memory_max_chars: int = Field(
        4000, ge=100, le=100_000, strict=True,
        description="Most characters of memory facts injected; the newest facts are kept.")
    timeout_seconds: float = Field(
        5.0, gt=0, le=60,
        description="Async runs read memory in a worker thread and inject nothing this turn "
        "when it takes longer than this.")
