"""Per-message results kept across calls, so a hook's work follows the new messages only.

A hook that derives something from every message of the history (a digest, a
sanitized copy, a filtered copy) would redo that work for the whole history on
every call. `MessageMemo` keeps each result by message id, with the message it
was computed from, and reuses it while the message is unchanged (the same
object, or an equal one as a checkpoint reload gives, which then replaces the
kept one). Reusing costs a lookup and an identity test (an equality test the
first time a run sees its reloaded copy), so a call's real work is
proportional to the messages that are new or changed since the last one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

DEFAULT_LIMIT = 10_000
"""Entries kept before the memo starts over. Each entry holds its message and the
result (often a copy of it), so this bounds what a long-lived server keeps for
threads whose runs have ended: about a thousand threads of the demo's size, or
five threads of 2,000 messages each, before a thread's next run computes its
history once more. A history longer than the limit is computed afresh on every
call, as it would be without the memo."""


class MessageMemo(Generic[T]):
    """`compute(message)`, remembered by message id while the message stays the same.

    The result is the one `compute` gives for an equal message, so a memo can
    only save work, never change an answer: a message replaced under its id, or
    a different message that happens to share an id, is computed afresh. A
    message without an id is always computed. When `limit` entries are held,
    the memo is emptied and refills with the messages in use.
    """

    def __init__(self, compute: Callable[[Any], T], *, limit: int = DEFAULT_LIMIT) -> None:
        self.compute = compute
        self.limit = limit
        self._entries: dict[str, tuple[Any, T]] = {}

    def __call__(self, message: Any) -> T:
        key = getattr(message, "id", None)
        if not key:
            return self.compute(message)
        entry = self._entries.get(key)
        if entry is not None:
            kept, value = entry
            if kept is message:
                return value
            if _same(kept, message):
                # An equal copy (each run reloads the thread from its checkpoint): keep
                # this one, so the run's later passes find it by identity.
                self._entries[key] = (message, value)
                return value
        value = self.compute(message)
        if len(self._entries) >= self.limit:
            self._entries.clear()
        self._entries[key] = (message, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)


def _same(kept: Any, message: Any) -> bool:
    """Whether two messages are equal field by field (a fifth of pydantic's `==` cost)."""
    return type(kept) is type(message) and kept.__dict__ == message.__dict__
