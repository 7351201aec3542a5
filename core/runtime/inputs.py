"""Caller input: which message roles a run accepts, and the record of what arrived.

Two checks guard what a caller sends (README, "Caller input"):

- `AntlerAgent.invoke`/`stream` check the input before the graph runs
  (`check_input`): a message whose role the operator did not allow
  (`input: {allow_roles: [...]}`, human only by default) is refused with an
  `InputError`, and a message whose id the thread's history already has gets a
  fresh id, so input can add to the history but never replace part of it.
- Whoever calls the compiled graph directly is checked inside it: the graph's
  input step records the ids of the messages it received (`record_arrivals`,
  into the private channel `antler.contracts.serverkeys.ARRIVALS_KEY`), and
  input_sanitization's ``before_agent`` guard strips server-owned keys from
  those messages and refuses the ones of a role that is not allowed. Messages
  the server seeds with ``update_state`` never pass the input step, so they
  are never mistaken for caller input.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from antler.contracts.serverkeys import ARRIVALS_KEY
from antler.errors import InputError

__all__ = ["check_input", "message_role", "record_arrivals", "refusal_text"]

_CLASS_OF_ROLE = {"human": "HumanMessage", "ai": "AIMessage", "tool": "ToolMessage",
                  "system": "SystemMessage"}


def message_role(message: Any) -> str:
    """The role of a message as `input.allow_roles` names it (``human``, ``ai``, ...)."""
    return str(getattr(message, "type", None) or type(message).__name__)


def refusal_text(position: int, message: Any, allowed: Collection[str]) -> str:
    """Why message number `position` (1-based) of an input is refused, and how to allow it."""
    role = message_role(message)
    kind = type(message).__name__
    ident = f", id {message.id!r}" if getattr(message, "id", None) else ""
    allowed_text = ", ".join(sorted(allowed))
    if role in _CLASS_OF_ROLE:
        fix = (f"an operator who trusts its callers allows it with `input: {{allow_roles: "
               f"[{allowed_text}, {role}]}}`; a server that seeds history uses "
               "`graph.update_state`")
    elif role == "remove":
        fix = "input adds messages and never deletes one (a server edits history with " \
              "`graph.update_state`)"
    else:
        fix = f"send it as a {' or '.join(_CLASS_OF_ROLE[r] for r in sorted(allowed))}"
    return (f"input message {position} ({kind}{ident}) has role {role!r}, which callers may "
            f"not send (allowed: {allowed_text}): {fix}")


def check_input(messages: Sequence[Any], allowed: Collection[str],
                history_ids: Callable[[], Collection[str]]) -> list[Any]:
    """The input `messages` as message objects, checked and with ids the history lacks.

    Raises `InputError` naming every message of a role not in `allowed`.
    `history_ids` is called only when some message carries an id of its own.
    """
    from langchain_core.messages import convert_to_messages

    try:
        converted = list(convert_to_messages(messages))
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise InputError(f"graph input holds something that is not a message: {exc}") from None
    problems = [refusal_text(i, message, allowed) for i, message in enumerate(converted, 1)
                if message_role(message) not in allowed]
    if problems:
        raise InputError("; ".join(problems))
    if not any(message.id for message in converted):
        return converted
    taken = set(history_ids())
    fresh = []
    for message in converted:
        if message.id and message.id in taken:
            message = message.model_copy(update={"id": str(uuid.uuid4())})
        if message.id:
            taken.add(message.id)
        fresh.append(message)
    return fresh


def record_arrivals(graph: Any) -> bool:
    """Make `graph`'s input step record which messages a run received.

    The input step's own write of ``messages`` is kept; its messages get their
    ids there (as the ``messages`` reducer would give them) and their ids go to
    the `ARRIVALS_KEY` channel. False (nothing changed) when the graph has no
    such channel, i.e. no plugin of its chain reads the record.
    """
    from langgraph.constants import START
    from langgraph.pregel._write import ChannelWrite, ChannelWriteTupleEntry

    start = graph.nodes.get(START)
    if ARRIVALS_KEY not in graph.channels or start is None or not start.writers:
        return False
    first = start.writers[0]
    if not isinstance(first, ChannelWrite):
        return False
    writes: list[Any] = []
    for entry in first.writes:
        if isinstance(entry, ChannelWriteTupleEntry) and not writes:
            entry = ChannelWriteTupleEntry(mapper=_with_arrivals(entry.mapper),
                                           value=entry.value, static=entry.static)
        writes.append(entry)
    start.writers[0] = ChannelWrite(tuple(writes), tags=first.tags)
    return True


def _with_arrivals(mapper: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def mapped(value: Any) -> list[tuple[str, Any]]:
        updates = list(mapper(value) or ())
        ids: list[str] = []
        for index, (key, written) in enumerate(updates):
            if key == "messages":
                messages = _identified(written)
                ids += [m.id for m in messages if m.type != "remove"]
                updates[index] = (key, messages)
        updates.append((ARRIVALS_KEY, {"ids": ids}))
        return updates

    return mapped


def _identified(value: Any) -> list[Any]:
    """The written messages as message objects, each with an id given by the reducer's rule."""
    from langchain_core.messages import convert_to_messages, message_chunk_to_message
    from langgraph.graph.message import add_messages

    items: Iterable[Any] = value if isinstance(value, list) else [value]
    messages = [message_chunk_to_message(m) for m in convert_to_messages(items)]
    lacking: list[Any] = [m for m in messages if m.id is None and m.type != "remove"]
    if lacking:
        add_messages([], lacking)  # gives each its id in place, as the channel would
    return messages
