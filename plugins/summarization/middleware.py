"""Summarization: replace old history with a summary before the context overflows.

This is LangChain's `SummarizationMiddleware`, configured from the operator's
`summarization:` section. Its `before_model` hook counts the conversation
against the configured triggers; when one is reached it asks the summary model
to condense everything but the most recent `keep` messages, then rewrites the
state's `messages` as [summary, *kept]. AI/tool message pairs are never split.

Where it sits: after `dangling_tool_call`, so that a summary is only ever made
of a well-formed history, and before `todo`, which decides from what
summarization left whether the todo list must be re-injected (docs/chain.md#layer-dependencies).
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import SummarizationMiddleware
from langchain.agents.middleware.internal_call_transformer import InternalCallTransformer
from langchain_core.language_models import BaseChatModel

from antler.plugin_api import MODEL, BuildContext, BuildError, hidden_marker, resolve_model
from antler.plugins._lib.tagguard import ReservedTags, neutralize

from .config import SummarizationConfig

__all__ = ["AntlerSummarizationMiddleware", "build"]


class AntlerSummarizationMiddleware(SummarizationMiddleware):
    """LangChain's summarization, with its internal summary call kept out of streams.

    `before_model` / `abefore_model` (inherited) run before every model call:
    they count tokens and messages, and when a trigger is reached they replace
    the old history with one summary message (tagged
    `additional_kwargs.lc_source == "summarization"`) followed by the kept
    recent messages. The summary call is tagged as internal by LangChain; the
    `InternalCallTransformer` declared here drops it from `run.messages`, so a
    client streaming the run never sees the summary model's output as an
    assistant reply.
    """

    transformers = (InternalCallTransformer,)

    #: Tags no summary may carry; set by `build` from the chain (None: no neutralizing).
    reserved_tags: ReservedTags | None = None

    # The summary is model-written from untrusted history (user text, fetched pages)
    # yet lands in context as framework text, which the input sanitizer leaves alone:
    # a forged tag the summarizer repeats word for word is made literal here.
    def _create_summary(self, messages_to_summarize: list[Any]) -> str:
        return self._neutralized(super()._create_summary(messages_to_summarize))

    async def _acreate_summary(self, messages_to_summarize: list[Any]) -> str:
        return self._neutralized(await super()._acreate_summary(messages_to_summarize))

    # The summary also carries the marker every hidden message does (`antler_hidden`), by
    # which a served API client tells injected messages from the conversation.
    @staticmethod
    def _build_new_messages(summary: str) -> list[Any]:
        messages = SummarizationMiddleware._build_new_messages(summary)
        for message in messages:
            message.additional_kwargs.update(hidden_marker("summarization"))
        return messages

    def _neutralized(self, summary: str) -> str:
        if self.reserved_tags is None or not isinstance(summary, str):
            return summary
        return neutralize(summary, self.reserved_tags).text


def build(ctx: BuildContext) -> AntlerSummarizationMiddleware:
    """Build the middleware from the `summarization:` section and the build's services.

    The agent's model (`services[MODEL]`) is the model whose context window is
    managed: tokens are counted with it and `fraction` limits read its profile.
    `summarization.model`, when set, only writes the summaries.
    """
    config = ctx.plugin_config(SummarizationConfig)
    summarizer = resolve_model(ctx.services, config.model) if config.model else None
    managed: Any = ctx.services.items.get(MODEL)
    if managed is None:
        managed = summarizer
    if managed is None:
        raise BuildError(
            "summarization needs a model: provide services[MODEL] (antler.agent.create_agent "
            "does) or set `summarization.model`"
        )
    if isinstance(managed, str):
        managed = resolve_model(ctx.services, managed)
    _check_profile(config, managed)
    kwargs: dict[str, Any] = {
        "trigger": [size.as_tuple() for size in config.trigger],
        "keep": config.keep.as_tuple(),
        "trim_tokens_to_summarize": config.trim_tokens_to_summarize,
    }
    if config.summary_prompt is not None:
        kwargs["summary_prompt"] = config.summary_prompt
    if summarizer is not None and summarizer is not managed:
        kwargs["summarizer"] = summarizer
    middleware = AntlerSummarizationMiddleware(managed, **kwargs)
    middleware.reserved_tags = ReservedTags.for_build(ctx)
    return middleware


def _check_profile(config: SummarizationConfig, model: BaseChatModel) -> None:
    """Refuse `fraction` sizes up front when the model cannot say how big its window is."""
    if not config.uses_fraction():
        return
    profile = getattr(model, "profile", None) or {}
    if not isinstance(profile.get("max_input_tokens"), int):
        name = getattr(model, "model_name", None) or type(model).__name__
        raise BuildError(
            f"summarization: a `fraction` trigger or keep needs the agent model's maximum "
            f"input tokens, and model {name!r} does not state them in its profile; use "
            "`type: tokens` or `type: messages` instead"
        )
