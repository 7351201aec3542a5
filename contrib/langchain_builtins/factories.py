"""Factories that build LangChain's middlewares from their Antler config sections."""

from __future__ import annotations

from typing import Any

from langchain.agents import middleware as lc

from antler.plugin_api import MODEL, BuildContext, BuildError, resolve_model, side_call_model

from . import config as cfg


def _section(ctx: BuildContext, model: type[Any]) -> Any:
    return ctx.plugin_config(model)


def _arguments(section: Any, *drop: str) -> dict[str, Any]:
    return section.model_dump(exclude={"enabled", *drop})


def model_retry(ctx: BuildContext) -> lc.ModelRetryMiddleware:
    return lc.ModelRetryMiddleware(**_arguments(_section(ctx, cfg.ModelRetryConfig)))


def tool_retry(ctx: BuildContext) -> lc.ToolRetryMiddleware:
    return lc.ToolRetryMiddleware(**_arguments(_section(ctx, cfg.ToolRetryConfig)))


def model_fallback(ctx: BuildContext) -> lc.ModelFallbackMiddleware:
    section = _section(ctx, cfg.ModelFallbackConfig)
    if not section.models:
        raise BuildError("model_fallback needs `models`: the fallback models, in order (names "
                         "under models.named or model specs)")
    models = [resolve_model(ctx.services, ref) for ref in section.models]
    return lc.ModelFallbackMiddleware(models[0], *models[1:])


def model_call_limit(ctx: BuildContext) -> lc.ModelCallLimitMiddleware:
    section = _section(ctx, cfg.ModelCallLimitConfig)
    if section.thread_limit is None and section.run_limit is None:
        raise BuildError("model_call_limit needs `thread_limit` or `run_limit`")
    return lc.ModelCallLimitMiddleware(**_arguments(section))


def tool_call_limit(ctx: BuildContext) -> lc.ToolCallLimitMiddleware:
    section = _section(ctx, cfg.ToolCallLimitConfig)
    if section.thread_limit is None and section.run_limit is None:
        raise BuildError("tool_call_limit needs `thread_limit` or `run_limit`")
    return lc.ToolCallLimitMiddleware(**_arguments(section))


def pii(ctx: BuildContext) -> lc.PIIMiddleware:
    section = _section(ctx, cfg.PiiConfig)
    arguments = _arguments(section, "pii_type")
    try:
        return lc.PIIMiddleware(section.pii_type, **arguments)
    except ValueError as exc:
        raise BuildError(f"pii: {exc}") from None


def human_in_the_loop(ctx: BuildContext) -> lc.HumanInTheLoopMiddleware:
    section = _section(ctx, cfg.HumanInTheLoopConfig)
    if not any(section.interrupt_on.values()):
        raise BuildError("human_in_the_loop needs `interrupt_on`: the tools a person approves, "
                         "e.g. `interrupt_on: {bash: true}`")
    return lc.HumanInTheLoopMiddleware(**_arguments(section))


def context_editing(ctx: BuildContext) -> lc.ContextEditingMiddleware:
    section = _section(ctx, cfg.ContextEditingConfig)
    edit = lc.ClearToolUsesEdit(**_arguments(section))
    return lc.ContextEditingMiddleware(edits=[edit])


def llm_tool_selector(ctx: BuildContext) -> lc.LLMToolSelectorMiddleware:
    section = _section(ctx, cfg.LlmToolSelectorConfig)
    # Without a model of its own it asks the agent's, through a scripted model's side
    # script, so a selection never spends the agent's scripted turns.
    model = (resolve_model(ctx.services, section.model) if section.model
             else side_call_model(ctx.services.items.get(MODEL), "tool_selector"))
    return lc.LLMToolSelectorMiddleware(
        model=model, max_tools=section.max_tools,
        always_include=section.always_include or None, max_retries=section.max_retries,
        on_parsing_failure=section.on_parsing_failure)
