"""What Antler adds to LangGraph Server's HTTP API (`antler.server:app`).

`langgraph.json` names it (`"http": {"app": "antler.server:app"}`); the server
puts its middleware in front of every route, before any auth handler runs.
Two things a client would otherwise get wrong answers for:

* **A refused run input is the client's error.** The served graph refuses
  input a caller may not send, but a run starts after the server has answered
  the request, so the refusal would come back as a failed run or an error
  reply. `RunInputCheck` checks the body of every request that starts a run
  (``/runs``, ``/threads/{id}/runs``, their ``/stream``, ``/wait``,
  ``/batch`` and ``/crons`` forms, and a cron's ``PATCH``, which replaces
  the input its runs start with) as the graph would (`check_run_request`)
  and answers 400 with Antler's one-line reason before a run is queued.
  What passes is still checked by the graph.
* **Another user's thread id is a missing thread.** LangGraph Server answers
  409 both when a client creates a thread under an id that exists and when it
  copies a thread its auth filter hides (or that does not exist), which tells
  the caller that the id is taken. `HiddenThreadConflicts` answers such a 409
  with what reading the thread answers the same caller: the owner still gets
  409 for their own thread, anyone else the server's own 404.

And one thing the server would leave half done:

* **A deleted thread loses its files.** The server's ``DELETE /threads/{id}``
  and ``POST /threads/prune`` (strategy ``delete``) remove checkpoints only.
  `DeletedThreadFiles` first cancels the thread's runs still in progress and
  waits for them to end (so none writes into the thread after it is gone),
  then lets the server delete it; when the server answers with success (its
  auth decided the caller may delete the thread), it ends the thread's sandbox
  namespaces and removes every directory its runs used
  (`antler.runtime.servedfiles`), before the answer goes out, as `antler
  threads delete` does. Any other answer (404, 403, 409, 422) removes nothing;
  a prune removes the files of the threads it deleted (those the caller could
  read before and cannot after). A thread's ``ttl`` (on ``POST /threads`` or
  ``PATCH /threads/{id}``) is refused with 400: the server would delete the
  thread when it expires, where no middleware sees it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Collection
from typing import Any

from antler.contracts.runcontext import AUTH_USER_KEY, RunContext, authenticated
from antler.errors import InputError
from antler.plugin_api.paths import PathLayout

from .inputs import check_input, check_input_keys
from .sandbox.threaddir import ThreadDirectoryError
from .servedfiles import ServedThreadFiles

__all__ = ["DeletedThreadFiles", "HiddenThreadConflicts", "RunInputCheck", "check_run_request",
           "served_app"]

logger = logging.getLogger(__name__)

_RUN_PATH = re.compile(r"^/(?:threads/[^/]+/)?runs(?:/stream|/wait|/batch|/crons)?/?$")
_CRON_PATH = re.compile(r"^/runs/crons/[^/]+/?$")
"""``PATCH`` there replaces a cron's run payload, input included."""
_COPY_PATH = re.compile(r"^/threads/([^/]+)/copy/?$")
_THREADS_PATH = re.compile(r"^/threads/?$")
_THREAD_PATH = re.compile(r"^/threads/([^/]+)/?$")
_PRUNE_PATH = re.compile(r"^/threads/prune/?$")
_THREAD_ID = re.compile(r"^[0-9a-fA-F-]{1,64}$")
"""What a sub-request may put in a path: the server's thread and run ids are UUIDs."""
_IN_PROGRESS = ("pending", "running")
_TTL_REFUSED = (
    "a thread's `ttl` is refused: the server would delete the thread when it expires "
    "without removing its files (uploads, workspace, outputs) or ending its sandbox; send "
    "no `ttl`, and delete threads with DELETE /threads/{thread_id} or POST /threads/prune")
_PRUNE_MAX = 1000
"""Thread ids one prune may name: each costs a few requests to the server (before, its
runs cancelled; after, whether it went)."""
_RUN_END_WAIT = 30.0
"""Seconds a delete waits for a cancelled run of the thread to end before it goes on."""
_REFUSED_STATUS = 400


def check_run_request(body: Any, allow_roles: Collection[str]) -> None:
    """Raise `InputError` when a run request's `body` holds input a caller may not send.

    `body` is the request's JSON: one run's payload, or a list of them
    (``/runs/batch``). Its ``input`` may only write ``messages``, of roles in
    `allow_roles`; its ``command`` may only resume a paused run.
    """
    for position, payload in enumerate(body if isinstance(body, list) else [body], 1):
        if not isinstance(payload, dict):
            continue  # the server answers a body of the wrong shape itself
        where = f"run {position} of the batch: " if isinstance(body, list) else ""
        try:
            _check_command(payload.get("command"))
            _check_input(payload.get("input"), allow_roles)
        except InputError as error:
            raise InputError(f"{where}{error}") from None


def _check_command(command: Any) -> None:
    if isinstance(command, dict) and (command.get("update") is not None
                                      or command.get("goto")):
        raise InputError("only Command(resume=...) may be sent as input, to continue a paused "
                         "run; a Command that updates state or jumps would bypass the input "
                         "checks")


def _check_input(payload: Any, allow_roles: Collection[str]) -> None:
    if payload is None:
        return
    if not isinstance(payload, dict):
        raise InputError(f"run input is a {type(payload).__name__}; send "
                         "`{'messages': [...]}`")
    check_input_keys(payload, served=True)
    messages = payload.get("messages")
    if messages is None:
        return
    check_input(messages if isinstance(messages, list) else [messages], allow_roles, set,
                served=True)


class RunInputCheck:
    """ASGI middleware: a request that would start a run with refused input gets 400."""

    def __init__(self, app: Any, allow_roles: Collection[str]) -> None:
        self.app = app
        self.allow_roles = frozenset(allow_roles)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not (
                (scope["method"] == "POST" and _RUN_PATH.match(scope["path"]))
                or (scope["method"] == "PATCH" and _CRON_PATH.match(scope["path"]))):
            await self.app(scope, receive, send)
            return
        body, receive = await _read_body(receive)
        try:
            check_run_request(_json(body), self.allow_roles)
        except InputError as error:
            await _answer(send, _REFUSED_STATUS, str(error))
            return
        await self.app(scope, receive, send)


class HiddenThreadConflicts:
    """ASGI middleware: a 409 for a thread the caller cannot read answers as reading it does."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        thread_id: str | None = None
        if scope["type"] == "http" and scope["method"] == "POST":
            if copied := _COPY_PATH.match(scope["path"]):
                thread_id = copied.group(1)
            elif _THREADS_PATH.match(scope["path"]):
                body, receive = await _read_body(receive)
                thread_id = _thread_id_of(body)
        if thread_id is None:
            await self.app(scope, receive, send)
            return
        original = dict(scope)  # the server's router adds to the scope it is given
        status, messages = await _capture(self.app, scope, receive)
        if status == 409:
            read_status, read = await _capture(self.app, _read_scope(original, thread_id),
                                               _empty_body())
            if read_status == 404:
                messages = read
        for message in messages:
            await send(message)


def _user_id(user: Any) -> str:
    """The user id the served graph runs auth `user`'s turns as."""
    return authenticated(RunContext(), {AUTH_USER_KEY: user}).user_id


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
        if method == "DELETE" and (deleted := _THREAD_PATH.match(path)):
            await self._delete(scope, receive, send, deleted.group(1))
        elif method == "POST" and _PRUNE_PATH.match(path):
            await self._prune(scope, receive, send)
        elif (method == "POST" and _THREADS_PATH.match(path)) \
                or (method == "PATCH" and _THREAD_PATH.match(path)):
            await self._refuse_ttl(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _refuse_ttl(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A thread created or changed with a ``ttl`` gets 400: the server would delete it
        when it expires, past this middleware, and its files would stay."""
        body, receive = await _read_body(receive)
        payload = _json(body)
        if isinstance(payload, dict) and payload.get("ttl") is not None:
            await _answer(send, _REFUSED_STATUS, _TTL_REFUSED)
            return
        await self.app(scope, receive, send)

    async def _delete(self, scope: dict[str, Any], receive: Any, send: Any,
                      thread_id: str) -> None:
        original = dict(scope)  # the server's router adds to the scope it is given
        await self._end_runs(original, thread_id)
        # The answer is held until the files are gone: a client that reads the thread's
        # directory after its 204 finds it removed.
        status, messages = await _capture(self.app, scope, receive)
        if 200 <= status < 300:
            # The server's auth middleware put the caller in the scope it was handed.
            await asyncio.to_thread(self._remove, _user_id(scope.get("user")), thread_id,
                                    f"DELETE /threads/{thread_id}")
        for message in messages:
            await send(message)

    async def _prune(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body, receive = await _read_body(receive)
        payload = _json(body)
        thread_ids = payload.get("thread_ids") if isinstance(payload, dict) else None
        strategy = payload.get("strategy", "delete") if isinstance(payload, dict) else None
        if strategy != "delete" or not isinstance(thread_ids, list) \
                or not all(isinstance(t, str) for t in thread_ids):
            # keep_latest keeps the threads (and so their files); a malformed body is the
            # server's to refuse.
            await self.app(scope, receive, send)
            return
        if len(thread_ids) > _PRUNE_MAX:
            await _answer(send, _REFUSED_STATUS, (
                f"POST /threads/prune names {len(thread_ids)} threads; prune at most "
                f"{_PRUNE_MAX} per request (send the rest in further requests)"))
            return
        original = dict(scope)
        readable = [t for t in dict.fromkeys(thread_ids)
                    if _THREAD_ID.match(t)
                    and await self._status(original, "GET", f"/threads/{t}") == 200]
        for thread_id in readable:
            await self._end_runs(original, thread_id)
        status, messages = await _capture(self.app, scope, receive)
        if 200 <= status < 300:
            user_id = _user_id(scope.get("user"))
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
        if not _THREAD_ID.match(thread_id):
            return
        status, messages = await _capture(self.app, _sub_scope(
            scope, "GET", f"/threads/{thread_id}/runs", b"limit=1000"), _empty_body())
        runs = _json(_body_of(messages)) if status == 200 else None
        for run in runs if isinstance(runs, list) else []:
            if not isinstance(run, dict) or run.get("status") not in _IN_PROGRESS \
                    or not _THREAD_ID.match(str(run.get("run_id"))):
                continue
            wait = b"&wait=1" if run["status"] == "running" else b""
            cancel = _capture(self.app, _sub_scope(
                scope, "POST", f"/threads/{thread_id}/runs/{run['run_id']}/cancel",
                b"action=interrupt" + wait), _empty_body())
            try:
                await asyncio.wait_for(cancel, _RUN_END_WAIT)
            except TimeoutError:
                logger.warning("thread %s: run %s did not end within %.0fs of its "
                               "cancellation; deleting the thread anyway (the run removes "
                               "what it writes after)", thread_id, run["run_id"],
                               _RUN_END_WAIT)

    async def _status(self, scope: dict[str, Any], method: str, path: str) -> int:
        status, _ = await _capture(self.app, _sub_scope(scope, method, path), _empty_body())
        return status

    def _remove(self, user_id: str, thread_id: str, request: str) -> None:
        try:
            self.files.remove(thread_id, user_id)
        except ThreadDirectoryError as error:
            logger.error(
                "%s: the server deleted thread %s's checkpoints, but its files were not "
                "removed: %s. Nothing else refers to them now: remove them by hand (as "
                "their owner or root); deleting the thread again answers 404.",
                request, thread_id, error)


def served_app(allow_roles: Collection[str], paths: PathLayout | None = None) -> Any:
    """The Starlette app `langgraph.json` names: no routes, the middlewares
    (`DeletedThreadFiles` when `paths`, the agent's, says where thread files are)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    deleting = [Middleware(DeletedThreadFiles, paths=paths)] if paths is not None else []
    return Starlette(middleware=[*deleting, Middleware(HiddenThreadConflicts),
                                 Middleware(RunInputCheck, allow_roles=allow_roles)])


async def _read_body(receive: Any) -> tuple[bytes, Any]:
    """The whole request body, and a `receive` that hands it on before what follows."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away; the app sees an empty body
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> dict[str, Any]:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _empty_body() -> Any:
    """A `receive` for a sub-request: an empty body, then nothing (the client stays
    connected while a streamed answer, such as a cancel that waits for the run, runs)."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # until the server is done with the request
        return {"type": "http.disconnect"}

    return receive


async def _capture(app: Any, scope: dict[str, Any], receive: Any,
                   ) -> tuple[int, list[dict[str, Any]]]:
    """Run `app` on one request; its status and the messages it sent (small JSON answers)."""
    sent: list[dict[str, Any]] = []

    async def keep(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, keep)
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    return (int(start["status"]) if start else 500), sent


def _read_scope(scope: dict[str, Any], thread_id: str) -> dict[str, Any]:
    """`GET /threads/{thread_id}` as the caller of `scope` (same credentials)."""
    return _sub_scope(scope, "GET", f"/threads/{thread_id}")


def _sub_scope(scope: dict[str, Any], method: str, path: str,
               query: bytes = b"") -> dict[str, Any]:
    """A request without a body to `path` as the caller of `scope` (same credentials)."""
    headers = [(name, value) for name, value in scope.get("headers", [])
               if name.lower() not in (b"content-length", b"content-type")]
    return {**scope, "method": method, "path": path, "raw_path": path.encode(),
            "query_string": query, "headers": headers}


def _body_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")


def _json(body: bytes) -> Any:
    """The body's JSON; None when it is not JSON or nested past the parser's depth
    (the server answers that itself)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _thread_id_of(body: bytes) -> str | None:
    payload = _json(body)
    thread_id = payload.get("thread_id") if isinstance(payload, dict) else None
    return thread_id if isinstance(thread_id, str) and thread_id else None


async def _answer(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
