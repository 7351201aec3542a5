"""A deleted thread loses its files (`DeletedThreadFiles`).

The server's ``DELETE /threads/{id}`` and ``POST /threads/prune`` (strategy
``delete``) remove checkpoints only. `DeletedThreadFiles` first cancels the
thread's runs still in progress and waits for them to end (so none writes into
the thread after it is gone), then lets the server delete it; when the server
answers with success (its auth decided the caller may delete the thread), it
ends the thread's sandbox namespaces and removes every directory its runs used
(`antler.runtime.servedfiles`), before the answer goes out, as ``antler
threads delete`` does. Any other answer (404, 403, 409, 422) removes nothing; a
prune removes the files of the threads it deleted (those the caller could read
before and cannot after). A thread the server removes on its own (its ``ttl``
expired) passes no middleware: `GoneThreadSweep` removes its files.
"""

from __future__ import annotations

import asyncio
from typing import Any

from antler.plugin_api.paths import PathLayout

from ..sandbox.threaddir import ThreadDirectoryError
from ..servedfiles import ServedThreadFiles
from .exchange import (
    answer,
    body_of,
    caller_id,
    capture,
    empty_body,
    log,
    parse_json,
    read_body,
    sub_scope,
)
from .routes import PRUNE_PATH, THREAD_ID, THREAD_PATH

__all__ = ["DeletedThreadFiles"]

_REFUSED_STATUS = 400
_IN_PROGRESS = ("pending", "running")
_PRUNE_MAX = 1000
"""Thread ids one prune may name: each costs a few requests to the server (before, its
runs cancelled; after, whether it went)."""
_RUN_END_WAIT = 30.0
"""Seconds a delete waits for a cancelled run of the thread to end before it goes on."""


class DeletedThreadFiles:
    """ASGI middleware: a thread the server deleted (``DELETE /threads/{id}``, ``POST
    /threads/prune``) first has its runs in progress cancelled, then loses its directories
    and namespaces."""

    def __init__(self, app: Any, paths: PathLayout) -> None:
        self.app = app
        self.files = ServedThreadFiles(paths)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        method, path = (scope["method"], scope["path"]) if scope["type"] == "http" \
            else (None, "")
        if method == "DELETE" and (deleted := THREAD_PATH.match(path)):
            await self._delete(scope, receive, send, deleted.group(1))
        elif method == "POST" and PRUNE_PATH.match(path):
            await self._prune(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _delete(self, scope: dict[str, Any], receive: Any, send: Any,
                      thread_id: str) -> None:
        original = dict(scope)  # the server's router adds to the scope it is given
        await self._end_runs(original, thread_id)
        # The answer is held until the files are gone: a client that reads the thread's
        # directory after its 204 finds it removed.
        status, messages = await capture(self.app, scope, receive)
        if 200 <= status < 300:
            # The server's auth middleware put the caller in the scope it was handed.
            await asyncio.to_thread(self._remove, caller_id(scope.get("user")), thread_id,
                                    f"DELETE /threads/{thread_id}")
        for message in messages:
            await send(message)

    async def _prune(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body, receive, _ = await read_body(receive)
        payload = parse_json(body)
        thread_ids = payload.get("thread_ids") if isinstance(payload, dict) else None
        strategy = payload.get("strategy", "delete") if isinstance(payload, dict) else None
        if strategy != "delete" or not isinstance(thread_ids, list) \
                or not all(isinstance(t, str) for t in thread_ids):
            # keep_latest keeps the threads (and so their files); a malformed body is the
            # server's to refuse.
            await self.app(scope, receive, send)
            return
        if len(thread_ids) > _PRUNE_MAX:
            await answer(send, _REFUSED_STATUS, (
                f"POST /threads/prune names {len(thread_ids)} threads; prune at most "
                f"{_PRUNE_MAX} per request (send the rest in further requests)"))
            return
        original = dict(scope)
        readable = [t for t in dict.fromkeys(thread_ids)
                    if THREAD_ID.match(t)
                    and await self._status(original, "GET", f"/threads/{t}") == 200]
        for thread_id in readable:
            await self._end_runs(original, thread_id)
        status, messages = await capture(self.app, scope, receive)
        if 200 <= status < 300:
            user_id = caller_id(scope.get("user"))
            for thread_id in readable:
                if await self._status(original, "GET", f"/threads/{thread_id}") == 404:
                    await asyncio.to_thread(self._remove, user_id, thread_id,
                                            "POST /threads/prune")
        for message in messages:
            await send(message)

    async def _end_runs(self, scope: dict[str, Any], thread_id: str) -> None:
        """Cancel the thread's runs in progress, as the caller, and wait for them to end.

        The caller's own credentials decide: a thread they may not read lists no runs,
        and a thread they may not delete answers the delete as it would have.
        """
        if not THREAD_ID.match(thread_id):
            return
        status, messages = await capture(self.app, sub_scope(
            scope, "GET", f"/threads/{thread_id}/runs", b"limit=1000"), empty_body())
        runs = parse_json(body_of(messages)) if status == 200 else None
        for run in runs if isinstance(runs, list) else []:
            if not isinstance(run, dict) or run.get("status") not in _IN_PROGRESS \
                    or not THREAD_ID.match(str(run.get("run_id"))):
                continue
            wait = b"&wait=1" if run["status"] == "running" else b""
            cancel = capture(self.app, sub_scope(
                scope, "POST", f"/threads/{thread_id}/runs/{run['run_id']}/cancel",
                b"action=interrupt" + wait), empty_body())
            try:
                await asyncio.wait_for(cancel, _RUN_END_WAIT)
            except TimeoutError:
                log.warning("thread %s: run %s did not end within %.0fs of its "
                               "cancellation; deleting the thread anyway (the run removes "
                               "what it writes after)", thread_id, run["run_id"],
                               _RUN_END_WAIT)

    async def _status(self, scope: dict[str, Any], method: str, path: str) -> int:
        status, _ = await capture(self.app, sub_scope(scope, method, path), empty_body())
        return status

    def _remove(self, user_id: str, thread_id: str, request: str) -> None:
        try:
            self.files.remove(thread_id, user_id)
        except ThreadDirectoryError as error:
            log.error(
                "%s: the server deleted thread %s's checkpoints, but its files were not "
                "removed: %s. Nothing else refers to them now: remove them by hand (as "
                "their owner or root); deleting the thread again answers 404.",
                request, thread_id, error)


