"""The `token_budget:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["LEAD_MAX_TOKENS", "SUBAGENT_MAX_TOKENS", "TokenBudgetConfig"]

LEAD_MAX_TOKENS = 200_000
SUBAGENT_MAX_TOKENS = {True: 1_000_000, False: 2_000_000}
"""A subagent's default cap, by whether summarization keeps its context short."""


class TokenBudgetConfig(BaseModel):
    """`token_budget:` - a cap on the tokens one run may use.

    The same model configures the lead chain (`token_budget:`, off by default,
    200k tokens) and a subagent chain (on by default, 1M tokens with
    summarization on and 2M without: `for_subagent`).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None, description="Enforce the budget (off by default on the lead agent).")
    max_tokens: int = Field(
        LEAD_MAX_TOKENS, ge=1000, description="Most tokens (input plus output, summed over "
        "the run's model calls and the subagents it dispatched) one run may use.")
    max_input_tokens: int | None = Field(
        None, ge=1, description="Optional separate cap on input tokens.")
    max_output_tokens: int | None = Field(
        None, ge=1, description="Optional separate cap on output tokens.")
    warn_threshold: float = Field(
        0.8, gt=0, le=1, description="Fraction of a cap at which the model is warned once, "
        "in its next request, to wrap up.")
    hard_stop_threshold: float = Field(
        1.0, gt=0, le=10, description="Fraction of a cap at which tool calls are dropped and "
        "the reply becomes the final answer (stop reason `token_capped`).")

    @model_validator(mode="after")
    def _warn_before_stop(self) -> TokenBudgetConfig:
        if self.hard_stop_threshold < self.warn_threshold:
            raise ValueError(
                f"hard_stop_threshold ({self.hard_stop_threshold}) is below warn_threshold "
                f"({self.warn_threshold}): the warning could never come first; raise "
                "hard_stop_threshold or lower warn_threshold")
        return self

    @classmethod
    def for_subagent(cls, *, summarization: bool, **settings: Any) -> TokenBudgetConfig:
        """A subagent chain's budget: on, with the default cap for its summarization."""
        settings.setdefault("enabled", True)
        settings.setdefault("max_tokens", SUBAGENT_MAX_TOKENS[summarization])
        return cls(**settings)
