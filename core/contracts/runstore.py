"""Bounded per-run stores, and the retry-safe queue for one-shot injections.

A middleware instance serves every run of every thread that uses its agent,
and the run context is frozen, so state kept between hooks of one run (a
pending hint, "already activated in this run") lives in a store on the
instance, keyed by (thread id, run id). `RunStore` bounds it: the oldest
runs are dropped first, so a long-lived server does not grow without end.

One-shot injections made in `wrap_model_call` follow one rule: *peek* before
calling the handler, *commit* only after it returned. A model call that fails
and is retried by an outer wrapper (an error handler, LangChain's
`ModelRetryMiddleware`) then still carries the hint. `PendingQueue` is that
rule as a data structure; `call_then_commit` / `acall_then_commit` apply it
around a handler, and `PendingQueue.deliver` / `adeliver` do the whole
`wrap_model_call` for the common case of hints sent as one hidden message.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from antler.contracts.runcontext import run_key_of

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_MAX_RUNS = 1000

RunKey = tuple[str | None, str | None]


def run_key(runtime: Any) -> RunKey:
    """(thread id, run id) of the run `runtime` belongs to."""
    return run_key_of(runtime)


class RunStore(Generic[T]):
    """A thread-safe mapping from run keys to values, holding at most `max_runs` runs.

    Reading does not refresh an entry's age: only writing does, so a reader
    cannot keep a finished run alive.
    """

    def __init__(self, max_runs: int = DEFAULT_MAX_RUNS) -> None:
        if max_runs < 1:
            raise ValueError(f"max_runs must be at least 1, got {max_runs}")
        self.max_runs = max_runs
        self._items: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: T | None = None) -> T | None:
        with self._lock:
            return self._items.get(key, default)

    def set(self, key: Hashable, value: T) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_runs:
                self._items.popitem(last=False)

    def setdefault(self, key: Hashable, factory: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._items:
                self._items[key] = factory()
                while len(self._items) > self.max_runs:
                    self._items.popitem(last=False)
            return self._items[key]

    def pop(self, key: Hashable, default: T | None = None) -> T | None:
        with self._lock:
            return self._items.pop(key, default)

    def discard_thread(self, thread_id: str | None, *, keep_run: str | None = None) -> None:
        """Drop every entry of `thread_id` except the run `keep_run` (other runs' leftovers)."""
        with self._lock:
            for key in [k for k in self._items
                        if isinstance(k, tuple) and k[:1] == (thread_id,)
                        and (keep_run is None or k[1:2] != (keep_run,))]:
                del self._items[key]

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        # One read of the dict's size, which no writer leaves half done: no lock. Every
        # model call asks it (`PendingQueue.deliver`), mostly of an empty store.
        return len(self._items)

    def keys(self) -> Iterator[Hashable]:
        with self._lock:
            return iter(list(self._items))


class PendingQueue(Generic[T]):
    """Items to inject into the next model request of a run, delivered exactly once.

    `peek` returns what is pending without removing it; after the handler
    returned, `commit(key, delivered)` removes exactly what was delivered
    (items added meanwhile stay). At most `max_items` per run are kept: the
    oldest are dropped.
    """

    def __init__(self, max_runs: int = DEFAULT_MAX_RUNS, max_items: int = 8) -> None:
        self._runs: RunStore[list[T]] = RunStore(max_runs)
        self.max_items = max_items
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many runs have items pending (none: no run key needs looking up)."""
        return len(self._runs._items)

    def add(self, key: Hashable, item: T, *, unique: bool = True) -> None:
        with self._lock:
            items = list(self._runs.get(key) or [])
            if unique and item in items:
                return
            items.append(item)
            self._runs.set(key, items[-self.max_items:])

    def peek(self, key: Hashable) -> tuple[T, ...]:
        return tuple(self._runs.get(key) or ())

    def commit(self, key: Hashable, delivered: tuple[T, ...] | list[T]) -> None:
        if not delivered:
            return
        with self._lock:
            items = list(self._runs.get(key) or [])
            for item in delivered:
                if item in items:
                    items.remove(item)
            if items:
                self._runs.set(key, items)
            else:
                self._runs.pop(key)

    def clear(self, key: Hashable) -> None:
        self._runs.pop(key)

    def deliver(self, request: Any, handler: Callable[[Any], R], *, name: str,
                source: str) -> R:
        """A `wrap_model_call` body: the run's pending items ride this request, once.

        When items are pending for the request's run, they are appended to its
        messages as one hidden `HumanMessage` named `name` (marked as injected
        by `source`, items separated by blank lines) and committed only after
        `handler` returned. Nothing is written to the conversation.
        """
        if not self:  # nothing pending in any run: no run key to look up
            return handler(request)
        key = run_key(request.runtime)
        items = self.peek(key)
        if not items:
            return handler(request)
        return call_then_commit(handler, _with_note(request, items, name, source),
                                lambda: self.commit(key, items))

    async def adeliver(self, request: Any, handler: Callable[[Any], Awaitable[R]], *,
                       name: str, source: str) -> R:
        """The async form of `deliver`."""
        if not self:
            return await handler(request)
        key = run_key(request.runtime)
        items = self.peek(key)
        if not items:
            return await handler(request)
        return await acall_then_commit(handler, _with_note(request, items, name, source),
                                       lambda: self.commit(key, items))

    def discard_thread(self, thread_id: str | None, *, keep_run: str | None = None) -> None:
        self._runs.discard_thread(thread_id, keep_run=keep_run)


def call_then_commit(handler: Callable[[Any], R], request: Any,
                     commit: Callable[[], None]) -> R:
    """`handler(request)`, then `commit()` only if it returned (not if it raised)."""
    response = handler(request)
    commit()
    return response


async def acall_then_commit(handler: Callable[[Any], Awaitable[R]], request: Any,
                            commit: Callable[[], None]) -> R:
    """The async form of `call_then_commit`."""
    response = await handler(request)
    commit()
    return response


def _with_note(request: Any, items: tuple[Any, ...], name: str, source: str) -> Any:
    from langchain_core.messages import HumanMessage

    from .messages import hidden_marker

    note = HumanMessage(content="\n\n".join(str(item) for item in items), name=name,
                        additional_kwargs=hidden_marker(source))
    return request.override(messages=[*request.messages, note])
