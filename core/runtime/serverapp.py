"""What Antler adds to LangGraph Server's HTTP API (`antler.server:app`).

`langgraph.json` names it (`"http": {"app": "antler.server:app"}`); the server
puts its middleware in front of every route, before any auth handler runs.
Three things a client would otherwise get wrong answers for:

* **A refused write is the client's error.** The served graph refuses input a
  caller may not send, but a run starts after the server has answered the
  request, so the refusal would come back as a failed run or an error reply.
  `RunInputCheck` checks the body of every request that can start a run or
  write a thread's state (`thread_write`, tested against the server's route
  table): ``/runs`` and ``/threads/{id}/runs`` with their ``/stream``,
  ``/wait``, ``/batch`` and ``/crons`` forms, a cron's ``PATCH``, state
  updates (``POST /threads/{id}/state``), a new thread's ``supersteps``, MCP's
  ``tools/call``, A2A's ``message/send`` and ``message/stream``, and protocol
  commands (``run.start``, ``input.respond``) over ``POST
  /threads/{id}/commands`` and the thread's WebSocket. It checks them as the
  graph would (`check_run_request`, the state boundary) and answers with
  Antler's one-line reason before anything is queued: 400 for refused input or
  a body nested past the parse depth, 413 for one over
  ``$ANTLER_MAX_REQUEST_BYTES``, in the error shape of the route's protocol.
  What passes is still checked by the graph.
* **A stated identity cannot take over a directory.** With
  ``trust_client_identity`` a run's ``context.user_id`` names whose directory
  it uses; `StatedIdentityCheck` answers 409 with the reason and the fix when
  that user's directory of the thread exists and no run of the thread made it,
  before a run starts (the graph decides again when it does).
* **Another user's thread id is a missing thread.** LangGraph Server answers
  409 both when a client creates a thread under an id that exists and when it
  copies a thread its auth filter hides (or that does not exist), which tells
  the caller that the id is taken. `HiddenThreadConflicts` answers such a 409
  with what reading the thread answers the same caller: the owner still gets
  409 for their own thread, anyone else the server's own 404.

And what the server would leave half done:

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
* **A thread removed without a request loses its files too.** The server's own
  TTL sweep and rows deleted in its database pass no middleware. `GoneThreadSweep`
  runs while the app serves (at start, then every ``$ANTLER_SERVED_SWEEP_SECONDS``)
  and removes the noted directories of every served thread the server, asked as
  itself, no longer has.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

from antler.contracts.runcontext import AUTH_USER_KEY, DEFAULT_USER, RunContext, authenticated
from antler.errors import ConfigError, InputError
from antler.jsonsource import too_deep_at
from antler.parselimits import MAX_DEPTH
from antler.plugin_api.paths import PathLayout

from .inputs import check_input, check_input_keys
from .sandbox.threaddir import ThreadDirectoryError
from .servedfiles import ServedThreadFiles
from .stateupdates import StateUpdateBoundary

__all__ = ["MAX_REQUEST_BYTES_ENV", "SWEEP_SECONDS_ENV", "DeletedThreadFiles",
           "GoneThreadSweep", "HiddenThreadConflicts", "RunInputCheck", "StatedIdentityCheck",
           "check_run_request", "served_app", "thread_write"]

logger = logging.getLogger(__name__)

_RUN_PATH = re.compile(r"^/(?:threads/([^/]+)/)?runs(/stream|/wait|/batch|/crons)?/?$")
_CRON_PATH = re.compile(r"^/runs/crons/[^/]+/?$")
"""``PATCH`` there replaces a cron's run payload, input included."""
_STATE_PATH = re.compile(r"^/threads/[^/]+/state/?$")
_MCP_PATH = re.compile(r"^/mcp/?$")
_A2A_PATH = re.compile(r"^/a2a/[^/]+/?$")
_COMMANDS_PATH = re.compile(r"^/threads/([^/]+)/commands/?$")
_EVENTS_PATH = re.compile(r"^/threads/([^/]+)/stream/events/?$")
"""As a WebSocket: protocol commands (``run.start``, ``input.respond``), one a message."""
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
_TOO_LARGE_STATUS = 413
_TAKEOVER_STATUS = 409
MAX_REQUEST_BYTES_ENV = "ANTLER_MAX_REQUEST_BYTES"
_DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Largest body (or WebSocket message) a request that writes a thread may send."""
SWEEP_SECONDS_ENV = "ANTLER_SERVED_SWEEP_SECONDS"
_DEFAULT_SWEEP_SECONDS = 600.0
"""Seconds between two sweeps for threads the server removed without a request."""
_JSONRPC_INVALID_PARAMS = -32602


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


def check_state_request(body: Any, allow_roles: Collection[str]) -> None:
    """Raise `InputError` when ``POST /threads/{id}/state`` would write what the served
    graph's state boundary refuses (`StateUpdateBoundary`, which checks it again)."""
    if isinstance(body, dict):
        StateUpdateBoundary(allow_roles, ()).check(
            [[(body.get("values"), body.get("as_node"))]], set)


def check_new_thread(body: Any, allow_roles: Collection[str]) -> None:
    """Raise `InputError` when ``POST /threads`` would write refused state: its
    ``supersteps`` are state updates (a ``command`` in one would write or jump)."""
    supersteps = body.get("supersteps") if isinstance(body, dict) else None
    if not isinstance(supersteps, list):
        return
    rows = []
    for step, superstep in enumerate(supersteps, 1):
        updates = superstep.get("updates") if isinstance(superstep, dict) else None
        row = []
        for position, update in enumerate(updates if isinstance(updates, list) else [], 1):
            if not isinstance(update, dict):
                continue
            if update.get("command"):
                raise InputError(
                    f"state update {position} of superstep {step} is a `command`: it would "
                    "write the thread's channels or jump past the input checks; send "
                    "`values: {'messages': [...]}`")
            row.append((update.get("values"), update.get("as_node")))
        rows.append(row)
    StateUpdateBoundary(allow_roles, ()).check(rows, set)


def check_mcp_request(body: Any, allow_roles: Collection[str]) -> None:
    """Raise `InputError` when an MCP ``tools/call`` would start a run with refused input
    (its ``arguments`` are the run's input)."""
    if not isinstance(body, dict) or body.get("method") != "tools/call":
        return
    params = body.get("params")
    if isinstance(params, dict):
        check_run_request({"input": params.get("arguments", {})}, allow_roles)


_A2A_SENDS = frozenset({"message/send", "message/stream", "SendMessage",
                        "SendStreamingMessage"})
_A2A_USER_ROLES = frozenset({"user", "ROLE_USER"})


def check_a2a_request(body: Any, allow_roles: Collection[str]) -> None:
    """Raise `InputError` when an A2A send would start a run with refused input.

    The run's input is what the server makes of the message: each text or file
    part a message of the message's role (``user``: human, any other: ai), each
    data part's keys top-level input keys (``resume`` aside, which answers an
    interrupt), and the message's ``command`` the run's command.
    """
    if not isinstance(body, dict) or body.get("method") not in _A2A_SENDS:
        return
    params = body.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    if not isinstance(message, dict):
        return  # the server answers a send without a message itself
    role = "human" if message.get("role") in _A2A_USER_ROLES else "ai"
    parts = message.get("parts")
    messages: list[dict[str, Any]] = []
    data: dict[str, Any] = {}
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("data"), dict) and not _a2ui(part):
            data.update({k: v for k, v in part["data"].items() if k != "resume"})
        elif "text" in part or "file" in part or "data" in part:
            messages.append({"role": role, "content": str(part.get("text") or "")})
    payload = {"messages": messages, **data} if messages else data
    check_run_request({"input": payload or None, "command": message.get("command")},
                      allow_roles)


def _a2ui(part: dict[str, Any]) -> bool:
    """Whether a data part is an A2UI payload (the server makes it a message's block)."""
    metadata = part.get("metadata")
    return isinstance(metadata, dict) and "a2ui" in str(metadata.get("mimeType", "")).lower()


def check_protocol_command(body: Any, allow_roles: Collection[str]) -> None:
    """Raise `InputError` when a protocol command (``POST /threads/{id}/commands``, a
    WebSocket message) would start a run with refused input: ``run.start``'s ``input``
    is the run's input, ``input.respond``'s ``update`` and ``goto`` its command's."""
    if not isinstance(body, dict):
        return
    params = body.get("params")
    params = params if isinstance(params, dict) else {}
    try:
        if body.get("method") == "run.start":
            check_run_request({"input": params.get("input")}, allow_roles)
        elif body.get("method") == "input.respond":
            check_run_request({"command": {"resume": True, "update": params.get("update"),
                                           "goto": params.get("goto")}}, allow_roles)
    except InputError as error:
        hint = " (answer an interrupt with input.respond)" \
            if body.get("method") == "run.start" else ""
        raise InputError(f"{body.get('method')}{hint}: {error}") from None


_CHECKS: dict[str, Callable[[Any, Collection[str]], None]] = {
    "run": check_run_request, "state": check_state_request, "thread": check_new_thread,
    "mcp": check_mcp_request, "a2a": check_a2a_request, "command": check_protocol_command}
_WRITES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("POST", _RUN_PATH, "run"), ("PATCH", _CRON_PATH, "run"), ("POST", _STATE_PATH, "state"),
    ("POST", _THREADS_PATH, "thread"), ("POST", _MCP_PATH, "mcp"), ("POST", _A2A_PATH, "a2a"),
    ("POST", _COMMANDS_PATH, "command"), ("WEBSOCKET", _EVENTS_PATH, "command"))


def thread_write(method: str, path: str) -> str | None:
    """Which check a request to `path` gets (`method` ``WEBSOCKET`` for a WebSocket), the
    kind of write it is: ``run``, ``state``, ``thread``, ``mcp``, ``a2a``, ``command``;
    None for a request that starts no run and writes no thread state."""
    return next((kind for verb, pattern, kind in _WRITES
                 if verb == method and pattern.match(path)), None)


def max_request_bytes() -> int:
    """The body size limit of requests that write a thread: $ANTLER_MAX_REQUEST_BYTES,
    else 16 MiB."""
    value = os.environ.get(MAX_REQUEST_BYTES_ENV, "").strip()
    if not value:
        return _DEFAULT_MAX_REQUEST_BYTES
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit <= 0:
        raise ConfigError(
            f"{MAX_REQUEST_BYTES_ENV}={value!r} is not a size: give a positive number of "
            f"bytes, e.g. {MAX_REQUEST_BYTES_ENV}={2 * _DEFAULT_MAX_REQUEST_BYTES}")
    return limit


class RunInputCheck:
    """ASGI middleware: a request that would start a run or write a thread's state with
    refused input gets a 4xx with the reason, before the server sees it.

    Every such route of the server (`thread_write`): runs and their stream, wait, batch
    and cron forms, a cron's ``PATCH``, state updates, a new thread's supersteps, MCP's
    ``tools/call``, A2A's sends, and protocol commands over HTTP and WebSocket. A body
    over `max_bytes` answers 413, one nested deeper than `MAX_DEPTH` levels 400, refused
    input 400 (in the protocol's own error shape for MCP, A2A and protocol commands).
    """

    def __init__(self, app: Any, allow_roles: Collection[str],
                 max_bytes: int | None = None) -> None:
        self.app = app
        self.allow_roles = frozenset(allow_roles)
        self.max_bytes = max_bytes if max_bytes is not None else max_request_bytes()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = thread_write(scope["method"], scope["path"]) if scope["type"] == "http" \
            else thread_write("WEBSOCKET", scope["path"]) if scope["type"] == "websocket" \
            else None
        if kind is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await self.app(scope, self._checked_messages(receive, send), send)
            return
        if (_content_length(scope) or 0) > self.max_bytes:
            body, over = b"", True
        else:
            body, receive, over = await _read_body(receive, self.max_bytes)
        refusal = self._refusal(kind, scope["path"], body, over)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, reason = refusal
        await _answer_as(send, kind, _json(body) if not over else None, status, reason)

    def _refusal(self, kind: str, path: str, body: bytes, over: bool,
                 ) -> tuple[int, str] | None:
        """(status, reason) for a request to refuse, None to let through."""
        if over:
            return _TOO_LARGE_STATUS, (
                f"the body of this request to {path} is over {self.max_bytes} bytes, the "
                f"limit for requests that start a run or write a thread: send less (upload "
                f"large files separately), or have the operator raise "
                f"{MAX_REQUEST_BYTES_ENV}")
        text = body.decode("utf-8", errors="replace")
        deep = too_deep_at(text, MAX_DEPTH)
        if deep is not None:
            return _REFUSED_STATUS, (
                f"the body of this request to {path} is nested deeper than {MAX_DEPTH} "
                f"levels of objects and arrays (at byte {deep}): flatten it")
        try:
            _CHECKS[kind](_json(body), self.allow_roles)
        except InputError as error:
            return _REFUSED_STATUS, str(error)
        return None

    def _checked_messages(self, receive: Any, send: Any) -> Any:
        """`receive` for a protocol WebSocket: a command with refused input is answered
        with the protocol's error message and never reaches the server."""
        async def checked() -> dict[str, Any]:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                raw = message.get("text")
                body = raw.encode() if isinstance(raw, str) else message.get("bytes") or b""
                refusal = self._refusal("command", "the WebSocket", body,
                                        len(body) > self.max_bytes)
                if refusal is None:
                    return message
                payload = _json(body) if len(body) <= self.max_bytes else None
                await send({"type": "websocket.send",
                            "text": json.dumps(_command_error(payload, refusal[1]))})
        return checked


def _content_length(scope: dict[str, Any]) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            with contextlib.suppress(ValueError):
                return int(value)
    return None


def _command_error(payload: Any, reason: str) -> dict[str, Any]:
    """A protocol command's error answer, as the server shapes its own."""
    command_id = payload.get("id") if isinstance(payload, dict) else None
    return {"type": "error", "id": command_id if isinstance(command_id, int) else None,
            "error": "invalid_argument", "message": reason}


async def _answer_as(send: Any, kind: str, payload: Any, status: int, reason: str) -> None:
    """Refuse a request with `reason`, in the error shape its protocol's clients read."""
    if kind in ("mcp", "a2a"):
        request_id = payload.get("id") if isinstance(payload, dict) else None
        body: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": request_id if isinstance(request_id, (str, int, float)) else None,
            "error": {"code": _JSONRPC_INVALID_PARAMS, "message": reason}}
    elif kind == "command":
        body = _command_error(payload, reason)
    else:
        body = {"detail": reason}
    await _send_json(send, status, body)


class StatedIdentityCheck:
    """ASGI middleware, with ``trust_client_identity``: a run request that states an
    identity whose directory of the thread no run of the thread made gets 409 with the
    reason and the fix, before a run starts (`ServedThreadFiles.takeover`; the graph
    decides again when the run starts)."""

    def __init__(self, app: Any, paths: PathLayout) -> None:
        self.app = app
        self.files = ServedThreadFiles(paths)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        thread_id = _run_thread(scope)
        if thread_id is None:
            await self.app(scope, receive, send)
            return
        body, receive, _ = await _read_body(receive, None)
        payload = _json(body)
        stated = _stated_users(payload, scope["path"])
        # No caller is named "": this lists the stated users whose directory of the thread
        # exists, made by no run of it (most requests: none, and no more is asked).
        suspect = [user for user in stated
                   if await asyncio.to_thread(self.files.takeover, thread_id, user, "")]
        if suspect:
            # Who the caller is, the server's auth says: ask it as the caller.
            original = dict(scope)
            probe = _sub_scope(original, "GET", f"/threads/{thread_id}")
            await _capture(self.app, probe, _empty_body())
            if "user" in probe:
                caller = _user_id(probe.get("user"))
                for user in suspect:
                    reason = await asyncio.to_thread(self.files.takeover, thread_id, user,
                                                     caller)
                    if reason is not None:
                        await _send_json(send, _TAKEOVER_STATUS, {"detail": reason})
                        return
        await self.app(scope, receive, send)


def _run_thread(scope: dict[str, Any]) -> str | None:
    """The thread id of a request that starts a run on a thread (None for any other)."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path = scope["path"]
    run = _RUN_PATH.match(path)
    if run and run.group(1) and run.group(2) != "/batch":
        return run.group(1) if _THREAD_ID.match(run.group(1)) else None
    command = _COMMANDS_PATH.match(path)
    if command and _THREAD_ID.match(command.group(1)):
        return command.group(1)
    return None


def _stated_users(payload: Any, path: str) -> list[str]:
    """The user ids a run request states (``context.user_id``, `DEFAULT_USER` without
    one, as the served graph reads them); none for a protocol command other than
    ``run.start``, whose runs carry no context."""
    if not isinstance(payload, dict):
        return []
    if _COMMANDS_PATH.match(path):
        return [DEFAULT_USER] if payload.get("method") == "run.start" else []
    context = payload.get("context")
    stated = context.get("user_id") if isinstance(context, Mapping) else None
    return [str(stated) if stated is not None else DEFAULT_USER]


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
                body, receive, _ = await _read_body(receive)
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
        body, receive, _ = await _read_body(receive)
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
        body, receive, _ = await _read_body(receive)
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


def sweep_seconds() -> float:
    """Seconds between sweeps (`GoneThreadSweep`): $ANTLER_SERVED_SWEEP_SECONDS, else 600."""
    value = os.environ.get(SWEEP_SECONDS_ENV, "").strip()
    if not value:
        return _DEFAULT_SWEEP_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(
            f"{SWEEP_SECONDS_ENV}={value!r} is not a number of seconds: give a positive "
            f"number, e.g. {SWEEP_SECONDS_ENV}=600")
    return seconds


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
                logger.warning("the served-thread sweep skipped: the server's threads API "
                               "did not answer POST /threads/search with 200")
                return removed
            for thread_id in await asyncio.to_thread(self.files.noted_threads):
                if not _THREAD_ID.match(thread_id):
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
                    logger.error("thread %s is gone from the server, but its files were not "
                                 "removed: %s. Remove them by hand (as their owner or root), "
                                 "or fix the cause; the next sweep tries again.",
                                 thread_id, error)
                    continue
                if any(asked):
                    removed.append(thread_id)
                    logger.info("thread %s is gone from the server (no request deleted it): "
                                "its files were removed", thread_id)
        return removed

    async def run(self, app: Any) -> None:
        """Sweep now, then every `interval` seconds, until cancelled."""
        while True:
            try:
                await self.sweep(app)
            except Exception as error:  # a sweep that fails must not end the next ones
                logger.error("the served-thread sweep failed: %s; the next runs in %.0fs",
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
        logger.debug("the served-thread sweep: %s %s failed: %s", method, path, error)
        return False
    return bool(response.status_code == status)


def served_app(allow_roles: Collection[str], paths: PathLayout | None = None, *,
               trust_client_identity: bool = False) -> Any:
    """The Starlette app `langgraph.json` names: no routes, the middlewares
    (`RunInputCheck`; `StatedIdentityCheck` with `trust_client_identity`;
    `DeletedThreadFiles` when `paths`, the agent's, says where thread files are) and,
    with `paths`, the sweep for threads the server removed on its own (`GoneThreadSweep`).

    Raises:
        ConfigError: $ANTLER_MAX_REQUEST_BYTES or $ANTLER_SERVED_SWEEP_SECONDS is not a
            positive number.
    """
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    middleware = [Middleware(RunInputCheck, allow_roles=allow_roles,
                             max_bytes=max_request_bytes())]
    if paths is not None and trust_client_identity:
        middleware.append(Middleware(StatedIdentityCheck, paths=paths))
    if paths is not None:
        middleware.append(Middleware(DeletedThreadFiles, paths=paths))
    middleware.append(Middleware(HiddenThreadConflicts))
    sweep = GoneThreadSweep(paths) if paths is not None else None
    return Starlette(middleware=middleware,
                     lifespan=sweep.lifespan() if sweep is not None else None)


async def _read_body(receive: Any, limit: int | None = None) -> tuple[bytes, Any, bool]:
    """The request body, a `receive` that hands it on before what follows, and whether
    it is over `limit` bytes (then only what was read up to there is kept)."""
    chunks: list[bytes] = []
    size = 0
    over = False
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away; the app sees an empty body
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            over = True
            break
        chunks.append(chunk)
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

    return body, replay, over


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
    await _send_json(send, status, {"detail": detail})


async def _send_json(send: Any, status: int, content: Any) -> None:
    body = json.dumps(content).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
