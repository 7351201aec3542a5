"""State updates from outside the graph: held to the boundary a run's input passes.

LangGraph Server lets the owner of a thread write its channels without a run:
the state API (``threads.update_state``, with or without ``as_node``), the
supersteps of ``threads.create`` and a fork (``as_node="__copy__"`` with
updates). Those writes skip the graph's input step, and with it the input
boundary (README, "Caller input"), so the served graph checks them itself
(`StateUpdateBoundary.check`) before LangGraph applies them:

- only ``messages`` may be written: every other state key (``title``,
  ``todos``, a plugin's private channels) is the server's (`check_input_keys`);
- every message must have a role the operator allows (``input: {allow_roles}``,
  human only by default) and never removes one (`check_input`);
- a message whose id the thread already has gets a fresh id, so an update adds
  to the history but never replaces part of it;
- server-owned ``additional_kwargs`` keys (`antler.contracts.serverkeys`) are
  stripped, so a client cannot hide a message or forge a plugin's mark;
- an update without values (LangGraph's "the node ran and wrote nothing")
  would move the thread past hooks that never ran, and a `Command` would write
  or jump: both are refused. Clearing a paused run (``as_node="__end__"``) and a
  plain fork (``as_node="__copy__"``) write nothing and pass.

A refusal raises `InputError` naming the update and how to send it instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from antler.contracts.serverkeys import strip_server_owned
from antler.errors import InputError

from .inputs import check_input, check_input_keys

__all__ = ["COPY_NODE", "END_NODE", "StateUpdateBoundary"]

COPY_NODE = "__copy__"
"""LangGraph's `as_node` for a fork: the checkpoint copied, then its updates applied."""
END_NODE = "__end__"
"""LangGraph's `as_node` that, without values, clears a paused run's pending tasks."""
_WITHOUT_VALUES = frozenset({COPY_NODE, END_NODE})


class StateUpdateBoundary:
    """The roles a client may write and the keys it may not set, for state updates."""

    def __init__(self, allow_roles: Collection[str], server_owned: Collection[str]) -> None:
        self.allow_roles = frozenset(allow_roles)
        self.server_owned = frozenset(server_owned)

    def check(self, supersteps: Iterable[Sequence[Any]],
              history_ids: Callable[[], Collection[str]]) -> list[list[Any]]:
        """`supersteps` (of LangGraph `StateUpdate`s) as they may be applied, or `InputError`.

        `history_ids` gives the ids of the thread's messages; it is called at
        most once, and only when an update carries a message with an id.
        """
        from langgraph.types import StateUpdate

        taken: set[str] | None = None

        def ids() -> set[str]:
            nonlocal taken
            if taken is None:
                taken = set(history_ids())
            return taken

        checked: list[list[Any]] = []
        for step, updates in enumerate(supersteps, 1):
            row = []
            for position, update in enumerate(updates, 1):
                values, as_node, task_id = _fields(update)
                where = f"state update {position} of superstep {step}"
                row.append(StateUpdate(self._values(values, as_node, where, ids), as_node,
                                       task_id))
            checked.append(row)
        return checked

    def _values(self, values: Any, as_node: Any, where: str,
                ids: Callable[[], set[str]]) -> Any:
        if values is None:
            if as_node in _WITHOUT_VALUES:
                return None
            raise InputError(
                f"{where} has no values (as_node={as_node!r}): it would move the thread past "
                "hooks that never ran; send `{'messages': [...]}`, or continue a paused run "
                "with `Command(resume=...)`")
        if as_node == COPY_NODE and isinstance(values, list):
            nested = [self._values(*_fields(item)[:2], f"{where}, fork update {n}", ids)
                      for n, item in enumerate(values, 1)]
            return [(value, _fields(item)[1]) for value, item in zip(nested, values,
                                                                    strict=True)]
        if not isinstance(values, Mapping):
            raise InputError(
                f"{where} is a {type(values).__name__}, not `{{'messages': [...]}}`: a "
                "Command or another value would write the thread's channels or jump past "
                "the input checks")
        try:
            check_input_keys(values, served=True)
            messages = values.get("messages")
            listed = messages if isinstance(messages, list) else \
                [] if messages is None else [messages]
            fresh = check_input(listed, self.allow_roles, ids, served=True)
        except InputError as error:
            raise InputError(f"{where}: {error}") from None
        for message in fresh:
            if message.id:
                ids().add(message.id)
        return {"messages": [strip_server_owned(message, self.server_owned)[0]
                             for message in fresh]}


def _fields(update: Any) -> tuple[Any, Any, Any]:
    """(values, as_node, task_id) of a `StateUpdate` or a shorter tuple."""
    if isinstance(update, Sequence) and not isinstance(update, (str, bytes)) \
            and 1 <= len(update) <= 3:
        items = tuple(update) + (None,) * (3 - len(update))
        return items[0], items[1], items[2]
    return update, None, None
