"""The record of which `HumanMessage`s are the user's own, shared by input_sanitization and
input_provenance.

`input_sanitization` tells the user's own messages from the server's rewrites
of them by fingerprints kept in private state (`InputSanitizationState`'s
``input_provenance``); `input_provenance` takes the same record again after
every ``before_agent`` hook. Both plugins write it with `record_current_form`
and the thread's ledger (`antler.plugins._lib.inputledger`), so neither
imports the other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AnyMessage, BaseMessage

from antler.plugin_api import (
    WRITES_KEY,
    MessageMemo,
    MessageWrites,
    StopReasonState,
    folds_with,
    merge_writes,
)

from . import inputledger as ledgers
from .inputledger import Ledger

__all__ = [
    "ORIGINAL_CONTENT_KEY",
    "PROVENANCE_KEY",
    "InputProvenance",
    "InputSanitizationState",
    "ProvenanceChange",
    "change_of",
    "fingerprint",
    "fold_provenance",
    "ledger_for",
    "merge_provenance",
    "observed_change",
    "record_current_form",
    "recorded",
    "settled",
]


ORIGINAL_CONTENT_KEY = "original_user_content"
"""``additional_kwargs`` key: the user's own text (server-owned, first writer wins)."""

PROVENANCE_KEY = "input_provenance"
"""Private state key holding `InputProvenance`."""

class InputProvenance(TypedDict):
    """Who wrote which `HumanMessage`, as far as the server knows."""

    seen: dict[str, str]
    """Message id -> `fingerprint` of the message as the server last saw it."""
    user: list[str]
    """Ids of messages that came in through the graph input: the genuine user messages."""
    token: NotRequired[str | None]
    """Set by every write of the record (`ledger`): which in-process ledger wrote it last."""


class ProvenanceChange(TypedDict, total=False):
    """One write of the record: what changed since it was last written."""

    seen: dict[str, str]
    """Ids whose fingerprint is new or changed, with the new fingerprint."""
    user: list[str]
    """Ids that became genuine user messages."""
    gone: list[str]
    """Ids no longer in the thread: dropped from `seen` and `user`."""
    token: str
    """The writer's ledger token (a change without one leaves the record without one)."""


def fold_provenance(changes: list[Any]) -> list[Any]:
    """Changes written in one step as one that `merge_provenance` applies the same way.

    Each change removes its ``gone`` ids, then adds its ``seen`` and ``user``; one change
    removes every change's ``gone`` first, so an entry an earlier change added is kept
    only when no later change removed it. The last change's ``token`` is the record's.
    The changes are returned unchanged when one is no dict.
    """
    if not all(type(change) is dict for change in changes):
        return changes
    gone: set[str] = set()
    seen: dict[str, str] = {}
    user: list[str] = []
    for change in changes:
        removed = set(change.get("gone") or ())
        if removed:
            gone |= removed
            seen = {i: d for i, d in seen.items() if i not in removed}
            user = [i for i in user if i not in removed]
        seen.update(change.get("seen") or {})
        user.extend(change.get("user") or ())
    folded: dict[str, Any] = {"seen": seen, "user": user, "token": changes[-1].get("token")}
    if gone:
        folded["gone"] = sorted(gone)
    return [folded]


@folds_with(fold_provenance)
def merge_provenance(current: InputProvenance | None, change: Any) -> InputProvenance:
    """The record's reducer: `change` applied to `current`, neither modified.

    The record is written as changes, so a turn writes its own messages' entries
    rather than the whole record (and a delta checkpoint stores only those).
    """
    base: Any = current or {}
    seen: dict[str, str] = dict(base.get("seen") or {})
    user: list[str] = list(base.get("user") or [])
    if not isinstance(change, dict):
        return {"seen": seen, "user": user}
    removed = change.get("gone")
    if removed:
        gone = set(removed)
        seen = {i: d for i, d in seen.items() if i not in gone}
        user = [i for i in user if i not in gone]
    seen.update(change.get("seen") or {})
    joined = change.get("user")
    if joined:  # the list is looked up only when ids join it (the record's largest part)
        known = set(user)
        for message_id in joined:
            if message_id not in known:
                known.add(message_id)
                user.append(message_id)
    return {"seen": seen, "user": user, "token": change.get("token")}


class InputSanitizationState(StopReasonState):
    # Private (never in the graph's input or output schema): a caller cannot
    # declare its own messages injected, or pre-approve a forged provenance.
    # The reducer goes last: LangGraph takes a field's reducer from its last annotation.
    input_provenance: NotRequired[Annotated[InputProvenance, PrivateStateAttr,
                                            merge_provenance]]
    # Written by the graph's input step only (antler.runtime.inputs.record_arrivals).
    antler_input_arrivals: NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr]]
    # Every node's message writes since the ledger's mark (antler.contracts.writes).
    antler_message_writes: NotRequired[Annotated[MessageWrites, PrivateStateAttr,
                                                 merge_writes]]


def fingerprint(message: BaseMessage) -> str:
    """A stable digest of what decides how a `HumanMessage` is treated.

    Computed once per message and kept (`MessageMemo`): the provenance record
    asks for every user message's digest several times a turn.
    """
    return _fingerprints(message)


_DIGESTED = json.JSONEncoder(sort_keys=True, default=repr, ensure_ascii=False)
"""`json.dumps(..., sort_keys=True, default=repr, ensure_ascii=False)`, its encoder made once."""
_quoted: Callable[[str], str] = encode_basestring
"""How that encoder writes a string (quoted and escaped, non-ASCII kept)."""


def _digest(message: BaseMessage) -> str:
    kwargs = message.additional_kwargs or {}
    name, content, original = message.name, message.content, kwargs.get(ORIGINAL_CONTENT_KEY)
    if type(content) is str and _plain(name) and _plain(original):
        # Text and nothing else (almost every message): the JSON list written directly,
        # the same text the encoder writes for it, without setting the encoder up.
        payload = f"[{_json_text(name)}, {_quoted(content)}, {_json_text(original)}]"
    else:
        payload = _DIGESTED.encode([name, content, original])
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _plain(value: Any) -> bool:
    return value is None or type(value) is str


def _json_text(value: str | None) -> str:
    return "null" if value is None else _quoted(value)


_fingerprints: MessageMemo[str] = MessageMemo(_digest)


def record_current_form(state: Any) -> dict[str, Any] | None:
    """The state update recording every `HumanMessage` as it is now (None: nothing new).

    Works on what changed since the thread's ledger last looked (`ledger`).
    """
    messages = (state.get("messages") if isinstance(state, dict) else None) or []
    ledger = ledger_for(state, messages)
    return settled(ledger, observed_change(ledger))


def settled(ledger: Ledger, change: ProvenanceChange | None) -> dict[str, Any] | None:
    """Keep `ledger` after a hook compared the record: the update to write (None: none)."""
    if not change:
        ledger.settle(None, ledger.token, observed=True)
        if ledger.token:  # nothing written: it stays under the mark the state holds
            ledgers.keep(ledger, ledger.token)
        return None
    token = ledgers.new_token()
    ledger.settle(change, token, observed=True)
    ledger.marked()
    ledgers.keep(ledger, token)
    return {PROVENANCE_KEY: {**change, "token": token}, WRITES_KEY: {"base": token}}


def ledger_for(state: Any, messages: Sequence[AnyMessage]) -> Ledger:
    """The thread's ledger caught up with `messages` of the same run, or one built afresh."""
    ledger = ledgers.take(state, PROVENANCE_KEY)
    if ledger is None:
        return Ledger.rebuild(messages, recorded(state), fingerprint)
    ledger.follow(messages, fingerprint)
    return ledger


def recorded(state: Any) -> Any:
    return state.get(PROVENANCE_KEY) if isinstance(state, dict) else None


def _observed(messages: Sequence[AnyMessage], previous: Any) -> ProvenanceChange | None:
    """The change recording the current form of every `HumanMessage`, gone ones dropped.

    Taken from scratch: every message is looked at (the hooks keep a ledger instead).
    """
    return observed_change(Ledger.rebuild(messages, previous, fingerprint))


def observed_change(ledger: Ledger) -> ProvenanceChange | None:
    # A user message a plugin re-added under a new id (dynamic_context's ID swap)
    # stays the user's: it is sanitized like the original.
    return change_of(ledger.changed(), ledger.readded(), ledger.gone_ids())


def change_of(seen: dict[str, str], user: list[str], gone: list[str]) -> ProvenanceChange | None:
    """The record's write for these entries (None: nothing to write)."""
    change: ProvenanceChange = {}
    if seen:
        change["seen"] = seen
    if user:
        change["user"] = user
    if gone:
        change["gone"] = gone
    return change or None
