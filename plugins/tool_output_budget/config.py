"""The `tool_output:` section of the operator config (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from antler.plugin_api import TOOL_RESULTS_DIRNAME

__all__ = ["ToolOutputConfig"]


class ToolOutputConfig(BaseModel):
    """`tool_output:` - oversized tool results go to a file; the model gets a synopsis.

    On by default; `tool_output: {enabled: false}` turns the budget off.
    """

    model_config = ConfigDict(extra="forbid")

    # One declaration per setting (default, bounds, description), as in every section:
    # the head/tail pairs and the other sections' fields are alike in shape only.
    enabled: bool | None = Field(
        None, description="Budget tool results (on by default).")
    externalize_min_chars: int = Field(
        12_000, ge=0,
        description="A result longer than this many characters is saved to a file and "
        "replaced by a synopsis; 0 never saves (long results are cut instead).")
    preview_head_chars: int = Field(
        2_000, ge=0, description="Characters of the result's start shown in the synopsis.")
    preview_tail_chars: int = Field(
        1_000, ge=0, description="Characters of the result's end shown in the synopsis.")
    fallback_max_chars: int = Field(
        30_000, ge=0,
        description="When a result cannot be saved, it is cut to at most this many "
        "characters (head and tail); 0 leaves it whole.")
    fallback_head_chars: int = Field(
        8_000, ge=0, description="Characters of the start kept when a result is cut.")
    fallback_tail_chars: int = Field(
        3_000, ge=0, description="Characters of the end kept when a result is cut.")
    storage_subdir: str = Field(
        TOOL_RESULTS_DIRNAME,
        description="Folder in the thread's outputs where saved results go (one name).")
    exempt_tools: list[str] = Field(
        default_factory=lambda: ["read_file", "read_file_tool"],
        description="Tools never budgeted: reading a saved result must not save it again.")
    tool_overrides: dict[str, int] = Field(
        default_factory=dict,
        description="Per-tool threshold replacing externalize_min_chars (0: never save).")

    @field_validator("storage_subdir")
    @classmethod
    def _one_segment(cls, value: str) -> str:
        if (not value or value in (".", "..") or "/" in value or "\\" in value
                or "\0" in value):
            raise ValueError(f"{value!r} must be one folder name (no '/', not '.' or '..'), "
                             f"for example {TOOL_RESULTS_DIRNAME!r}")
        return value

    @field_validator("tool_overrides")
    @classmethod
    def _non_negative(cls, value: dict[str, int]) -> dict[str, int]:
        bad = {name: limit for name, limit in value.items() if limit < 0}
        if bad:
            raise ValueError(f"thresholds must be 0 or more, got {bad}")
        return value

    @model_validator(mode="after")
    def _fallback_fits(self) -> ToolOutputConfig:
        if self.fallback_max_chars and (
                self.fallback_head_chars + self.fallback_tail_chars > self.fallback_max_chars):
            raise ValueError(
                f"fallback_head_chars + fallback_tail_chars ({self.fallback_head_chars} + "
                f"{self.fallback_tail_chars}) exceed fallback_max_chars "
                f"({self.fallback_max_chars}); lower them or raise the maximum")
        return self

    def threshold(self, tool: str) -> int:
        """The externalizing threshold for `tool` (0: never save its results)."""
        return self.tool_overrides.get(tool, self.externalize_min_chars)
