"""ToolCallLogMiddleware: one JSON line per tool call, written after the call returns.

`wrap_tool_call` (sync and async; the async form writes from a worker
thread): times the inner handler and appends a record to
`{base}/users/{user}/threads/{thread}/{filename}`. It sits in the extension
slot, inside every built-in guard, so it logs the calls that were actually
attempted and what came back (a guard's denial shows as an error result of
the guard, not as a call). Logging never fails the call: a write
error is reported through the `antler.contrib.tool_call_log` logger.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from antler.plugin_api import PATHS, BuildContext, thread_id_of

from .config import ToolCallLogConfig

logger = logging.getLogger("antler.contrib.tool_call_log")


class ToolCallLogMiddleware(AgentMiddleware):
    """Appends a JSON line per tool call to the thread's log file."""

    def __init__(self, layout: Any, config: ToolCallLogConfig) -> None:
        super().__init__()
        self.layout = layout
        self.config = config
        self._lock = threading.Lock()  # parallel tool calls append to the same file

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        started = time.perf_counter()
        result = handler(request)
        self._append(request, result, started)
        return result

    async def awrap_tool_call(self, request: Any,
                              handler: Callable[[Any], Awaitable[Any]]) -> Any:
        started = time.perf_counter()
        result = await handler(request)
        # The file write runs in a worker thread (which sees the run's config):
        # a slow disk must not stall the other runs of the event loop.
        await asyncio.to_thread(self._append, request, result, started)
        return result

    def _append(self, request: Any, result: Any, started: float) -> None:
        call = request.tool_call
        record: dict[str, Any] = {
            "at": time.time(),
            "tool": call.get("name"),
            "call_id": call.get("id"),
            "status": _status(result),
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        if self.config.include_args:
            record["args"] = call.get("args")
        try:
            if thread_id_of(request.runtime) is None:
                return
            paths = self.layout.for_run(request.runtime)
            target = paths.user_data.parent / self.config.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            line = json.dumps(record, default=str, ensure_ascii=False)
            with self._lock, target.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except (OSError, ValueError) as exc:
            logger.warning("could not log tool call %s: %s", call.get("id"), exc)


def _status(result: Any) -> str:
    message = getattr(result, "update", None)
    if isinstance(message, dict):  # a Command: look at the ToolMessage it carries
        found = [m for m in message.get("messages", []) if getattr(m, "type", "") == "tool"]
        result = found[0] if found else result
    return str(getattr(result, "status", "success"))


def build(ctx: BuildContext) -> ToolCallLogMiddleware:
    config = ctx.plugin_config(ToolCallLogConfig)
    return ToolCallLogMiddleware(ctx.services.get(PATHS), config)
