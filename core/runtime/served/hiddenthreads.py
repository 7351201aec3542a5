"""Another user's thread id is a missing thread (`HiddenThreadConflicts`).

LangGraph Server answers 409 both when a client creates a thread under an id
that exists and when it copies a thread its auth filter hides (or that does
not exist), which tells the caller that the id is taken. `HiddenThreadConflicts`
answers such a 409 with what reading the thread answers the same caller: the
owner still gets 409 for their own thread, anyone else the server's own 404.
"""

from __future__ import annotations

from typing import Any

from .exchange import capture, empty_body, parse_json, read_body, sub_scope
from .routes import COPY_PATH, THREADS_PATH

__all__ = ["HiddenThreadConflicts"]


class HiddenThreadConflicts:
    """ASGI middleware: a 409 for a thread the caller cannot read answers as reading it does."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        thread_id: str | None = None
        if scope["type"] == "http" and scope["method"] == "POST":
            if copied := COPY_PATH.match(scope["path"]):
                thread_id = copied.group(1)
            elif THREADS_PATH.match(scope["path"]):
                body, receive, _ = await read_body(receive)
                thread_id = _thread_id_of(body)
        if thread_id is None:
            await self.app(scope, receive, send)
            return
        original = dict(scope)  # the server's router adds to the scope it is given
        status, messages = await capture(self.app, scope, receive)
        if status == 409:
            read_status, read = await capture(self.app, _read_scope(original, thread_id),
                                               empty_body())
            if read_status == 404:
                messages = read
        for message in messages:
            await send(message)


def _read_scope(scope: dict[str, Any], thread_id: str) -> dict[str, Any]:
    """`GET /threads/{thread_id}` as the caller of `scope` (same credentials)."""
    return sub_scope(scope, "GET", f"/threads/{thread_id}")


def _thread_id_of(body: bytes) -> str | None:
    payload = parse_json(body)
    thread_id = payload.get("thread_id") if isinstance(payload, dict) else None
    return thread_id if isinstance(thread_id, str) and thread_id else None


