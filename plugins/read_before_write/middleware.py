"""ReadBeforeWriteMiddleware: no edit or overwrite of a file the agent has not read as it is now.

``wrap_tool_call`` handles three tools:

``read_file``
    Runs the read, then stamps the SHA-256 of the file's whole content on the
    successful result (`marks.stamp`): ``additional_kwargs["antler_read_mark"]``,
    signed with the server's key (`signing`), so a mark a caller wrote grants
    nothing.
    A partial read (``start_line``/``end_line``) or a truncated one counts as a
    read: the model chose what to look at. A failed read stamps nothing.
``write_file`` (overwrite or append) and ``str_replace``
    When the target exists, the call runs only if the newest genuine mark for
    that path (searched newest-first in the state's messages; a mark whose
    signature does not verify is skipped) matches the file's current hash.
    Otherwise it is answered with an error `ToolMessage` whose
    ``additional_kwargs["antler_tool_meta"]`` marks a refusal (``error_type:
    blocked``, ``reason: read_required | stale_read``,
    ``recommended_next_action: read_first``); the tool never runs.
    Creating a file that does not exist needs no read (a ``str_replace`` of a
    missing file goes on to the tool, which reports it missing).

Only ``read_file`` reads. ``grep``, ``glob`` and ``ls`` stamp no mark: a grep
hit shows the lines that match, not the file, so editing on the strength of
one would be editing text the model has not seen.

Writes never refresh marks: after one edit the file's hash no longer matches
the read, so the next edit needs a new read. Marks live on messages, so a
summarization that drops the read drops the permission with it.

The gate check and the tool call run under one lock per (thread, file), and
reads hold it too. Two writes of one parallel turn cannot both pass on one
mark: the second sees the hash the first left. The locks are keyed by the real
host path and shared by every instance in the process (a subagent writes the
same thread's files).

Fail open, by design: a target that cannot be inspected - no thread id, a
path outside the thread's files (the tool refuses it itself), a directory, an
unreadable file, a sandbox whose files are not under the thread's host
directories (then every target looks new) - passes to the tool unchanged, and
no mark is stamped for it. This gate keeps the model honest about what it
knows; it is not the security boundary (the sandbox is).

Where it sits: after sandbox_audit (manifest), outer of tool-result handling
such as tool_progress and tool_error_handling, so a blocked write returns at
once with its metadata already stamped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from antler.plugin_api import (
    FILE_WRITE_TOOLS,
    PATHS,
    TOOL_META_KEY,
    BuildContext,
    PathLayout,
    refusal,
)

from .locks import KeyedLocks
from .marks import Target, file_state, latest_mark, locate, stamp
from .signing import MarkSigner

__all__ = ["TOOL_META_KEY", "ReadBeforeWriteMiddleware", "build"]

logger = logging.getLogger(__name__)

SOURCE = "read_before_write"
"""Same key and shape as every other refused call's metadata (see
`antler.plugin_api.denied_tool_message`)."""

READ_TOOL = "read_file"
WRITE_TOOLS = FILE_WRITE_TOOLS

_PROCESS_LOCKS = KeyedLocks()
"""Files are process-wide, so their locks are too (keys are real host paths)."""

Result = ToolMessage | Command[Any]


class ReadBeforeWriteMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Stamps read marks on ``read_file`` results and gates writes on them."""

    def __init__(self, layout: PathLayout, *, read_tool: str = READ_TOOL,
                 write_tools: Sequence[str] = WRITE_TOOLS,
                 locks: KeyedLocks | None = None, signer: MarkSigner | None = None) -> None:
        super().__init__()
        self.layout = layout
        self.signer = signer or MarkSigner(layout.base)
        self.read_tool = read_tool
        self.write_tools = frozenset(write_tools)
        self.locks = locks if locks is not None else _PROCESS_LOCKS

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], Result]) -> Result:
        """Gate a write on the newest read mark; stamp a read; pass anything else on."""
        target = self._target(request)
        if target is None:
            return handler(request)
        with self.locks.hold(target.lock_key):
            if request.tool_call.get("name") == self.read_tool:
                return self._stamped(request, target, handler(request))
            refusal = self._refusal(request, target)
            return refusal if refusal is not None else handler(request)

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[Result]]
                              ) -> Result:
        """Async form of `wrap_tool_call`: resolving and hashing the file run in a worker
        thread, so a large file or a slow disk does not stall the event loop."""
        target = await asyncio.to_thread(self._target, request)
        if target is None:
            return await handler(request)
        async with self.locks.ahold(target.lock_key):
            if request.tool_call.get("name") == self.read_tool:
                result = await handler(request)
                return await asyncio.to_thread(self._stamped, request, target, result)
            refusal = await asyncio.to_thread(self._refusal, request, target)
            return refusal if refusal is not None else await handler(request)

    def _target(self, request: ToolCallRequest) -> Target | None:
        """The file a read or write names; None for other tools and uninspectable targets."""
        name = request.tool_call.get("name")
        if name != self.read_tool and name not in self.write_tools:
            return None
        args = request.tool_call.get("args")
        path = args.get("path") if isinstance(args, Mapping) else None
        return locate(self.layout, request.runtime, path)

    def _stamped(self, request: ToolCallRequest, target: Target, result: Result) -> Result:
        state, digest = file_state(target)
        if state != "file" or digest is None:
            return result
        return stamp(result, request.tool_call.get("id"), target, digest, self.signer)

    def _refusal(self, request: ToolCallRequest, target: Target) -> ToolMessage | None:
        state, current = file_state(target)
        if state != "file":
            return None  # creating a file needs no read; uninspectable fails open
        messages = request.state.get("messages", []) if isinstance(request.state, Mapping) \
            else getattr(request.state, "messages", [])
        marked = latest_mark(messages or [], target, self.signer)
        if marked is not None and marked == current:
            return None
        call = request.tool_call
        tool = str(call.get("name") or "")
        if marked is None:
            reason, error_type = (f"{target.virtual} exists and has not been read in this "
                                  "conversation"), "read_required"
        else:
            reason, error_type = (f"{target.virtual} changed since it was last read (each "
                                  "edit needs a fresh read)"), "stale_read"
        logger.info("read_before_write blocked %s of %s: %s", tool, target.virtual, error_type)
        return ToolMessage(
            content=f"Error: {tool} refused: {reason}. Read it with {self.read_tool} first, "
                    "then retry with what it contains now.",
            tool_call_id=str(call.get("id") or ""), name=tool, status="error",
            additional_kwargs={TOOL_META_KEY: refusal(
                "blocked", SOURCE, next_action="read_first", reason=error_type,
                read_tool=self.read_tool, path=target.virtual)},
        )


def build(ctx: BuildContext) -> ReadBeforeWriteMiddleware:
    """Factory named in the manifest: inspects files through the build's `PATHS` service."""
    return ReadBeforeWriteMiddleware(ctx.services.typed(PATHS, PathLayout))
