"""What a plugin's hook does besides returning: state changed in place, time taken, output size.

`antler.runtime.isolation` calls these around every hook of a plugin with limits
(`antler.chain.hooklimits`); each failure is raised inside the hook's isolation, so
the plugin's `on_error` decides (`fail` stops the run with the error, `skip` drops the
hook's update, or keeps its handler's result, and logs one line).

State changed in place (`StateMutationError`)
    A node hook is handed the state's own values: `state["messages"].clear()` or an
    append to another plugin's list would change the state past the write guard,
    which sees only what a hook returns. Before each node hook of a third-party
    plugin the identity and length of each state value are taken, with a shallow
    copy of each list, dict and set (pointers only: a few microseconds for a long
    thread). After the hook a value that is not the same object, whose length
    changed, or one of whose items is not the same object as before, is a change in
    place: the copies put the values back, in the same objects (the graph's channels
    hold them), and the hook fails naming plugin, hook and keys. Not seen: a change
    deeper than one level (a message object's fields, a dict inside a list).
    Antler's own plugins are not watched, so the default chain pays nothing for it;
    nor is a wrap hook's `request.state` (a wrap hook changes its request through
    `request.override`, which the conformance check `request_mutation` holds it to).

Time (`HookTimeError`)
    A hook call's own time, a wrap hook's handler (the model, the tool, the inner
    plugins) not counted, is held to the plugin's budget. An async node hook is
    cancelled at the budget (`asyncio.timeout`; an async wrap hook's budget is stopped
    while its handler runs), so a run does not wait on it longer. A sync hook cannot
    be stopped from outside its thread: its overrun is seen when it returns, and fails
    the hook then. A sync hook that
    never returns holds its run's thread for ever (a served run keeps its other
    runs going; the run itself waits).

Output (`HookOutputError`)
    What a hook returns of its own (a node hook's update, a wrap hook's result that
    is not its handler's) is counted: each string's characters, each container's
    items, each object's attribute values, stopping as soon as the count passes the
    limit or the nesting passes `MAX_DEPTH`, so a 500 MB string costs one `len`, a
    list of millions of items one `len`, and a normal update a walk over its few
    values.
"""

from __future__ import annotations

import asyncio
import functools
import operator
import time
from collections.abc import Callable, Mapping
from itertools import repeat
from typing import Any

from antler.chain.hooklimits import HookLimits
from antler.errors import HookOutputError, HookTimeError, StateMutationError

__all__ = ["MAX_DEPTH", "StateWatch", "check_output", "limited", "overrun"]

MAX_DEPTH = 100
"""How deeply a hook's output may nest (a message's blocks nest five or six levels)."""

Shape = tuple[tuple[Any, ...], tuple[Any, ...], tuple[int, ...]]
"""A state's keys, its values and their lengths (-1: not sized), taken before a hook."""

_length = operator.length_hint
_same = operator.is_
_COPIED = (list, dict, set)


def shape(state: Any) -> Shape | None:
    """The identity and length of each value of `state` (None: `state` is no dict)."""
    if type(state) is not dict:
        return None
    values = tuple(state.values())
    return tuple(state), values, tuple(map(_length, values, repeat(-1)))


def snapshot(state: Any) -> dict[str, Any]:
    """A shallow copy of each list, dict and set of `state`, by key."""
    if type(state) is not dict:
        return {}
    return {key: value.copy() for key, value in state.items() if isinstance(value, _COPIED)}


def changed(state: Any, before: Shape | None, copies: Mapping[str, Any] | None = None,
            ) -> list[str]:
    """The keys of `state` changed in place since `before` (with `copies`, item by item)."""
    if before is None:
        return []
    keys, values, lengths = before
    if (len(state) == len(keys) and all(map(_same, values, state.values()))
            and tuple(map(_length, values, repeat(-1))) == lengths):
        # The usual case, at C speed: the same objects of the same lengths; with copies,
        # each container's items are compared by identity too.
        return [key for key, copy in copies.items() if not _equal(copy, state[key])] \
            if copies else []
    found = [key for key, value, length in zip(keys, values, lengths, strict=True)
             if state.get(key, _GONE) is not value or _length(value, -1) != length
             or (copies is not None and key in copies and not _equal(copies[key], value))]
    found.extend(key for key in state if key not in keys)
    return found


_GONE = object()


def _equal(copy: Any, value: Any) -> bool:
    """Whether `value` holds the same objects as `copy` (its copy from before the hook)."""
    if len(copy) != len(value):
        return False
    if isinstance(copy, dict):
        return copy.keys() == value.keys() and all(map(_same, copy.values(), value.values()))
    if isinstance(copy, set):
        return copy == value
    return all(map(_same, copy, value))


def restore(state: Any, before: Shape, copies: Mapping[str, Any], keys: list[str]) -> None:
    """Put each of `keys` back as `before` and `copies` had it, in the same objects
    (the graph's channels hold them)."""
    for key, value in zip(before[0], before[1], strict=True):
        if key not in keys:
            continue
        copy = copies.get(key)
        if copy is not None:
            if isinstance(value, list):
                value[:] = copy
            else:
                value.clear()
                value.update(copy)
        if type(state) is dict:
            state[key] = value
    if type(state) is dict:
        for key in [key for key in state if key not in before[0]]:
            del state[key]


def mutation_error(plugin: str, hook: str, keys: list[str]) -> StateMutationError:
    """The error of `plugin`'s `hook` that changed `keys` in place (undone by then)."""
    shown = ", ".join(repr(key) for key in keys)
    return StateMutationError(
        f"plugin {plugin!r} changed state key{'s' * (len(keys) > 1)} {shown} in place in "
        f"{hook} (undone); a hook returns its changes as an update (`{{'key': new_value}}`, "
        "or new messages under 'messages') and leaves the state it is handed as it is",
        plugin=plugin, keys=keys)


def overrun(plugin: str, hook: str, seconds: float, budget: float, source: str,
            stopped: bool) -> HookTimeError:
    """The error of a hook call that took `seconds`, over its `budget` (set at `source`)."""
    what = (f"was cancelled in {hook} at" if stopped
            else f"took {seconds:.3g} s in {hook}, over")
    return HookTimeError(
        f"plugin {plugin!r} {what} its time budget of {budget:g} s ({source}); raise it "
        f"there, or under `plugins: {{{plugin}: {{time_budget: SECONDS}}}}`",
        plugin=plugin, hook=hook, seconds=seconds)


def check_output(value: Any, limit: int, plugin: str, hook: str, source: str) -> None:
    """Raise `HookOutputError` when `value` holds more than `limit` characters and items,
    or nests deeper than `MAX_DEPTH`; stops counting as soon as it knows."""
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        cls = type(item)
        if cls is str or cls is bytes or cls is bytearray:
            total += len(item)
        elif item is None or cls is int or cls is float or cls is bool:
            total += 1
            continue
        elif depth >= MAX_DEPTH:
            raise HookOutputError(
                f"plugin {plugin!r} returned a value nested more than {MAX_DEPTH} levels "
                f"deep from {hook}; a hook returns plain updates (messages, lists and dicts a "
                "few levels deep)")
        elif isinstance(item, dict):
            total += len(item)
            if total <= limit:
                for pair in item.items():
                    push((pair, depth + 1))
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item)
            if total <= limit:
                for child in item:
                    push((child, depth + 1))
        elif isinstance(item, (str, bytes)):
            total += len(item)
        else:
            fields = getattr(item, "__dict__", None)
            if fields is None:
                slots = getattr(cls, "__slots__", ())
                fields = {name: getattr(item, name, None)
                          for name in ((slots,) if isinstance(slots, str) else slots)}
            total += 1
            if total <= limit:
                push((list(fields.values()), depth + 1))
        if total > limit:
            raise HookOutputError(
                f"plugin {plugin!r} returned more than {limit} characters and items from "
                f"{hook} (at least {total}), over its output limit ({source}); raise it "
                f"there, or under `plugins: {{{plugin}: {{output_limit: N}}}}`")


class StateWatch:
    """Sees a node hook's change of its state in place, and undoes it."""

    __slots__ = ("hook", "label")

    def __init__(self, label: str, hook: str) -> None:
        self.label = label
        self.hook = hook

    def take(self, state: Any) -> tuple[Shape | None, dict[str, Any]]:
        return shape(state), snapshot(state)

    def settle(self, state: Any, taken: tuple[Shape | None, dict[str, Any]]) -> None:
        """Raise `StateMutationError` when the hook changed `state` in place, undone."""
        before, copies = taken
        keys = changed(state, before, copies)
        if keys and before is not None:
            restore(state, before, copies, keys)
            raise mutation_error(self.label, self.hook, keys)


def limited(original: Callable[..., Any], hook: str, is_async: bool, limits: HookLimits,
            label: str, wrap: bool) -> Callable[..., Any]:
    """`original` held to `limits`' time budget and output limit (the same parameters;
    `__wrapped__` is `original`). A wrap hook's handler time is not counted, and only a
    result that is not its handler's is the hook's output."""
    budget, limit = limits.time_budget, limits.output_limit
    clock = time.perf_counter

    def over(seconds: float, stopped: bool = False) -> HookTimeError:
        return overrun(label, hook, seconds, budget or 0.0, limits.time_from, stopped)

    def counted(result: Any) -> Any:
        if limit is not None and result is not None:
            check_output(result, limit, label, hook, limits.output_from)
        return result

    if wrap and is_async:
        async def awrapped(self: Any, request: Any, handler: Callable[..., Any],
                           *args: Any, **kwargs: Any) -> Any:
            handled = _NOTHING
            loop = asyncio.get_running_loop()
            started = clock()
            try:
                async with asyncio.timeout(budget) as deadline:

                    async def measured(inner: Any) -> Any:
                        # The budget stops while the handler runs, and goes on after.
                        nonlocal handled
                        when = deadline.when()
                        left = None if when is None else when - loop.time()
                        deadline.reschedule(None)
                        try:
                            handled = await handler(inner)
                            return handled
                        finally:
                            if left is not None:
                                deadline.reschedule(loop.time() + left)
                    result = await original(self, request, measured, *args, **kwargs)
            except TimeoutError:
                if deadline.expired():
                    raise over(clock() - started, stopped=True) from None
                raise
            return result if result is handled else counted(result)
        return functools.wraps(original)(awrapped)

    if wrap:
        def wrapped(self: Any, request: Any, handler: Callable[..., Any],
                    *args: Any, **kwargs: Any) -> Any:
            spent, handled = 0.0, _NOTHING

            def measured(inner: Any) -> Any:
                nonlocal spent, handled
                started = clock()
                try:
                    handled = handler(inner)
                    return handled
                finally:
                    spent += clock() - started
            started = clock()
            result = original(self, request, measured, *args, **kwargs)
            own = clock() - started - spent
            if budget is not None and own > budget:
                raise over(own)
            return result if result is handled else counted(result)
        return functools.wraps(original)(wrapped)

    if is_async:
        async def anode(self: Any, *args: Any, **kwargs: Any) -> Any:
            if budget is None:
                return counted(await original(self, *args, **kwargs))
            started = clock()
            try:
                async with asyncio.timeout(budget) as deadline:
                    update = await original(self, *args, **kwargs)
            except TimeoutError:
                if deadline.expired():
                    raise over(clock() - started, stopped=True) from None
                raise
            return counted(update)
        return functools.wraps(original)(anode)

    def node(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = clock()
        update = original(self, *args, **kwargs)
        if budget is not None and (seconds := clock() - started) > budget:
            raise over(seconds)
        return counted(update)
    return functools.wraps(original)(node)


_NOTHING = object()
