"""One checkpointer for sync and async use: `DualSaver`.

LangGraph calls a saver's sync methods under `invoke`/`stream` and its async
methods under `ainvoke`/`astream`. The SQLite and Postgres savers each come as
two classes: `SqliteSaver` raises `NotImplementedError` when awaited, and the
async savers are bound to the event loop they were opened on. `DualSaver`
hands each call to the right one: sync calls to the sync saver, async calls to
an async saver of the running loop, opened on its first async call (Postgres:
`AsyncPostgresSaver` on an async pool). Without an async opener (SQLite) the
async calls run the sync saver in a worker thread, which is what LangGraph's
aiosqlite-based saver does too, minus a second connection and its
non-daemon thread that keeps a process from exiting until it is closed. So the
same agent works both ways with no choice to make, and an application that
never awaits it never opens an async connection.

Both savers write the same tables with the same version format, so a thread
can be run sync one turn and async the next. A `fence`, when given, sees the
thread id of every write first and may refuse it: the Postgres run lock uses it
to stop a run whose lock ended with its database session. Listeners
(`listen_to_writes`) hear of each task's writes once they are saved, or failed:
`antler run` shows a tool result only once the thread has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["AsyncSide", "AsyncSideOpener", "DualSaver", "WriteFence", "WritesListener"]


@dataclass
class AsyncSide:
    """The async saver of one event loop and how to close it."""

    saver: Any
    aclose: Callable[[], Coroutine[Any, Any, None]]
    """Close it on its own loop."""
    stop: Callable[[], None] | None = None
    """Close it from any thread once its loop is gone (None: nothing to do then)."""


AsyncSideOpener = Callable[[Any], Coroutine[Any, Any, AsyncSide]]
"""Opens the async saver on the running loop; receives the sync saver's serializer."""

WriteFence = Callable[[str], None]
"""Called with a write's thread id before the write; raises to refuse it (blocking I/O)."""

WritesListener = Callable[[Sequence[tuple[str, Any]], BaseException | None], None]
"""Told of a task's writes (channel, value) once saved (None) or once saving failed (the
error); called in the thread that saved them."""


class DualSaver(BaseCheckpointSaver[Any]):
    """Sync calls go to `sync`; async calls to the running loop's saver from `open_async`."""

    def __init__(self, sync: BaseCheckpointSaver[Any],
                 open_async: AsyncSideOpener | None = None, *,
                 fence: WriteFence | None = None) -> None:
        super().__init__(serde=sync.serde)
        self.sync = sync
        self._open_async = open_async
        self._fence = fence
        self._listeners: list[WritesListener] = []
        self._sides: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                               asyncio.Future[AsyncSide]] = (
            weakref.WeakKeyDictionary())
        self._guard = threading.Lock()

    # -- the async side ------------------------------------------------------------------

    @property
    def has_async_side(self) -> bool:
        """Whether async calls use an async saver of their own (else the sync one, in a
        worker thread)."""
        return self._open_async is not None

    async def async_saver(self) -> Any:
        """The async saver of the running loop (opened on the first call in that loop)."""
        if self._open_async is None:
            return _Threaded(self.sync)
        loop = asyncio.get_running_loop()
        with self._guard:
            future = self._sides.get(loop)
            if future is None:
                future = loop.create_task(self._open_async(self.sync.serde))
                self._sides[loop] = future
        try:
            side = await asyncio.shield(future)
        except BaseException:
            with self._guard:
                if self._sides.get(loop) is future and future.done():
                    del self._sides[loop]  # a failed open is retried by the next call
            raise
        return side.saver

    async def aclose(self) -> None:
        """Close the running loop's async saver (the others are closed by `close`)."""
        loop = asyncio.get_running_loop()
        with self._guard:
            future = self._sides.pop(loop, None)
        if future is not None and future.done() and future.exception() is None:
            await future.result().aclose()

    def close(self) -> None:
        """Close every async saver still open: on its loop when that loop can run it."""
        with self._guard:
            sides = list(self._sides.items())
            self._sides.clear()
        for loop, future in sides:
            if not future.done() or future.cancelled() or future.exception() is not None:
                continue
            side = future.result()
            _close_side(loop, side)

    # -- sync: the sync saver ------------------------------------------------------------

    @property
    def config_specs(self) -> list[Any]:
        return list(self.sync.config_specs)

    def get_tuple(self, config: Any) -> Any:
        return self.sync.get_tuple(config)

    def list(self, config: Any, *, filter: Any = None, before: Any = None,
             limit: int | None = None) -> Iterator[Any]:
        return self.sync.list(config, filter=filter, before=before, limit=limit)

    def listen_to_writes(self, listener: WritesListener) -> Callable[[], None]:
        """Tell `listener` of every task's writes once saved or failed; returns the
        function that stops telling it."""
        self._listeners.append(listener)

        def stop() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return stop

    def _tell(self, writes: Sequence[tuple[str, Any]], error: BaseException | None) -> None:
        for listener in list(self._listeners):
            listener(writes, error)

    def _check_fence(self, config: Any) -> None:
        if self._fence is not None:
            self._fence(str(config["configurable"]["thread_id"]))

    async def _acheck_fence(self, config: Any) -> None:
        if self._fence is not None:
            await asyncio.to_thread(self._check_fence, config)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self._check_fence(config)
        return self.sync.put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        try:
            self._check_fence(config)
            self.sync.put_writes(config, writes, task_id, task_path)
        except BaseException as exc:
            self._tell(writes, exc)
            raise
        self._tell(writes, None)

    def delete_thread(self, thread_id: str) -> None:
        self.sync.delete_thread(thread_id)

    def get_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Any:
        return self.sync.get_delta_channel_history(config=config, channels=channels)

    def get_next_version(self, current: Any, channel: None) -> Any:
        # Both savers of a backend number versions alike; the sync one decides.
        return self.sync.get_next_version(current, channel)

    # -- async: the running loop's saver -------------------------------------------------

    async def aget_tuple(self, config: Any) -> Any:
        return await (await self.async_saver()).aget_tuple(config)

    async def alist(self, config: Any, *, filter: Any = None,
                    before: Any = None, limit: int | None = None) -> AsyncIterator[Any]:
        saver = await self.async_saver()
        async for item in saver.alist(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: Any, checkpoint: Any, metadata: Any,
                   new_versions: Any) -> Any:
        await self._acheck_fence(config)
        return await (await self.async_saver()).aput(config, checkpoint, metadata,
                                                     new_versions)

    async def aput_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        try:
            await self._acheck_fence(config)
            await (await self.async_saver()).aput_writes(config, writes, task_id, task_path)
        except BaseException as exc:
            self._tell(writes, exc)
            raise
        self._tell(writes, None)

    async def adelete_thread(self, thread_id: str) -> None:
        await (await self.async_saver()).adelete_thread(thread_id)

    async def aget_delta_channel_history(self, *, config: Any,
                                         channels: Sequence[str]) -> Any:
        saver = await self.async_saver()
        return await saver.aget_delta_channel_history(config=config, channels=channels)


class _Threaded:
    """The async saver interface over a sync saver: each call in a worker thread."""

    def __init__(self, sync: Any) -> None:
        self.sync = sync

    async def aget_tuple(self, config: Any) -> Any:
        return await asyncio.to_thread(self.sync.get_tuple, config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        for item in await asyncio.to_thread(lambda: list(self.sync.list(config, **kwargs))):
            yield item

    async def aput(self, *args: Any) -> Any:
        return await asyncio.to_thread(self.sync.put, *args)

    async def aput_writes(self, *args: Any) -> None:
        await asyncio.to_thread(self.sync.put_writes, *args)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.sync.delete_thread, thread_id)

    async def aget_delta_channel_history(self, **kwargs: Any) -> Any:
        return await asyncio.to_thread(
            lambda: self.sync.get_delta_channel_history(**kwargs))


def _close_side(loop: asyncio.AbstractEventLoop, side: AsyncSide) -> None:
    """Close `side` on `loop` if that loop can still run it, else from here."""
    if loop.is_closed():
        if side.stop is not None:
            side.stop()
        return
    if loop.is_running():
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # closing from inside that loop: finish in the background
            loop.create_task(side.aclose())
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(side.aclose(), loop).result(timeout=5)
        return
    with contextlib.suppress(Exception):
        loop.run_until_complete(side.aclose())
