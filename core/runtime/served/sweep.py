"""A thread removed without a request loses its files too (`GoneThreadSweep`).

The server's own TTL sweep and rows deleted in its database pass no
middleware. `GoneThreadSweep` runs while the app serves (at start, then every
``$ANTLER_SERVED_SWEEP_SECONDS``) and removes the noted directories of every
served thread the server, asked as itself, no longer has.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from antler.plugin_api.paths import PathLayout

from ..sandbox.threaddir import ThreadDirectoryError
from ..servedfiles import ServedThreadFiles
from .exchange import log, positive_setting
from .routes import THREAD_ID

__all__ = ["SWEEP_SECONDS_ENV", "GoneThreadSweep", "sweep_seconds"]

SWEEP_SECONDS_ENV = "ANTLER_SERVED_SWEEP_SECONDS"
_DEFAULT_SWEEP_SECONDS = 600.0
"""Seconds between two sweeps for threads the server removed without a request."""


def sweep_seconds() -> float:
    """Seconds between sweeps (`GoneThreadSweep`): $ANTLER_SERVED_SWEEP_SECONDS, else 600."""
    return positive_setting(SWEEP_SECONDS_ENV, _DEFAULT_SWEEP_SECONDS, float,
                            "a number of seconds", "number", "600")


class GoneThreadSweep:
    """Removes the files of served threads the server no longer has.

    The server removes threads no request names: its TTL sweep (`ttl` in
    ``langgraph.json``'s checkpointer or store settings) and rows deleted in its
    database. Only a thread with a note (`ServedThreadFiles`: a served run of it noted
    its directory) is considered, and it loses its noted directories only when the
    server, asked as itself (the in-process client's ``/noauth`` root path, which no
    request can set), answers 404 for it while the note is locked, and its threads API
    answers at all (a search). Anything else (a thread it has, an error, an API turned
    off) keeps the files.
    """

    def __init__(self, paths: PathLayout, interval: float | None = None) -> None:
        self.files = ServedThreadFiles(paths)
        self.interval = interval if interval is not None else sweep_seconds()

    async def sweep(self, app: Any) -> list[str]:
        """One pass over the noted threads, asking `app` (the server); the thread ids
        whose files it removed."""
        import httpx

        loop = asyncio.get_running_loop()
        removed: list[str] = []
        transport = httpx.ASGITransport(app=app, root_path="/noauth")
        async with httpx.AsyncClient(transport=transport, base_url="http://antler.internal",
                                     timeout=30) as client:
            if not await _answers(client, "POST", "/threads/search", {"limit": 1}, 200):
                log.warning("the served-thread sweep skipped: the server's threads API "
                               "did not answer POST /threads/search with 200")
                return removed
            for thread_id in await asyncio.to_thread(self.files.noted_threads):
                if not THREAD_ID.match(thread_id):
                    continue
                asked: list[bool] = []

                def gone(thread_id: str = thread_id, asked: list[bool] = asked) -> bool:
                    lacks = asyncio.run_coroutine_threadsafe(_answers(
                        client, "GET", f"/threads/{thread_id}", None, 404), loop).result()
                    asked.append(lacks)
                    return lacks
                try:
                    await asyncio.to_thread(self.files.remove_if_gone, thread_id, gone)
                except ThreadDirectoryError as error:
                    log.error("thread %s is gone from the server, but its files were not "
                                 "removed: %s. Remove them by hand (as their owner or root), "
                                 "or fix the cause; the next sweep tries again.",
                                 thread_id, error)
                    continue
                if any(asked):
                    removed.append(thread_id)
                    log.info("thread %s is gone from the server (no request deleted it): "
                                "its files were removed", thread_id)
        return removed

    async def run(self, app: Any) -> None:
        """Sweep now, then every `interval` seconds, until cancelled."""
        while True:
            try:
                await self.sweep(app)
            except Exception as error:  # a sweep that fails must not end the next ones
                log.error("the served-thread sweep failed: %s; the next runs in %.0fs",
                             error, self.interval)
            await asyncio.sleep(self.interval)

    def lifespan(self) -> Callable[[Any], Any]:
        """A Starlette lifespan that runs the sweeps while the app serves."""
        @contextlib.asynccontextmanager
        async def sweeping(app: Any) -> AsyncIterator[None]:
            task = asyncio.create_task(self.run(app))
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return sweeping


async def _answers(client: Any, method: str, path: str, body: Any, status: int) -> bool:
    """Whether the server answers `method path` with `status` (False on any error)."""
    try:
        response = await client.request(method, path, json=body)
    except Exception as error:  # the server not ready, an app error: assume nothing
        log.debug("the served-thread sweep: %s %s failed: %s", method, path, error)
        return False
    return bool(response.status_code == status)


