"""Model length finish reason: mark a final answer the provider cut at its length limit.

A reply that stopped because the model reached its output-token limit looks
complete to the user, although it ends mid-sentence. This middleware records
why: the stop reason `model_length_capped` (first writer wins, so a guard that
stopped the run earlier keeps its reason). It never changes the reply.

Hooks:

* `after_model` looks at the reply just produced. A final answer (visible
  text, no tool-call intent) for which a detector reports a length stop
  records `model_length_capped` with the detector and the provider's value
  as detail. Detectors, matched case-insensitively in `response_metadata`,
  then `additional_kwargs`:

  - OpenAI-compatible: `finish_reason` is `length`;
  - Anthropic: `stop_reason` is `max_tokens`;
  - Gemini: `finish_reason` is `MAX_TOKENS` (an enum member or its name);
  - generic metadata: OpenAI's Responses API (`incomplete_details.reason`
    `max_output_tokens`), Ollama (`done_reason` `length`) and Bedrock
    Converse (`stopReason` `max_tokens`).

  A reply with tool-call intent is left alone: text that looks like a tool
  call is never parsed out of a cut reply. An empty reply is left to
  `terminal_response`. A detector that fails on odd metadata counts as no
  match.

Where it sits: in the tail, after `terminal_response` and `@tail_start`, as position 33
(docs/chain.md#model_length_finish_reason). `after_model` hooks run in reverse chain
order, so it sees the reply after `safety_finish_reason` and before `terminal_response`.

Configuration: none; the plugin is always on (lead chain).

Example: an OpenAI reply with `finish_reason: length` stays as it is, and
`stop_reason_of(state, run_id)` returns `{"reason": "model_length_capped",
"detail": "openai: finish_reason=length", ...}`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage

from antler.plugin_api import (
    BuildContext,
    StopReasonState,
    has_tool_call_intent,
    message_text,
    provider_field,
    provider_text,
    record_stop_reason,
)

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["DETECTORS", "ModelLengthFinishReasonMiddleware", "build", "length_stop"]

logger = logging.getLogger(__name__)


def _field_is(field: str, *values: str) -> Callable[[Any], str | None]:
    def detect(message: Any) -> str | None:
        value = provider_text(message, field)
        return f"{field}={value}" if value is not None and value.lower() in values else None

    return detect


_GENERIC_FIELDS = (_field_is("done_reason", "length"), _field_is("stopReason", "max_tokens"))


def _generic(message: Any) -> str | None:
    details = provider_field(message, "incomplete_details")
    if isinstance(details, Mapping) and str(details.get("reason")).lower() in (
            "max_output_tokens", "max_tokens"):
        return f"incomplete_details.reason={details['reason']}"
    for detect in _GENERIC_FIELDS:
        found = detect(message)
        if found:
            return found
    return None


DETECTORS: tuple[tuple[str, Callable[[Any], str | None]], ...] = (
    ("openai", _field_is("finish_reason", "length")),
    ("anthropic", _field_is("stop_reason", "max_tokens")),
    ("gemini", _field_is("finish_reason", "max_tokens")),
    ("generic", _generic),
)
"""(name, detector) pairs; a detector returns `field=value` when it sees a length stop."""


def length_stop(message: Any) -> str | None:
    """`"detector: field=value"` when a detector sees a length stop in `message`, else None."""
    for name, detect in DETECTORS:
        try:
            found = detect(message)
        except Exception:  # odd provider metadata must not break the run
            logger.debug("length detector %s failed", name, exc_info=True)
            continue
        if found:
            return f"{name}: {found}"
    return None


class ModelLengthFinishReasonMiddleware(AgentMiddleware[StopReasonState, Any, Any]):
    """Records `model_length_capped` for a final answer cut at the length limit."""

    state_schema = StopReasonState

    # The sync and async hooks share one implementation: the work is pure state
    # inspection, with no I/O to await.

    def after_model(self, state: StopReasonState, runtime: Any) -> dict[str, Any] | None:
        """Record the stop reason when the new final answer was cut by the length limit."""
        return self.inspect(state, runtime)

    async def aafter_model(self, state: StopReasonState,
                           runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model` (pure state inspection, no I/O)."""
        return self.inspect(state, runtime)

    @staticmethod
    def inspect(state: Mapping[str, Any], runtime: Any) -> dict[str, Any] | None:
        """The stop-reason update for the reply just produced, if it was length-capped."""
        messages = state.get("messages") or []
        reply = messages[-1] if messages else None
        if (not isinstance(reply, AIMessage) or has_tool_call_intent(reply)
                or not message_text(reply).strip()):
            return None
        detail = length_stop(reply)
        if detail is None:
            return None
        logger.info("model length: the final answer was cut at the length limit (%s)", detail)
        return record_stop_reason("model_length_capped", runtime, detail=detail)


def build(ctx: BuildContext) -> ModelLengthFinishReasonMiddleware:
    """Factory named in the manifest (the plugin has no configuration)."""
    return ModelLengthFinishReasonMiddleware()
