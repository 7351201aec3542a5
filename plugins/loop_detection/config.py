"""The `loop_detection:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["LoopDetectionConfig", "ToolFrequencyLimit"]


def _check_order(warn_name: str, warn: int, hard_name: str, hard: int) -> None:
    if hard < warn:
        raise ValueError(f"{hard_name} ({hard}) must be at least {warn_name} ({warn}): the "
                         "warning has to come before the stop")


class ToolFrequencyLimit(BaseModel):
    """Per-tool thresholds replacing `tool_freq_warn` / `tool_freq_hard_limit` for one tool."""

    model_config = ConfigDict(extra="forbid")

    warn: int = Field(ge=1, strict=True, description="Calls of the tool that earn a warning.")
    hard_limit: int = Field(ge=1, strict=True,
                            description="Calls of the tool that stop the loop.")

    @model_validator(mode="after")
    def _hard_not_below_warn(self) -> Self:
        _check_order("warn", self.warn, "hard_limit", self.hard_limit)
        return self


class LoopDetectionConfig(BaseModel):
    """`loop_detection:` - stop a model that keeps making the same tool calls.

    Two layers count what the model asks for. The first hashes each response's
    set of tool calls (order-independent, on the arguments that identify the
    work) and counts identical sets among the last `window_size` responses. The
    second counts calls per tool name among the most recent calls, however
    their arguments vary. At a warning threshold the next model request carries
    a hidden hint; at a hard limit the response's calls are removed and the run
    ends with what the model has.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(None, description="Detect loops (on by default).")
    warn_threshold: int = Field(
        3, ge=1, strict=True,
        description="Identical tool-call sets within the window that earn a warning.")
    hard_limit: int = Field(
        5, ge=1, strict=True,
        description="Identical tool-call sets within the window that stop the run.")
    window_size: int = Field(
        20, ge=1, strict=True,
        description="How many recent tool-calling responses the identical-set count covers.")
    tool_freq_warn: int = Field(
        30, ge=1, strict=True,
        description="Calls of one tool (any arguments) among the recent calls that earn a "
        "warning.")
    tool_freq_hard_limit: int = Field(
        50, ge=1, strict=True,
        description="Calls of one tool among the recent calls that stop the run. The recent "
        "calls are as many as the largest hard limit, so a burst reaches it and calls spread "
        "over a long session age out.")
    tool_freq_overrides: dict[str, ToolFrequencyLimit] = Field(
        default_factory=dict,
        description="Per-tool thresholds, e.g. `{bash: {warn: 60, hard_limit: 100}}`.")

    @model_validator(mode="after")
    def _limits_are_ordered(self) -> Self:
        _check_order("warn_threshold", self.warn_threshold, "hard_limit", self.hard_limit)
        _check_order("tool_freq_warn", self.tool_freq_warn, "tool_freq_hard_limit",
                     self.tool_freq_hard_limit)
        if self.window_size < self.hard_limit:
            raise ValueError(f"window_size ({self.window_size}) must be at least hard_limit "
                             f"({self.hard_limit}), or identical calls could never reach it")
        return self

    def tool_limits(self, name: str) -> tuple[int, int]:
        """(warn, hard limit) of calls to the tool `name`."""
        override = self.tool_freq_overrides.get(name)
        if override is not None:
            return override.warn, override.hard_limit
        return self.tool_freq_warn, self.tool_freq_hard_limit

    @property
    def tool_window(self) -> int:
        """How many recent calls the per-tool count covers: the largest hard limit."""
        return max([self.tool_freq_hard_limit,
                    *(o.hard_limit for o in self.tool_freq_overrides.values())])
