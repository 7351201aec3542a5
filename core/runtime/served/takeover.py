"""A stated identity cannot take over a directory (`StatedIdentityCheck`).

With ``trust_client_identity`` a run's ``context.user_id`` names whose
directory it uses. The server makes a run's context of the assistant's
``context`` with the request's on top (the request's ``config.configurable``
when it sends no ``context``, as a protocol ``run.start`` always does), so the
identity may come from any of them. `StatedIdentityCheck` reads it as the
server will, asking for the assistant as the caller when the request names no
user, and answers 409 with the reason and the fix when that user's directory of
the thread exists and no run of the thread made it, before a run starts (the
graph decides again when it does).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Any

from antler.contracts.runcontext import DEFAULT_USER
from antler.plugin_api.paths import PathLayout

from ..servedfiles import ServedThreadFiles
from .exchange import (
    body_of,
    caller_id,
    capture,
    empty_body,
    parse_json,
    read_body,
    send_json,
    sub_scope,
)
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
        stated = await self._stated_users(scope, parse_json(body))
        # No caller is named "": this lists the stated users whose directory of the thread
        # exists, made by no run of it (most requests: none, and the caller is not asked).
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

    async def _stated_users(self, scope: dict[str, Any], payload: Any) -> list[str]:
        """The user ids a run request states, as the served graph will read them from
        the run's context (`DEFAULT_USER` without one); none for a protocol command
        other than ``run.start``."""
        if not isinstance(payload, dict):
            return []
        if COMMANDS_PATH.match(scope["path"]):
            if payload.get("method") != "run.start":
                return []
            params = payload.get("params")
            payload = params if isinstance(params, dict) else {}
            payload = {**payload, "context": None}  # the server sends none of run.start's
        context = _run_context(payload)
        assistant_id = payload.get("assistant_id")
        if "user_id" not in context and isinstance(assistant_id, str):
            context = {**await self._assistant_context(scope, assistant_id), **context}
        stated = context.get("user_id")
        return [str(stated) if stated is not None else DEFAULT_USER]

    async def _assistant_context(self, scope: dict[str, Any],
                                 assistant_id: str) -> Mapping[str, Any]:
        """The ``context`` of the assistant a run names, as the caller reads it (empty when
        the caller may not, or it has none: then the run fails or carries none)."""
        resolved = _assistant_id(assistant_id)
        if not THREAD_ID.match(resolved):
            return {}
        status, messages = await capture(self.app, sub_scope(
            dict(scope), "GET", f"/assistants/{resolved}"), empty_body())
        assistant = parse_json(body_of(messages)) if status == 200 else None
        context = assistant.get("context") if isinstance(assistant, dict) else None
        return context if isinstance(context, Mapping) else {}


def _run_context(payload: dict[str, Any]) -> Mapping[str, Any]:
    """A run request's own context: its ``context``, else its ``config.configurable``
    (the server makes the run's context of it)."""
    context = payload.get("context")
    if isinstance(context, Mapping) and context:
        return context
    config = payload.get("config")
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    return configurable if isinstance(configurable, Mapping) else {}


def _assistant_id(assistant_id: str) -> str:
    """The id of the assistant a run names: a graph's name stands for the server's
    default assistant of it (the server's own mapping, loaded when it serves)."""
    graphs = sys.modules.get("langgraph_api.graph")  # importing it outside a server fails
    resolve = getattr(graphs, "get_assistant_id", None)
    return str(resolve(assistant_id)) if callable(resolve) else assistant_id


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


