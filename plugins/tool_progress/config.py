"""The `tool_progress:` section of the operator config (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ToolProgressConfig"]


class ToolProgressConfig(BaseModel):
    """`tool_progress:` - warn, then stop, a tool that keeps failing or repeating itself.

    Off by default; `tool_progress: {enabled: true}` turns it on.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(None, description="Track tool progress (off by default).")
    stagnation_threshold: int = Field(
        3, ge=1, description="Problems in a row (errors, refusals, repeats) before the warning.")
    warn_escalation_count: int = Field(
        2, ge=1,
        description="Further problems after the warning before a tool that cannot recover is "
        "blocked for the rest of the run.")
    inject_assessment: bool = Field(
        True, description="Tell the model in its next request when a tool is warned.")
    jaccard_similarity_threshold: float = Field(
        0.8, gt=0, le=1,
        description="Word-set similarity at which a result repeats one of the last three.")
    min_word_count_for_similarity: int = Field(
        10, ge=1, description="Results with fewer distinct words are never called repeats.")
    max_tracked_threads: int = Field(
        100, ge=1, description="Runs whose tool states are kept in memory (oldest dropped).")
    exempt_tools: list[str] = Field(
        default_factory=lambda: ["ask_clarification", "write_todos", "present_files", "task"],
        description="Tools never tracked.")
