"""Safety finish reason: nothing runs on a reply the provider stopped for safety.

When a provider's content filter or refusal stops a reply, the reply may still
carry tool calls the model started to write, and its text may be empty. Run as
is, those calls execute on output the provider itself withheld, and the user
sees an empty answer. This middleware detects such stops and makes the reply
safe and explained.

Hooks:

* `after_model` asks each detector in turn (see `detectors`) about the reply
  just produced; the first finding counts. Then:

  - the reply has tool calls: all of them are removed (structured ones, the
    raw provider copies, tool-use blocks), and a note naming the detector,
    the field and the value is appended (a new text block for list content);
  - the reply has no tool calls and no visible text: the note becomes its
    text, so no empty assistant message is saved;
  - the reply has visible text and no tool calls: it is left as it is.

  An edited reply keeps its id and the provider's `finish_reason`, and
  records the finding in `additional_kwargs["safety_termination"]`
  (`detector`, `field`, `value`, `count` and `names` of the removed calls,
  `extras`). In every case the stop reason `safety_capped` is recorded, a
  `safety_termination` event goes to the custom stream (when one listens),
  and a log line names the detector and the removed tools, never their
  arguments. A reply that already carries `safety_termination` is left
  alone. A detector that raises is logged and skipped; LangGraph's control
  flow exceptions (interrupts) pass through.

Where it sits: in the tail, after `model_length_finish_reason` and
`@tail_start`, position 34 (docs/chain.md#safety_finish_reason). `after_model` hooks run in reverse
chain order and it is the last of them in the chain, so its `after_model`
runs first: `model_length_finish_reason`, `terminal_response` (which would
otherwise retry a safety-stopped empty reply), the extensions,
`loop_detection` and `subagent_limit` all see the cleaned reply. The manifest
says so with `after_model_before`.

Configuration (`safety_finish_reason:`): `enabled` (on by default) and
`detectors`, a list of `{use: 'module:Class', config: {...}}` replacing the
built-ins (an empty list is refused).

Example::

    safety_finish_reason:
      detectors:
        - use: antler.plugins.safety_finish_reason.detectors:ContentFilterDetector
          config: {extra_finish_reasons: [blocked]}
        - use: antler.plugins.safety_finish_reason.detectors:AnthropicRefusalDetector
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage
from langgraph.errors import GraphBubbleUp

from antler.plugin_api import (
    BuildContext,
    BuildError,
    StopReasonState,
    has_tool_call_intent,
    instantiate,
    message_text,
    record_stop_reason,
    resolve_object,
    strip_tool_calls,
)

from .config import DetectorEntry, SafetyFinishReasonConfig
from .detectors import SafetyTermination, default_detectors

__all__ = [
    "TERMINATION_KEY",
    "SafetyFinishReasonMiddleware",
    "build",
    "load_detectors",
    "safety_note",
]

logger = logging.getLogger(__name__)

TERMINATION_KEY = "safety_termination"
"""`additional_kwargs` key recording the finding on an edited reply; also the event type."""


def safety_note(finding: SafetyTermination, names: Sequence[str]) -> str:
    """The visible explanation added to a reply a provider stopped for safety."""
    what = f"{finding.field}={finding.value!r}, detected by {finding.detector}"
    if names:
        tools = ", ".join(f"`{name}`" for name in names)
        return (f"[SAFETY STOP] The provider stopped this reply for safety reasons ({what}). "
                f"Its tool calls were not run: {tools}.")
    return f"[SAFETY STOP] The provider stopped this reply for safety reasons ({what})."


class SafetyFinishReasonMiddleware(AgentMiddleware[StopReasonState, Any, Any]):
    """Removes tool calls from a safety-stopped reply, fills in an empty one, records it."""

    state_schema = StopReasonState

    def __init__(self, detectors: Sequence[Any] | None = None) -> None:
        super().__init__()
        self.detectors = list(default_detectors() if detectors is None else detectors)

    def after_model(self, state: StopReasonState, runtime: Any) -> dict[str, Any] | None:
        """Make a safety-stopped reply safe to continue from, and record why the run stops."""
        return self.inspect(state, runtime)

    async def aafter_model(self, state: StopReasonState,
                           runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model` (state inspection; the stream write does not block)."""
        return self.inspect(state, runtime)

    def detect(self, message: Any) -> SafetyTermination | None:
        """The first detector's finding for `message`; a failing detector is skipped."""
        for detector in self.detectors:
            try:
                finding = detector.detect(message)
            except GraphBubbleUp:
                raise
            except Exception as exc:  # a buggy detector must not break the run
                logger.warning("safety detector %s failed (%s: %s); skipping it",
                               getattr(detector, "name", type(detector).__name__),
                               type(exc).__name__, exc)
                logger.debug("safety detector failure", exc_info=True)
                continue
            if isinstance(finding, SafetyTermination):
                return finding
        return None

    def inspect(self, state: Mapping[str, Any], runtime: Any) -> dict[str, Any] | None:
        """The `after_model` update for the reply just produced, if a detector fires."""
        messages = state.get("messages") or []
        reply = messages[-1] if messages else None
        if not isinstance(reply, AIMessage) or TERMINATION_KEY in reply.additional_kwargs:
            return None
        finding = self.detect(reply)
        if finding is None:
            return None

        names = [str(call.get("name") or "?") for call in reply.tool_calls]
        update = record_stop_reason("safety_capped", runtime,
                                    detail=f"{finding.detector}: {finding.field}={finding.value}")
        if has_tool_call_intent(reply) or not message_text(reply).strip():
            edited = strip_tool_calls(reply, None, safety_note(finding, names),
                                      keep_finish_reason=True)
            edited.additional_kwargs[TERMINATION_KEY] = {
                "detector": finding.detector, "field": finding.field, "value": finding.value,
                "count": len(names), "names": names, "extras": dict(finding.extras)}
            update["messages"] = [edited]
        logger.warning("safety stop: %s saw %s=%r; %d tool call(s) suppressed (%s)",
                       finding.detector, finding.field, finding.value, len(names),
                       ", ".join(names) or "none")
        _emit(runtime, {"type": TERMINATION_KEY, "detector": finding.detector,
                        "field": finding.field, "value": finding.value, "names": names})
        return update


def _emit(runtime: Any, event: dict[str, Any]) -> None:
    writer = getattr(runtime, "stream_writer", None)
    if writer is None:
        return
    try:
        writer(event)
    except Exception:  # no stream to write to is not a failure of the run
        logger.debug("safety stop: could not write the stream event", exc_info=True)


def load_detectors(entries: Sequence[DetectorEntry]) -> list[Any]:
    """Instances of the configured detector classes; a BuildError names a bad entry."""
    detectors = []
    for index, entry in enumerate(entries):
        where = f"safety_finish_reason.detectors[{index}]"
        cls = resolve_object(entry.use, f"{where}.use")
        if not isinstance(cls, type) or not callable(getattr(cls, "detect", None)):
            raise BuildError(
                f"{where}.use: {entry.use!r} is not a safety detector class; it needs a "
                "detect(message) method returning a SafetyTermination or None (subclass "
                "antler.plugins.safety_finish_reason.detectors.SafetyDetector)")
        detectors.append(instantiate(cls, entry.use, entry.config))
    return detectors


def build(ctx: BuildContext) -> SafetyFinishReasonMiddleware:
    """Factory named in the manifest: the configured detectors, or the built-ins."""
    config = ctx.plugin_config(SafetyFinishReasonConfig)
    if config.detectors is None:
        return SafetyFinishReasonMiddleware()
    return SafetyFinishReasonMiddleware(load_detectors(config.detectors))
