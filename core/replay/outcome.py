"""A run's behaviour in the terms the diff compares (`TurnOutcome`), read from its state.

The recorder and the replayer both describe a run the same way, from the
thread's state after the run and the replies the model gave in it:

* each tool call of those replies: executed (with the result's status),
  refused (by the plugin that stamped the refusal, `antler_tool_meta.source`,
  and its reason), stripped from the reply before it ran (by the plugin that
  did, when the replay saw it), called on a tool the chain does not have, or
  left without a result;
* the run's stop reason (`antler.contracts.stop_reason`), the hidden messages
  plugins showed the model, the token usage of its replies, the final answer
  and the thread's title.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from antler.contracts.messages import hidden_source, is_hidden, message_text
from antler.contracts.stop_reason import STOP_REASON_KEY
from antler.contracts.toolmeta import tool_meta
from antler.contracts.usage import add_usage, usage_of

from .recording import HiddenNote, ToolOutcome, TurnOutcome

__all__ = ["PREVIEW_CHARS", "hidden_notes", "preview", "summarize_turn", "turn_messages"]

PREVIEW_CHARS = 240


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """A message's (or content's) text on one line, cut at `limit` characters."""
    text = " ".join(message_text(value).split()) if not isinstance(value, str) \
        else " ".join(value.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def hidden_notes(messages: Iterable[Any]) -> list[HiddenNote]:
    """The hidden (plugin-injected) messages among `messages`, with their source."""
    return [HiddenNote(source=hidden_source(message) or _legacy_source(message),
                       text=preview(message))
            for message in messages if is_hidden(message)]


def _legacy_source(message: Any) -> str:
    kwargs = getattr(message, "additional_kwargs", None) or {}
    source = kwargs.get("lc_source")
    return str(source) if source else (getattr(message, "name", None) or "plugin")


def turn_messages(messages: Sequence[Any]) -> list[Any]:
    """The messages of the thread's last run: those after its last genuine user message."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if getattr(message, "type", None) == "human" and not is_hidden(message):
            return list(messages[index + 1:])
    return list(messages)


def summarize_turn(state: Mapping[str, Any], replies: Sequence[Any], *,
                   hidden: Sequence[HiddenNote] = (), previous_stop: Any = None,
                   stripped_by: Mapping[str, str] | None = None,
                   available_tools: Collection[str] | None = None,
                   error: str | None = None) -> TurnOutcome:
    """The outcome of the run whose final state is `state` and whose model replies were
    `replies` (as the model gave them, before any plugin changed them).

    `previous_stop` is the stop-reason value the state held before the run (a value
    still there from an earlier run is not this run's). `stripped_by` maps a call id
    to the plugin that removed it; `available_tools` are the tools the chain offered
    (a call to another is `missing`).
    """
    messages = list(state.get("messages") or [])
    mine = turn_messages(messages)
    results = {m.tool_call_id: m for m in mine if getattr(m, "type", None) == "tool"}
    kept = {m.id: {call.get("id") for call in getattr(m, "tool_calls", None) or []}
            for m in mine if getattr(m, "type", None) == "ai"}
    tools = []
    for reply in replies:
        for call in getattr(reply, "tool_calls", None) or []:
            tools.append(_tool_outcome(call, results.get(call.get("id")),
                                       call.get("id") in kept.get(reply.id, set()),
                                       reply.id in kept, stripped_by or {}, available_tools))
    stop = state.get(STOP_REASON_KEY)
    if not isinstance(stop, Mapping) or not stop.get("reason") or \
            (isinstance(previous_stop, Mapping) and stop.get("run_id") == previous_stop.get(
                "run_id")):
        stop = None
    answers = [m for m in mine if getattr(m, "type", None) == "ai"]
    usage = add_usage(*(usage_of(m) for m in answers)) if answers else None
    title = state.get("title")
    return TurnOutcome(
        model_calls=len(replies), tools=tools,
        stop_reason=stop.get("reason") if stop else None,
        stop_detail=stop.get("detail") if stop else None,
        hidden=list(hidden), usage=usage,
        final=message_text(answers[-1]) if answers else "",
        title=title if isinstance(title, str) else None, error=error)


def _tool_outcome(call: Mapping[str, Any], result: Any, still_in_reply: bool,
                  reply_in_state: bool, stripped_by: Mapping[str, str],
                  available: Collection[str] | None) -> ToolOutcome:
    call_id, name = str(call.get("id")), str(call.get("name"))
    base: dict[str, Any] = {"id": call_id, "name": name, "args": dict(call.get("args") or {})}
    if result is not None:
        meta = tool_meta(result)
        text = preview(result)
        if meta is not None and meta.is_refusal:
            extra = meta.__pydantic_extra__ or {}
            reason = extra.get("reason") or text
            rule = extra.get("rule")
            return ToolOutcome(**base, outcome="refused", status=meta.error_type,
                               by=meta.source, reason=f"{reason} (rule {rule})" if rule else
                               str(reason), result=text)
        if available is not None and name not in available:
            return ToolOutcome(**base, outcome="missing", status="error", result=text,
                               reason=f"the chain has no tool {name!r}")
        status = (meta.error_type or meta.status) if meta is not None else \
            str(getattr(result, "status", None) or "success")
        return ToolOutcome(**base, outcome="executed", status=status, result=text)
    if reply_in_state and not still_in_reply:
        return ToolOutcome(**base, outcome="stripped", by=stripped_by.get(call_id))
    return ToolOutcome(**base, outcome="unanswered")
