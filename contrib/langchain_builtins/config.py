"""Config sections of the LangChain built-in middlewares, as Antler plugins.

Each model holds the constructor arguments of the LangChain class it configures
(names and meanings are LangChain's), plus the `enabled` switch every section
has. Model references (`model_fallback.models`, `llm_tool_selector.model`) are
names under `models.named` or model specs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(None, description="Turn the plugin on (off by default).")


class _Backoff(_Section):
    max_retries: int = Field(2, ge=0, le=20, description="Retries after the first attempt.")
    on_failure: Literal["continue", "error"] = Field(
        "continue", description="When retries run out: 'continue' with an error message the "
        "model can read, or 'error' to raise.")
    backoff_factor: float = Field(2.0, ge=0, description="Multiplier between waits.")
    initial_delay: float = Field(1.0, ge=0, description="Seconds before the first retry.")
    max_delay: float = Field(60.0, ge=0, description="Longest wait, in seconds.")
    jitter: bool = Field(True, description="Randomize waits by up to 25%.")


class ModelRetryConfig(_Backoff):
    """`model_retry:` — LangChain's ModelRetryMiddleware, inside llm_error_handling."""


class ToolRetryConfig(_Backoff):
    """`tool_retry:` — LangChain's ToolRetryMiddleware, innermost of the tool wrappers."""

    tools: list[str] | None = Field(
        None, description="Only these tools are retried (default: every tool).")


class ModelFallbackConfig(_Section):
    """`model_fallback:` — LangChain's ModelFallbackMiddleware: other models, in order,
    when the agent's model fails."""

    models: list[str] = Field(
        default_factory=list, description="Fallback models, tried in order: names under "
        "`models.named` or model specs. Required when enabled.")


class ModelCallLimitConfig(_Section):
    """`model_call_limit:` — LangChain's ModelCallLimitMiddleware."""

    thread_limit: int | None = Field(None, ge=1, description="Model calls per thread.")
    run_limit: int | None = Field(None, ge=1, description="Model calls per run.")
    exit_behavior: Literal["end", "error"] = Field(
        "end", description="At the limit: 'end' the run with a message, or raise an 'error'.")


class ToolCallLimitConfig(_Section):
    """`tool_call_limit:` — LangChain's ToolCallLimitMiddleware."""

    tool_name: str | None = Field(None, description="Count only this tool (default: all).")
    thread_limit: int | None = Field(None, ge=1, description="Tool calls per thread.")
    run_limit: int | None = Field(None, ge=1, description="Tool calls per run.")
    exit_behavior: Literal["continue", "error", "end"] = Field(
        "continue", description="At the limit: 'continue' refusing further calls, 'error', "
        "or 'end' the run.")


class PiiConfig(_Section):
    """`pii:` — LangChain's PIIMiddleware for one kind of personal data."""

    pii_type: str = Field(
        "email", description="'email', 'credit_card', 'ip', 'mac_address', 'url', or a name "
        "for a custom `detector`.")
    strategy: Literal["block", "redact", "mask", "hash"] = Field(
        "redact", description="What to do with a match.")
    detector: str | None = Field(None, description="A regular expression for custom types.")
    apply_to_input: bool = Field(True, description="Check the user's messages.")
    apply_to_output: bool = Field(False, description="Check the model's replies.")
    apply_to_tool_results: bool = Field(False, description="Check tool results.")


class HumanInTheLoopConfig(_Section):
    """`human_in_the_loop:` — LangChain's HumanInTheLoopMiddleware: a person approves,
    edits or rejects the named tools' calls (`antler resume` answers from the CLI)."""

    interrupt_on: dict[str, bool] = Field(
        default_factory=dict, description="Tool name -> true to ask before it runs. "
        "Required when enabled.")
    interrupt_mode: Literal["batched", "per_call"] = Field(
        "batched", description="One question per model turn, or one per tool call.")
    description_prefix: str = Field(
        "Tool execution requires approval", description="Shown to the reviewer.")


class ContextEditingConfig(_Section):
    """`context_editing:` — LangChain's ContextEditingMiddleware with its tool-result
    clearing edit: old tool results leave the request once it grows past `trigger`."""

    trigger: int = Field(100_000, ge=1, description="Tokens in the request that start "
                         "clearing.")
    keep: int = Field(3, ge=0, description="Most recent tool results always kept.")
    clear_at_least: int = Field(0, ge=0, description="Tokens to free once triggered.")
    exclude_tools: list[str] = Field(default_factory=list,
                                     description="Tools whose results are never cleared.")
    placeholder: str = Field("[cleared]", description="What a cleared result says.")


class LlmToolSelectorConfig(_Section):
    """`llm_tool_selector:` — LangChain's LLMToolSelectorMiddleware: a model picks the
    relevant tools before each call when there are many."""

    model: str | None = Field(None, description="Selection model: a name under "
                              "`models.named` or a spec (default: the agent's).")
    max_tools: int | None = Field(None, ge=1, description="At most this many tools.")
    always_include: list[str] = Field(default_factory=list,
                                      description="Tools always offered.")
    max_retries: int = Field(1, ge=0, le=5, description="Retries of a malformed selection.")
    on_parsing_failure: Literal["error", "all", "none"] = Field(
        "error", description="When no valid selection comes back: raise an 'error', keep "
        "'all' tools, or offer 'none'.")
