"""The input boundary: what a caller sent this run, cleaned or refused before any model call.

The graph's input step records the ids of the messages a run received
(`antler.runtime.inputs.record_arrivals`, private channel `ARRIVALS_KEY`).
For a run that is not internal, `InputBoundary.inspect` looks at exactly those
messages:

- every server-owned ``additional_kwargs`` key (`antler.contracts.serverkeys`:
  the core's and every installed plugin's ``server_owned_keys``) is stripped;
- a message whose role the operator did not allow (``input: {allow_roles}``,
  human only by default) is refused: `Verdict.update` removes it from the
  state (`RemoveMessage`), adds a visible error reply marked as an error
  fallback (`antler.contracts.fallback`), records the stop reason
  ``input_refused`` and ends the run, so no model sees it;
- state keys besides ``messages`` in the input (``title``, ``todos``, ...) are
  server-owned: the input step held them back in the record
  (`antler.runtime.inputs`, `held_state`); they are dropped and reported (an
  internal run's are written by the input step itself, never held).

Both are logged to ``antler.audit.input`` and written to the run's custom
stream as ``{"type": "input_boundary", ...}``.

The lookup walks the history from its end and stops once every arrival is
found, so its cost follows the input, not the thread (a message that replaced
an earlier one by id is found further back).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AnyMessage, RemoveMessage

from antler.plugin_api import (
    ARRIVALS_KEY,
    error_fallback_message,
    message_role,
    record_stop_reason,
    refusal_text,
    strip_server_owned,
)

__all__ = ["AUDIT_LOGGER", "REFUSED_REASON", "InputBoundary", "Verdict", "arrival_ids",
           "held_state"]

AUDIT_LOGGER = logging.getLogger("antler.audit.input")
REFUSED_REASON = "input_refused"
"""The stop reason (and error type of the reply) of a run whose input was refused."""


def arrival_ids(state: Any) -> list[str] | None:
    """The ids the input step recorded for this run (None: no record, e.g. a bare graph)."""
    record = state.get(ARRIVALS_KEY) if isinstance(state, Mapping) else None
    ids = record.get("ids") if isinstance(record, Mapping) else None
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else None


def held_state(state: Any) -> dict[str, Any]:
    """The state keys besides messages this run's input set, held back by the input step."""
    record = state.get(ARRIVALS_KEY) if isinstance(state, Mapping) else None
    held = record.get("held") if isinstance(record, Mapping) else None
    return dict(held) if isinstance(held, Mapping) else {}


@dataclass
class Verdict:
    """What the boundary found among one run's arrivals."""

    stripped: dict[str, AnyMessage] = field(default_factory=dict)
    """Message id -> the message without its server-owned keys."""
    removed_keys: dict[str, list[str]] = field(default_factory=dict)
    refused: list[tuple[int, AnyMessage]] = field(default_factory=list)
    """(position in the input, message) of each message of a role that is not allowed."""
    allowed: Collection[str] = ()
    dropped_keys: list[str] = field(default_factory=list)
    """State keys besides messages the input set: dropped, never written."""

    def strip(self, message: AnyMessage, keys: Collection[str]) -> AnyMessage:
        """`message` without server-owned keys, remembered for the state update."""
        clean, removed = strip_server_owned(message, keys)
        if removed and message.id:
            self.stripped[message.id] = clean
            self.removed_keys[message.id] = removed
        return clean

    def update(self, runtime: Any) -> dict[str, Any]:
        """The state update: cleaned messages, and for a refusal the removal and the reply."""
        messages: list[Any] = list(self.stripped.values())
        if not self.refused:
            return {"messages": messages} if messages else {}
        problems = [refusal_text(position, message, self.allowed)
                    for position, message in self.refused]
        messages += [RemoveMessage(id=str(message.id)) for _, message in self.refused]
        messages.append(error_fallback_message(
            "I could not take this request: its input holds messages that only the server "
            "may write. " + "; ".join(problems) + ".",
            error_type=REFUSED_REASON, reason="input holds a message role callers may not send",
            detail="; ".join(problems)))
        return {"messages": messages, "jump_to": "end",
                **record_stop_reason(REFUSED_REASON, runtime, detail="; ".join(problems))}

    def report(self, runtime: Any) -> None:
        """Log and stream what was stripped or refused (nothing when nothing was)."""
        if not self.removed_keys and not self.refused and not self.dropped_keys:
            return
        refused = [{"position": p, "role": message_role(m), "id": m.id}
                   for p, m in self.refused]
        AUDIT_LOGGER.warning("caller input: stripped server-owned keys %s; refused %s; "
                             "dropped state keys %s", self.removed_keys or "none",
                             refused or "none", self.dropped_keys or "none")
        writer = getattr(runtime, "stream_writer", None)
        if writer is None:
            return
        try:
            writer({"type": "input_boundary", "stripped": self.removed_keys,
                    "refused": refused, "dropped_state_keys": self.dropped_keys})
        except Exception:  # no custom stream to write to is not a failure of the run
            AUDIT_LOGGER.debug("input boundary: could not write the stream event",
                               exc_info=True)


class InputBoundary:
    """The server-owned keys to strip and the message roles a caller may send."""

    def __init__(self, keys: Collection[str], allow_roles: Collection[str] = ("human",)) -> None:
        self.keys = frozenset(keys)
        self.allow_roles = frozenset(allow_roles)

    def inspect(self, messages: Sequence[AnyMessage], ids: Sequence[str]) -> Verdict:
        """The verdict on the messages of `messages` whose ids are `ids`, the run's arrivals."""
        verdict = Verdict(allowed=self.allow_roles)
        position = {message_id: n for n, message_id in enumerate(ids, 1)}
        pending = set(position)
        for message in reversed(messages):
            if not pending:
                break
            if message.id not in pending:
                continue
            pending.discard(message.id)
            if message_role(message) not in self.allow_roles:
                verdict.refused.append((position[message.id], message))
            else:
                verdict.strip(message, self.keys)
        verdict.refused.sort(key=lambda item: item[0])
        return verdict
