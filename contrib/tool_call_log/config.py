"""The `tool_call_log:` section (pydantic only; imported to validate the config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ToolCallLogConfig(BaseModel):
    """`tool_call_log:` - a JSON-lines record of every tool call of a thread."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(None, description="Keep the log (off by default).")
    filename: str = Field(
        "tool-calls.jsonl", pattern=r"^[A-Za-z0-9._-]+$",
        description="File name, created next to the thread's user-data directory.",
    )
    include_args: bool = Field(
        False, description="Also log the call's arguments (they may hold user data).",
    )
