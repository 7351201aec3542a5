"""The `tool_result_sanitization:` section of the operator config (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from antler.plugins._lib.tagguard import ExtraTagNames


class ToolResultSanitizationConfig(BaseModel):
    """`tool_result_sanitization:` - neutralize forged framework tags in remote tool output.

    The plugin is always on. Which tools return remote content is declared by the
    tools themselves (metadata); this section is the operator's fallback for a
    tool that does not declare it.
    """

    model_config = ConfigDict(extra="forbid")

    remote_tools: list[str] = Field(
        default_factory=list,
        description="Names of tools whose output is treated as remote content even though "
        "their metadata does not say so (for example a third-party fetch tool).",
    )
    extra_tags: ExtraTagNames = Field(
        default_factory=list,
        description="Tag names to reserve in addition to the built-in injection tags and the "
        "tags every plugin declares (`emits_tags`).",
    )

    @field_validator("remote_tools")
    @classmethod
    def _tool_names_not_blank(cls, value: list[str]) -> list[str]:
        cleaned = [name.strip() for name in value]
        if any(not name for name in cleaned):
            raise ValueError("a tool name is blank; list tool names as the model calls them")
        return cleaned
