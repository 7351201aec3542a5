"""A recording from a saved thread's checkpoint history: `antler threads export --format script`.

A thread that was not recorded while it ran still has its history: every
checkpoint of every run. The export walks it oldest first and takes each
message the first time it appears (so a model reply is taken as the model
node saved it, before a later step edited it, where the graph checkpointed the
two apart), splits the conversation into runs at each user message and writes
the runs as `Recorder` would have: the replies as turns, their tool results,
each run's observed behaviour from the checkpoint that ended it, and the
thread's title as the title side call.

What history cannot give: a provider error that a retry answered (only the
answer was saved), the memory side calls, and the exact requests (their shapes
are taken from the saved conversation, without the wrap hooks' edits), and a
run that continued a paused one is folded into the run it continued.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from antler.contracts.fallback import error_fallback_of
from antler.contracts.messages import is_hidden, message_text

from .fingerprint import request_shape
from .outcome import hidden_notes, summarize_turn
from .recorder import config_digest
from .recording import (
    RECORDING_FORMAT,
    RecordedInput,
    RecordedToolResult,
    Recording,
    RecordingHeader,
)
from .redact import Redactor
from .turns import reply_turn

__all__ = ["export_thread"]


def _is_input(message: Any) -> bool:
    return getattr(message, "type", None) == "human" and not is_hidden(message)


def export_thread(agent: Any, thread_id: str, *, user_id: str = "default",
                  redact: list[str] | None = None) -> Recording:
    """The recording of `thread_id` as the history of `agent`'s checkpointer holds it."""
    from antler import __version__
    from antler.runtime.models.scripted import ErrorSpec, TurnSpec

    patterns = list(redact if redact is not None else agent.config.record.redact)
    redactor = Redactor(patterns)
    snapshots = list(agent.graph.get_state_history(agent.run_config(thread_id)))
    snapshots.reverse()  # oldest first
    first_seen: dict[str, Any] = {}
    order: list[str] = []
    ended: dict[str, Mapping[str, Any]] = {}
    for snapshot in snapshots:
        messages = list(snapshot.values.get("messages") or [])
        last_input = None
        for message in messages:
            key = message.id or f"#{len(order)}"
            if key not in first_seen:
                first_seen[key] = message
                order.append(key)
            if _is_input(message):
                last_input = key
        if last_input is not None:
            ended[last_input] = snapshot.values  # the latest checkpoint of that run
    conversation = [first_seen[key] for key in order]
    header = RecordingHeader(
        format=RECORDING_FORMAT, antler_version=__version__, source="thread-export",
        config={"source": str(agent.config.source), "digest": config_digest(agent.config)},
        chain=list(agent.chain.names), thread_id=thread_id,
        identity={"user_id": user_id, "roles": []},
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"), redact=patterns)
    recording = Recording(recording=header)
    previous_stop: Any = None
    starts = [index for index, message in enumerate(conversation) if _is_input(message)]
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(conversation)
        human = conversation[start]
        files = (human.additional_kwargs or {}).get("files") or []
        item = RecordedInput(
            text=redactor.text(message_text(human)),
            uploads=[str(f.get("filename")) for f in files
                     if isinstance(f, Mapping) and f.get("filename")])
        replies = []
        for index in range(start + 1, end):
            message = conversation[index]
            kind = getattr(message, "type", None)
            if kind == "ai" and not is_hidden(message):
                fallback = error_fallback_of(message)
                if fallback is not None:
                    recording.turns.append(TurnSpec(error=ErrorSpec(
                        kind="generic", message=redactor.text(str(
                            fallback.get("reason") or fallback.get("error_type") or "")) or None)))
                else:
                    recording.turns.append(reply_turn(message, redactor))
                    replies.append(message)
                item.calls += 1
                item.requests.append(request_shape(conversation[:index], redactor))
            elif kind == "tool":
                item.tool_results[str(message.tool_call_id)] = RecordedToolResult(
                    name=str(message.name or "tool"),
                    status="error" if getattr(message, "status", "") == "error" else "success",
                    content=redactor.data(message.content))
        state = ended.get(human.id or "", {"messages": conversation[:end]})
        outcome = summarize_turn(state, replies,
                                 hidden=hidden_notes(conversation[start + 1:end]),
                                 previous_stop=previous_stop)
        previous_stop = state.get("antler_stop_reason") or previous_stop
        item.observed = type(outcome).model_validate(redactor.data(outcome.model_dump()))
        recording.recording.inputs.append(item)
    final = snapshots[-1].values if snapshots else {}
    if isinstance(final.get("title"), str) and final["title"]:
        recording.title.append(TurnSpec(content=redactor.text(final["title"])))
    return recording
