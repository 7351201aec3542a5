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
- Every state key but ``messages`` is the server's (``title``, ``todos``, ...):
  `check_input_keys` refuses input holding one before the graph runs. The
  graph's input step writes one only for an internal run
  (`RunContext.is_internal`: the harness's own CLI, a resume), as the trusted
  caller's own write; no plugin writes it on the caller's behalf, so the state
  ownership guard (`antler.chain.stateowners`) has nothing to allow. For any
  other run the step holds the values in the record, and the boundary guard
  drops and reports them.

The same wrapping lists every node's writes to ``messages`` (`record_message_writes`,
the journal of `antler.contracts.writes`), so a hook that keeps per-message
results learns which messages changed since its last mark without comparing
the whole history.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from antler.compat import channel_writes, default_bound
from antler.contracts.messages import message_role, refusal_text
from antler.contracts.runcontext import run_context
from antler.contracts.serverkeys import ARRIVALS_KEY
from antler.contracts.writes import WRITES_KEY
from antler.errors import InputError

__all__ = ["INPUT_KEYS", "check_input", "check_input_keys", "input_step_in_run_context",
           "message_role", "record_arrivals",
           "record_message_writes", "refusal_text"]

INPUT_KEYS = frozenset({"messages"})
"""The state keys a caller's input may write; every other key is the server's."""

def check_input(messages: Sequence[Any], allowed: Collection[str],
                history_ids: Callable[[], Collection[str]], *,
                served: bool = False) -> list[Any]:
    """The input `messages` as message objects, checked and with ids the history lacks.

    Raises `InputError` naming every message of a role not in `allowed`
    (`served`: see `refusal_text`). `history_ids` is called only when some
    message carries an id of its own.
    """
    from langchain_core.messages import convert_to_messages

    try:
        converted = list(convert_to_messages(messages))
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise InputError(f"graph input holds something that is not a message: {exc}") from None
    problems = [refusal_text(i, message, allowed, served=served)
                for i, message in enumerate(converted, 1)
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


def check_input_keys(payload: Any, *, served: bool = False) -> None:
    """Raise `InputError` when the graph input `payload` writes a state key besides messages.

    `served`: see `refusal_text`.
    """
    extra = sorted(str(key) for key in payload if key not in INPUT_KEYS) \
        if isinstance(payload, Mapping) else []
    if extra:
        raise InputError(
            f"graph input sets state key(s) {', '.join(map(repr, extra))}, which only the "
            "server writes: send the turn as `{'messages': [...]}`"
            + ("" if served else " (a server that seeds state uses `graph.update_state`)"))


def record_arrivals(graph: Any) -> bool:
    """Make `graph`'s input step record which messages a run received.

    The input step's own write of ``messages`` is kept; its messages get their
    ids there (as the ``messages`` reducer would give them) and their ids go to
    the `ARRIVALS_KEY` channel. False (nothing changed) when the graph has no
    such channel, i.e. no plugin of its chain reads the record.
    """
    from langgraph.constants import START

    start = graph.nodes.get(START)
    if ARRIVALS_KEY not in graph.channels or start is None or not start.writers:
        return False
    return _wrap_writes(start, _with_arrivals, first_only=True, in_run_context=True)


def input_step_in_run_context(graph: Any) -> None:
    """Make the writes of `graph`'s input step see the run's context, once it is built.

    An input step that runs only writers (no hooks fused into it) gets them
    combined into one writer here, as LangGraph would combine them into a plain
    `ChannelWrite` when it first runs the node; combined here, the run-context
    writer of `record_arrivals` stays the one that runs. A fused input step
    runs its writes inside its hooks' node, in the run's context already.
    """
    from langgraph.constants import START
    ChannelWrite = channel_writes()[0]
    start = graph.nodes.get(START)
    if start is None or start.bound is not default_bound() or len(start.writers) < 2 or \
            not all(isinstance(writer, ChannelWrite) for writer in start.writers):
        return
    first = start.writers[0]
    start.writers[:] = [type(first)([entry for writer in start.writers
                                     for entry in writer.writes], tags=first.tags)]
    for cached in ("flat_writers", "node"):
        start.__dict__.pop(cached, None)


def record_message_writes(graph: Any) -> bool:
    """Make every node of `graph` list the messages it writes in the `WRITES_KEY` journal.

    Each write of ``messages`` (a node's update, a `Command`, ``update_state``
    as that node) adds the ids it writes or removes; messages without an id get
    theirs there, as the reducer would give them. False when the graph has no
    such channel (no plugin of its chain reads the journal).
    """
    if WRITES_KEY not in graph.channels:
        return False
    for node in graph.nodes.values():
        _wrap_writes(node, _journaled, first_only=False)
    return True


def _wrap_writes(node: Any, wrap: Callable[[Callable[[Any], Any]], Callable[[Any], Any]],
                 *, first_only: bool, in_run_context: bool = False) -> bool:
    """Wrap the mappers of `node`'s state writes (the first one only with `first_only`).

    `in_run_context`: the wrapped mappers run where `langgraph.config.get_config`
    (and so the run's `RunContext`) answers, which LangGraph does not promise
    for a node's writes. Where it still does not (a writer LangGraph combines
    anew), the run counts as not internal: its state keys are dropped.
    """
    ChannelWrite, _, ChannelWriteTupleEntry = channel_writes()
    changed = False
    for position, writer in enumerate(node.writers):
        if not isinstance(writer, ChannelWrite):
            continue
        writes: list[Any] = []
        for entry in writer.writes:
            if isinstance(entry, ChannelWriteTupleEntry) and not (first_only and changed):
                entry = ChannelWriteTupleEntry(mapper=wrap(entry.mapper), value=entry.value,
                                               static=entry.static)
                changed = True
            writes.append(entry)
        # The writer's own class is kept: a later wrapping keeps `in_run_context`.
        write_class = _write_in_run_context() if in_run_context and changed else type(writer)
        node.writers[position] = write_class(tuple(writes), tags=writer.tags)
        if first_only and changed:
            break
    # The node caches its combined writers on first use: drop what was built from the old ones.
    for cached in ("flat_writers", "node"):
        node.__dict__.pop(cached, None)
    return changed


@functools.cache
def _write_in_run_context() -> type[Any]:
    """A `ChannelWrite` whose mappers see the run's config through `get_config`."""
    from langchain_core.runnables.config import RunnableConfig, var_child_runnable_config
    ChannelWrite = channel_writes()[0]

    class WriteInRunContext(ChannelWrite):  # type: ignore[misc,valid-type]
        def _write(self, input: Any, config: RunnableConfig) -> Any:
            token = var_child_runnable_config.set(config)
            try:
                return super()._write(input, config)
            finally:
                var_child_runnable_config.reset(token)

        async def _awrite(self, input: Any, config: RunnableConfig) -> Any:
            token = var_child_runnable_config.set(config)
            try:
                return await super()._awrite(input, config)
            finally:
                var_child_runnable_config.reset(token)

    return WriteInRunContext


def _with_arrivals(mapper: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def mapped(value: Any) -> list[tuple[str, Any]]:
        ids: list[str] = []
        kept: list[tuple[str, Any]] = []
        held: dict[str, Any] = {}
        internal: bool | None = None  # asked once, when the input holds a state key
        for key, written in mapper(value) or ():
            if key == "messages":
                messages = _identified(written)
                ids += [m.id for m in messages if m.type != "remove"]
                kept.append((key, messages))
            elif key in INPUT_KEYS:
                kept.append((key, written))
            else:
                if internal is None:
                    internal = _internal_run()
                if internal:
                    kept.append((key, written))  # the trusted caller's own write
                else:
                    # Server-owned state: held in the record, for the boundary
                    # guard to drop and report.
                    held[key] = written
        record: dict[str, Any] = {"ids": ids}
        if held:
            record["held"] = held
        kept.append((ARRIVALS_KEY, record))
        return kept

    return mapped


def _internal_run() -> bool:
    """Whether the running graph's run is internal (`RunContext.is_internal`)."""
    try:
        runtime = _runtime_reader()()
    except (RuntimeError, KeyError):  # no runtime: not a run a trusted caller started
        return False
    return run_context(runtime).is_internal is True


def _journaled(mapper: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def mapped(value: Any) -> list[tuple[str, Any]]:
        updates = list(mapper(value) or ())
        entry: dict[str, Any] | None = None
        for index, (key, written) in enumerate(updates):
            if key != "messages":
                continue
            entry = entry or {"ids": [], "removed": []}
            messages = _listable(written)
            if messages is None:
                entry["all"] = True
                continue
            updates[index] = (key, messages)
            for message in messages:
                if message.type != "remove":
                    entry["ids"].append(message.id)
                elif message.id == _REMOVE_ALL:
                    entry["all"] = True
                else:
                    entry["removed"].append(message.id)
        if entry is not None:
            # Last among the node's writes: a reader's new mark in the same update comes first.
            # When the node's last journal write is such a mark, the entry joins it: one
            # write that starts the list over and lists these (`merge_writes`).
            for index in range(len(updates) - 1, -1, -1):
                key, written = updates[index]
                if key == WRITES_KEY:
                    if type(written) is dict and written.keys() == {"base"}:
                        updates[index] = (key, {**written, **entry})
                        return updates
                    break
            updates.append((WRITES_KEY, entry))
        return updates

    return mapped


_REMOVE_ALL = "__remove_all__"
"""LangGraph's id for removing every message (`langgraph.graph.message.REMOVE_ALL_MESSAGES`)."""


def _listable(value: Any) -> list[Any] | None:
    """`value` as identified messages, or None when it is no list of messages."""
    if isinstance(value, list):
        kept = _KEPT_CLASSES
        for message in value:
            cls = type(message)
            if not (kept[cls] if cls in kept else _kept_class(cls)) or not message.id:
                break
        else:
            return value  # the common write: messages with their ids, nothing to convert
    if not isinstance(value, (list, str, dict, tuple)) and not hasattr(value, "type"):
        return None  # an Overwrite or another value only the reducer understands
    try:
        return _identified(value)
    except (ValueError, TypeError, NotImplementedError):
        return None  # the reducer reports it


_KEPT_CLASSES: dict[type, bool] = {}
"""Per class: whether the reducer keeps its instances as they are (a message, not a chunk)."""


def _kept_class(cls: type) -> bool:
    """Whether `add_messages` keeps an instance of `cls` as it is, worked out once per class
    (an `isinstance` test against a message class goes through pydantic's metaclass)."""
    from langchain_core.messages import BaseMessage, BaseMessageChunk

    kept = issubclass(cls, BaseMessage) and not issubclass(cls, BaseMessageChunk)
    _KEPT_CLASSES[cls] = kept
    return kept


def _identified(value: Any) -> list[Any]:
    """The written messages as message objects, each with an id given by the reducer's rule."""
    items: Iterable[Any] = value if isinstance(value, list) else [value]
    kept = _KEPT_CLASSES
    if all(kept[cls] if (cls := type(m)) in kept else _kept_class(cls) for m in items):
        messages = list(items)  # message objects already: the conversion keeps them as they are
    else:
        from langchain_core.messages import convert_to_messages, message_chunk_to_message

        messages = [message_chunk_to_message(m) for m in convert_to_messages(items)]
    for message in messages:
        if message.id is None and message.type != "remove":
            # The reducer's rule (`add_messages`): a fresh uuid4, set on the message itself
            # (its module's `uuid`, looked up at the call).
            message.id = str(_reducer_module().uuid.uuid4())
    return messages


@functools.cache
def _reducer_module() -> Any:
    """`langgraph.graph.message`, the module of `add_messages`, imported once."""
    import langgraph.graph.message as reducer

    return reducer


@functools.cache
def _runtime_reader() -> Callable[[], Any]:
    """LangGraph's `get_runtime`, imported once (asked on every run's input)."""
    from langgraph.runtime import get_runtime

    return get_runtime
