"""The run that code belongs to, and what must happen when that run ends, however it ends.

A run's last hook (``after_agent``) does not run when the run fails, when its
stream is closed early, or when its task is cancelled. What a run holds (a
thread's sandbox) must still be let go then. Every run of a graph goes through
its ``stream`` or ``astream`` (``invoke`` and ``ainvoke`` call them), so
`scope_runs` makes those open a `RunScope` for the run, hand it to everything
inside through the run's config, and end it in a ``finally``. Code inside the
run (hooks and tools, in whatever thread or task LangGraph runs them) finds it
with `current_run` and asks to be told of its end with `RunScope.on_end`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from typing import Any

__all__ = ["RUN_SCOPE_KEY", "RunScope", "current_run", "scope_runs"]

logger = logging.getLogger(__name__)

RUN_SCOPE_KEY = "__antler_run_scope"
"""The configurable key of a run's `RunScope` (``__`` keys are never copied into
checkpoint or trace metadata)."""


class RunScope:
    """One run of a graph, as the code inside it sees it: what to do when it ends."""

    __slots__ = ("_ending", "_lock", "ended")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ending: dict[Hashable, Callable[[], None]] = {}
        self.ended = False

    def on_end(self, key: Hashable, callback: Callable[[], None]) -> None:
        """Call `callback` once when the run ends (now, if it has ended); a second
        callback under the same `key` is not added."""
        with self._lock:
            if not self.ended:
                self._ending.setdefault(key, callback)
                return
        callback()

    def forget(self, key: Hashable) -> None:
        """Do not call the callback under `key` after all (what it would end has ended)."""
        with self._lock:
            self._ending.pop(key, None)

    @property
    def pending(self) -> bool:
        """Whether its end has callbacks to call."""
        return bool(self._ending)

    def end(self) -> None:
        """Call the callbacks once, each whatever the others raise; later calls do nothing."""
        with self._lock:
            if self.ended:
                return
            self.ended = True
            callbacks, self._ending = list(self._ending.values()), {}
        for callback in callbacks:
            try:
                callback()
            except Exception:
                logger.exception("a callback at the end of a run failed")


def current_run() -> RunScope | None:
    """The scope of the run the caller runs in; None outside a run of a scoped graph."""
    global _get_config
    if _get_config is None:
        from langgraph.config import get_config

        _get_config = get_config
    try:
        config = _get_config()
    except RuntimeError:  # not inside a running graph
        return None
    scope = (config.get("configurable") or {}).get(RUN_SCOPE_KEY)
    return scope if isinstance(scope, RunScope) else None


_get_config: Callable[[], Any] | None = None


def scope_runs(graph: Any) -> Any:
    """Make every run of `graph` (and of its copies: `with_config` keeps the class) run in a
    `RunScope` of its own, ended when the run ends."""
    graph.__class__ = _scoped(graph.__class__)
    return graph


def _within(config: Any, scope: RunScope) -> dict[str, Any]:
    config = dict(config or {})
    config["configurable"] = {**(config.get("configurable") or {}), RUN_SCOPE_KEY: scope}
    return config


async def _aend(scope: RunScope) -> None:
    """End `scope` off the event loop (a callback may wait for a process), even when the
    task is cancelled again meanwhile: the worker thread goes on."""
    if not scope.pending:
        scope.end()
        return
    try:
        ending = asyncio.get_running_loop().run_in_executor(None, scope.end)
    except RuntimeError:  # the loop's executor is shut down
        scope.end()
        return
    await asyncio.shield(ending)


@functools.cache
def _scoped(base: Any) -> Any:
    if getattr(base, "_antler_scoped", False):
        return base

    def stream(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:
        scope = RunScope()
        try:
            yield from base.stream(self, input, _within(config, scope), **kwargs)
        finally:
            scope.end()

    async def astream(self: Any, input: Any, config: Any = None,
                      **kwargs: Any) -> AsyncIterator[Any]:
        scope = RunScope()
        try:
            # Closed here, not left to the collector: the run's tasks stop before its end.
            async with contextlib.aclosing(
                    base.astream(self, input, _within(config, scope), **kwargs)) as chunks:
                async for chunk in chunks:
                    yield chunk
        finally:
            await _aend(scope)

    return type(base.__name__, (base,), {
        "stream": stream, "astream": astream, "_antler_scoped": True,
        "__module__": base.__module__, "__doc__": base.__doc__})
