"""The message-write journal: which messages any write touched since a reader's last mark.

Every checkpoint reload gives a run new message objects, equal to the saved
ones, so a hook that keeps per-message results cannot tell by identity which
messages are new or were rewritten since it last looked; comparing every
message by value would cost as much as redoing its work. The graph therefore
lists, in the private channel `WRITES_KEY`, the ids of the messages every write
to ``messages`` touched (`antler.runtime.inputs.record_message_writes` wraps the
writes of every node, the input step's included, so ``update_state`` through
a node is listed too). A reader writes ``{"base": token}`` with its own state
update: the list starts over, and ``base`` tells the next run which of the
reader's records the list continues from. A node that marks and writes messages
in one update writes one entry, the mark with its writes listed.

A write the journal cannot follow message by message (an ``Overwrite``, the
removal of all messages, a value that is no message list) sets ``all``; so
does a list grown past `LIMIT` ids. A reader then starts from the state as it
is. A graph without the channel (one its chain's plugins do not declare) keeps
no journal.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from antler.contracts.folding import folds_with

__all__ = ["LIMIT", "WRITES_KEY", "MessageWrites", "fold_writes", "merge_writes"]

WRITES_KEY = "antler_message_writes"
"""Private state channel holding `MessageWrites`."""

LIMIT = 5_000
"""Ids listed before the journal gives up and says ``all``."""


class MessageWrites(TypedDict):
    base: str | None
    """The token of the reader's record this list continues from (None: no reader mark)."""
    ids: list[str]
    """Ids written (added or replaced) since the mark, in write order."""
    removed: list[str]
    """Ids removed since the mark."""
    all: NotRequired[bool]
    """A write the list cannot follow: the reader starts from the state as it is."""
    recorded: NotRequired[bool]
    """Some node listed its writes since the mark: the graph keeps the journal (a graph
    built without `record_message_writes` never sets it, and its readers never trust it)."""


def fold_writes(values: list[Any]) -> list[Any]:
    """The writes of one superstep from its last ``{"base": token}`` on: a mark starts the
    list over, so what came before it changes nothing (`antler.contracts.folding`)."""
    for index in range(len(values) - 1, 0, -1):
        change = values[index]
        if isinstance(change, dict) and "base" in change:
            return values[index:]
    return values


@folds_with(fold_writes)
def merge_writes(current: MessageWrites | None, change: Any) -> MessageWrites:
    """The channel's reducer: ``{"base": token}`` starts a new list, anything else adds to it.

    A mark that also lists writes (``{"base": token, "ids": [...], ...}``, a node's mark and
    its own writes in one) starts the list over and then adds them.
    """
    if isinstance(change, dict) and "base" in change:
        start: MessageWrites = {"base": change["base"], "ids": [], "removed": [], "all": False,
                                "recorded": False}
        if len(change) == 1:
            return start
        return merge_writes(start, {key: value for key, value in change.items()
                                    if key != "base"})
    base: MessageWrites = current if isinstance(current, dict) else {
        "base": None, "ids": [], "removed": [], "all": False, "recorded": False}
    if not isinstance(change, dict):
        return base
    ids = [*base.get("ids", ()), *change.get("ids", ())]
    removed = [*base.get("removed", ()), *change.get("removed", ())]
    everything = bool(base.get("all") or change.get("all")) or len(ids) + len(removed) > LIMIT
    return {"base": base.get("base"), "ids": [] if everything else ids,
            "removed": [] if everything else removed, "all": everything, "recorded": True}
