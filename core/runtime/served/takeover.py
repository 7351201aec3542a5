"""A stated identity cannot take over a directory (`StatedIdentityCheck`).

With ``trust_client_identity`` a run's ``context.user_id`` names whose
directory it uses. `StatedIdentityCheck` answers 409 with the reason and the
fix when that user's directory of the thread exists and no run of the thread
made it, before a run starts (the graph decides again when it does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from antler.contracts.runcontext import DEFAULT_USER
from antler.plugin_api.paths import PathLayout

from ..servedfiles import ServedThreadFiles
from .exchange import caller_id, capture, empty_body, parse_json, read_body, send_json, sub_scope
from .routes import COMMANDS_PATH, RUN_PATH, THREAD_ID

__all__ = ["StatedIdentityCheck"]

_TAKEOVER_STATUS = 409


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
        body, receive, _ = await read_body(receive, None)
        payload = parse_json(body)
        stated = _stated_users(payload, scope["path"])
        # No caller is named "": this lists the stated users whose directory of the thread
        # exists, made by no run of it (most requests: none, and no more is asked).
        suspect = [user for user in stated
                   if await asyncio.to_thread(self.files.takeover, thread_id, user, "")]
        if suspect:
            # Who the caller is, the server's auth says: ask it as the caller.
            original = dict(scope)
            probe = sub_scope(original, "GET", f"/threads/{thread_id}")
            await capture(self.app, probe, empty_body())
            if "user" in probe:
                caller = caller_id(probe.get("user"))
                for user in suspect:
                    reason = await asyncio.to_thread(self.files.takeover, thread_id, user,
                                                     caller)
                    if reason is not None:
                        await send_json(send, _TAKEOVER_STATUS, {"detail": reason})
                        return
        await self.app(scope, receive, send)


def _run_thread(scope: dict[str, Any]) -> str | None:
    """The thread id of a request that starts a run on a thread (None for any other)."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path = scope["path"]
    run = RUN_PATH.match(path)
    if run and run.group(1) and run.group(2) != "/batch":
        return run.group(1) if THREAD_ID.match(run.group(1)) else None
    command = COMMANDS_PATH.match(path)
    if command and THREAD_ID.match(command.group(1)):
        return command.group(1)
    return None


def _stated_users(payload: Any, path: str) -> list[str]:
    """The user ids a run request states (``context.user_id``, `DEFAULT_USER` without
    one, as the served graph reads them); none for a protocol command other than
    ``run.start``, whose runs carry no context."""
    if not isinstance(payload, dict):
        return []
    if COMMANDS_PATH.match(path):
        return [DEFAULT_USER] if payload.get("method") == "run.start" else []
    context = payload.get("context")
    stated = context.get("user_id") if isinstance(context, Mapping) else None
    return [str(stated) if stated is not None else DEFAULT_USER]


