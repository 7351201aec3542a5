"""ASGI plumbing the served app's middlewares share: a request's body read and handed
on, sub-requests to the server as the caller, JSON answers, the app's one log, and its
numeric environment settings read alike."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

from antler.contracts.runcontext import AUTH_USER_KEY, RunContext, authenticated
from antler.errors import ConfigError

_Number = TypeVar("_Number", int, float)

log = logging.getLogger("antler.runtime.serverapp")
"""The served app's log: every part logs under the one name operators filter on."""


def positive_setting(name: str, default: _Number, parse: Callable[[str], _Number],
                     what: str, unit: str, example: str) -> _Number:
    """The environment variable `name` read by `parse`, `default` when unset or blank; a
    value that is not a positive number is a `ConfigError` naming it (`what` it must be,
    its `unit`) with an `example`."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = parse(value)
    except ValueError:
        number = parse("0")
    if not number > 0:
        raise ConfigError(f"{name}={value!r} is not {what}: give a positive {unit}, "
                          f"e.g. {name}={example}")
    return number


async def read_body(receive: Any, limit: int | None = None) -> tuple[bytes, Any, bool]:
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


def content_length(scope: dict[str, Any]) -> int | None:
    """The request's ``Content-Length`` header, None without a number there."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            with contextlib.suppress(ValueError):
                return int(value)
    return None


def empty_body() -> Any:
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


async def capture(app: Any, scope: dict[str, Any], receive: Any,
                  ) -> tuple[int, list[dict[str, Any]]]:
    """Run `app` on one request; its status and the messages it sent (small JSON answers)."""
    sent: list[dict[str, Any]] = []

    async def keep(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, keep)
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    return (int(start["status"]) if start else 500), sent


def sub_scope(scope: dict[str, Any], method: str, path: str,
              query: bytes = b"") -> dict[str, Any]:
    """A request without a body to `path` as the caller of `scope` (same credentials)."""
    headers = [(name, value) for name, value in scope.get("headers", [])
               if name.lower() not in (b"content-length", b"content-type")]
    return {**scope, "method": method, "path": path, "raw_path": path.encode(),
            "query_string": query, "headers": headers}


def body_of(messages: list[dict[str, Any]]) -> bytes:
    """The body of a captured answer."""
    return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")


def parse_json(body: bytes) -> Any:
    """The body's JSON; None when it is not JSON or nested past the parser's depth
    (the server answers that itself)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def caller_id(user: Any) -> str:
    """The user id the served graph runs auth `user`'s turns as."""
    return authenticated(RunContext(), {AUTH_USER_KEY: user}).user_id


async def answer(send: Any, status: int, detail: str) -> None:
    """Answer `status` with ``{"detail": detail}``."""
    await send_json(send, status, {"detail": detail})


async def send_json(send: Any, status: int, content: Any) -> None:
    """Answer `status` with `content` as JSON."""
    body = json.dumps(content).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
