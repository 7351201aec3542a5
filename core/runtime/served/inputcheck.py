"""Input checks on every route that writes a thread (`RunInputCheck`).

The served graph refuses input a caller may not send, but a run starts after
the server has answered the request, so the refusal would come back as a
failed run or an error reply. `RunInputCheck` checks the body of every request
that can start a run or write a thread's state (`thread_write`, tested against
the server's route table) as the graph would (`check_run_request`, the state
boundary) and answers with Antler's one-line reason before anything is queued:
400 for refused input or a body nested past the parse depth, 413 for one over
``$ANTLER_MAX_REQUEST_BYTES``, in the error shape of the route's protocol.
A protocol ``run.start`` on a thread waiting on an interrupt is a resume (the
server makes its input the interrupt's answer): it passes as other resumes do.
What passes is still checked by the graph.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from typing import Any

from antler.errors import InputError
from antler.jsonsource import too_deep_at
from antler.parselimits import MAX_DEPTH

from ..inputs import check_input, check_input_keys
from ..stateupdates import StateUpdateBoundary
from .exchange import (
    body_of,
    capture,
    content_length,
    empty_body,
    parse_json,
    positive_setting,
    read_body,
    send_json,
    sub_scope,
)
from .routes import (
    A2A_PATH,
    COMMANDS_PATH,
    CRON_PATH,
    EVENTS_PATH,
    MCP_PATH,
    RUN_PATH,
    STATE_PATH,
    THREAD_ID,
    THREADS_PATH,
)

__all__ = ["MAX_REQUEST_BYTES_ENV", "RunInputCheck", "check_a2a_request", "check_mcp_request",
           "check_new_thread", "check_protocol_command", "check_run_request",
           "check_state_request", "max_request_bytes", "thread_write"]

_REFUSED_STATUS = 400
_TOO_LARGE_STATUS = 413
MAX_REQUEST_BYTES_ENV = "ANTLER_MAX_REQUEST_BYTES"
_DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Largest body (or WebSocket message) a request that writes a thread may send."""
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
    is the run's input (unless the thread waits on an interrupt, which `RunInputCheck`
    asks the server: then it is the interrupt's answer), ``input.respond``'s ``update``
    and ``goto`` its command's."""
    if not isinstance(body, dict):
        return
    params = body.get("params")
    params = params if isinstance(params, dict) else {}
    if body.get("method") == "run.start":
        if params.get("command") is not None:
            raise InputError(
                "run.start: `params.command` is no part of run.start (the server would drop "
                "it); to answer an interrupt, send the answer as `params.input` while the "
                "thread is interrupted, or send input.respond with the interrupt's "
                "`interrupt_id` and your `response`")
        try:
            check_run_request({"input": params.get("input")}, allow_roles)
        except InputError as error:
            raise InputError(
                f"run.start: `params.input` starts a new run, the thread awaiting no answer "
                f"to an interrupt: {error}. To answer an interrupt, send the answer while "
                "the thread is interrupted, as run.start's `input` or as input.respond's "
                "`response` with its `interrupt_id`") from None
    elif body.get("method") == "input.respond":
        try:
            check_run_request({"command": {"resume": True, "update": params.get("update"),
                                           "goto": params.get("goto")}}, allow_roles)
        except InputError as error:
            raise InputError(f"input.respond: {error}") from None


_CHECKS: dict[str, Callable[[Any, Collection[str]], None]] = {
    "run": check_run_request, "state": check_state_request, "thread": check_new_thread,
    "mcp": check_mcp_request, "a2a": check_a2a_request, "command": check_protocol_command}
_WRITES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("POST", RUN_PATH, "run"), ("PATCH", CRON_PATH, "run"), ("POST", STATE_PATH, "state"),
    ("POST", THREADS_PATH, "thread"), ("POST", MCP_PATH, "mcp"), ("POST", A2A_PATH, "a2a"),
    ("POST", COMMANDS_PATH, "command"), ("WEBSOCKET", EVENTS_PATH, "command"))


def thread_write(method: str, path: str) -> str | None:
    """Which check a request to `path` gets (`method` ``WEBSOCKET`` for a WebSocket), the
    kind of write it is: ``run``, ``state``, ``thread``, ``mcp``, ``a2a``, ``command``;
    None for a request that starts no run and writes no thread state."""
    return next((kind for verb, pattern, kind in _WRITES
                 if verb == method and pattern.match(path)), None)


def max_request_bytes() -> int:
    """The body size limit of requests that write a thread: $ANTLER_MAX_REQUEST_BYTES,
    else 16 MiB."""
    return positive_setting(MAX_REQUEST_BYTES_ENV, _DEFAULT_MAX_REQUEST_BYTES, int, "a size",
                            "number of bytes", str(2 * _DEFAULT_MAX_REQUEST_BYTES))


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
            await self.app(scope, self._checked_messages(scope, receive, send), send)
            return
        if (content_length(scope) or 0) > self.max_bytes:
            body, over = b"", True
        else:
            body, receive, over = await read_body(receive, self.max_bytes)
        refusal = await self._refusal(scope, kind, scope["path"], body, over)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, reason = refusal
        await _answer_as(send, kind, parse_json(body) if not over else None, status, reason)

    async def _refusal(self, scope: dict[str, Any], kind: str, path: str, body: bytes,
                       over: bool) -> tuple[int, str] | None:
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
        payload = parse_json(body)
        try:
            _CHECKS[kind](payload, self.allow_roles)
        except InputError as error:
            if kind == "command" and await self._answers_an_interrupt(scope, payload):
                return None
            return _REFUSED_STATUS, str(error)
        return None

    async def _answers_an_interrupt(self, scope: dict[str, Any], payload: Any) -> bool:
        """Whether a protocol ``run.start`` is a resume: the server makes its ``input`` the
        answer to the thread's interrupt (``Command(resume=input)``, as ``input.respond``
        and ``/runs``' ``command.resume`` send one) when the thread, as the caller reads
        it, waits on one. The graph checks the run again when it starts."""
        params = payload.get("params") if isinstance(payload, dict) \
            and payload.get("method") == "run.start" else None
        if not isinstance(params, dict) or params.get("input") is None \
                or params.get("command") is not None:
            return False
        thread = COMMANDS_PATH.match(scope["path"]) or EVENTS_PATH.match(scope["path"])
        if thread is None or not THREAD_ID.match(thread.group(1)):
            return False
        status, messages = await capture(self.app, sub_scope(
            {**scope, "type": "http"}, "GET", f"/threads/{thread.group(1)}"), empty_body())
        state = parse_json(body_of(messages)) if status == 200 else None
        return isinstance(state, dict) and (state.get("status") == "interrupted"
                                            or bool(state.get("interrupts")))

    def _checked_messages(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        """`receive` for a protocol WebSocket: a command with refused input is answered
        with the protocol's error message and never reaches the server."""
        async def checked() -> dict[str, Any]:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                raw = message.get("text")
                body = raw.encode() if isinstance(raw, str) else message.get("bytes") or b""
                refusal = await self._refusal(scope, "command", "the WebSocket", body,
                                              len(body) > self.max_bytes)
                if refusal is None:
                    return message
                payload = parse_json(body) if len(body) <= self.max_bytes else None
                await send({"type": "websocket.send",
                            "text": json.dumps(_command_error(payload, refusal[1]))})
        return checked


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
    await send_json(send, status, body)

