"""The `tool_search:` section, shared by deferred_tool_filter and mcp_routing."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ToolSearchConfig"]


class ToolSearchConfig(BaseModel):
    """`tool_search:` - defer MCP tools behind `tool_search` instead of sending every schema.

    Example::

        tool_search:
          enabled: true
          auto_promote_top_k: 3
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None, description="Defer every MCP tool: its schema reaches the model only after "
        "tool_search (or mcp_routing) promoted it. Off unless enabled.")
    auto_promote_top_k: int = Field(
        3, description="How many tools mcp_routing promotes for one user message (clamped "
        "to 1-5).")

    @field_validator("auto_promote_top_k")
    @classmethod
    def _clamp(cls, value: int) -> int:
        return max(1, min(5, value))
