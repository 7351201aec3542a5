"""The `subagents:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "MAX_CONCURRENT_RANGE",
    "MAX_TOTAL_RANGE",
    "SubagentsConfig",
    "clamp",
]

MAX_CONCURRENT_RANGE = (1, 4)
"""Bounds `max_concurrent` is clamped to."""

MAX_TOTAL_RANGE = (1, 50)
"""Bounds `max_total_per_run` (and its runtime override) is clamped to."""


def clamp(value: int, bounds: tuple[int, int]) -> int:
    """`value` moved into `bounds` (inclusive)."""
    low, high = bounds
    return min(max(value, low), high)


class SubagentsConfig(BaseModel):
    """`subagents:` - limits on the lead agent's delegation through `task`.

    Out-of-range limits are clamped, not rejected: `max_concurrent: 10` runs
    with 4, `max_total_per_run: 0` with 1. The validated section holds the
    clamped values.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None, description="Enforce the limits (on by default whenever subagents are enabled).")
    max_concurrent: int = Field(
        3,
        description="Most `task` calls kept from one model response; extra ones are dropped. "
        "Clamped to 1-4.",
        strict=True,
        json_schema_extra={"x-clamp": list(MAX_CONCURRENT_RANGE)},
    )
    max_total_per_run: int = Field(
        6,
        description="Most `task` calls dispatched in one run (one user turn); a later turn "
        "starts a fresh budget. Clamped to 1-50. A run may override it with the run context "
        "attribute `max_total_subagents` (clamped the same way).",
        strict=True,
        json_schema_extra={"x-clamp": list(MAX_TOTAL_RANGE)},
    )

    @field_validator("max_concurrent")
    @classmethod
    def _clamp_concurrent(cls, value: int) -> int:
        return clamp(value, MAX_CONCURRENT_RANGE)

    @field_validator("max_total_per_run")
    @classmethod
    def _clamp_total(cls, value: int) -> int:
        return clamp(value, MAX_TOTAL_RANGE)
