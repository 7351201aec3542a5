"""ToolErrorHandlingMiddleware: a failing tool is an answer the model can act on, never a crash.

Hooks
    ``wrap_tool_call`` / ``awrap_tool_call``. The call runs; then:

    * an exception becomes an error `ToolMessage`: ``Error: Tool '<name>'
      failed with <ErrorClass>: <detail>. ...``, the detail cut at 500
      characters. Its ``antler_tool_meta`` is classified from the exception's
      text (`classify_error_text`) with ``source: exception``, replacing any
      stamp. The run goes on; the model decides what to do next;
    * `GraphBubbleUp` (interrupts, a parent's `Command`), cancellation
      (`asyncio.CancelledError`, `KeyboardInterrupt`: not `Exception`s), an
      inner plugin's `PluginHookError` and a refused state write
      (`StateWriteError`, from an inner plugin's hook or a plugin's tool: its
      `on_error: fail` stops the run) propagate untouched;
    * every `ToolMessage` result, also inside a `Command`'s ``messages``
      update, gets the metadata once (`result_meta`: error, partial success or
      success from its status and text). A result an earlier layer stamped (a
      gate's refusal, an MCP error it classified) keeps its stamp. A
      `Command` is otherwise passed on as it is;
    * a ``web_fetch`` page whose title is nothing but an HTTP error status
      (``# 404 Not Found``, ``Title: 503 Service Unavailable``, ``HTTP/1.1
      403 Forbidden``) is an error page the server sent, not content: it is
      stamped as an error classified from that status line
      (`http_error_title`), even though the fetch itself succeeded.

Where it sits and why
    Position 13 (docs/chain.md#tool_error_handling): the innermost of the base tool wrappers, inside
    tool_progress (which reads the metadata stamped here), read_before_write,
    sandbox_audit and the authorization/guardrail gates (whose refusals arrive
    already stamped and are left so). Only clarification's wrapper (last in
    the chain) is closer to the tool.

Configuration
    None: it is always on.

Example
    A tool raising ``TimeoutError("upstream timed out")`` gives the model::

        Error: Tool 'search' failed with TimeoutError: upstream timed out. Continue
        with available context, or choose an alternative tool.

    with ``{"status": "error", "error_type": "transient", "recoverable_by_model":
    false, "recommended_next_action": "try_alternative", "source": "exception"}``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from antler.plugin_api import (
    TOOL_META_KEY,
    BuildContext,
    PluginHookError,
    StateWriteError,
    ToolMeta,
    classify_error_text,
    message_text,
    result_meta,
    with_tool_meta,
)

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["MAX_DETAIL_CHARS", "ToolErrorHandlingMiddleware", "build", "error_message",
           "http_error_title"]

logger = logging.getLogger(__name__)

MAX_DETAIL_CHARS = 500
MISSING_CALL_ID = "missing_tool_call_id"
PAGE_FETCH_TOOLS = frozenset({"web_fetch"})
"""Tools returning a fetched page, whose title can reveal a server's error page."""

_TITLE_SCAN_CHARS = 2000
_TITLE_LABEL = re.compile(r"^(?:#{1,6}\s*|title\s*:\s*)", re.IGNORECASE)
_HTTP_ERROR_LINE = re.compile(
    r"(?:http/\d(?:\.\d)?\s+)?(?:(?:http\s+)?error\s*[:-]?\s*)?([45]\d\d)(?:\s*[:-]?\s*(.*))?",
    re.IGNORECASE)
_REASON_SPELLING = re.compile(r"[\s_-]+")

Result = ToolMessage | Command[Any]


def error_message(request: ToolCallRequest, exc: Exception) -> ToolMessage:
    """The error `ToolMessage` standing for `exc`, raised by the call in `request`."""
    call = request.tool_call
    name = str(call.get("name") or "unknown")
    detail = str(exc).strip() or "(no message)"
    if len(detail) > MAX_DETAIL_CHARS:
        detail = detail[:MAX_DETAIL_CHARS - 3] + "..."
    error_type, recoverable, action = classify_error_text(f"{type(exc).__name__}: {detail}")
    meta = ToolMeta(status="error", error_type=error_type, recoverable_by_model=recoverable,
                    recommended_next_action=action, source="exception",
                    exception=type(exc).__name__)
    return ToolMessage(
        content=f"Error: Tool '{name}' failed with {type(exc).__name__}: {detail}. Continue "
                "with available context, or choose an alternative tool.",
        tool_call_id=str(call.get("id") or MISSING_CALL_ID), name=name, status="error",
        additional_kwargs={TOOL_META_KEY: meta.as_dict()},
    )


def stamp_result(result: Any) -> Any:
    """`result` with metadata on every `ToolMessage` in it that has none yet."""
    if isinstance(result, ToolMessage):
        return _stamped(result)
    update = result.update if isinstance(result, Command) else None
    # A dict (the usual update) skips the slower Mapping ABC check.
    if update is not None and (type(update) is dict or isinstance(update, Mapping)):
        messages = update.get("messages")
        if isinstance(messages, list) and any(_unstamped(m) for m in messages):
            stamped = [_stamped(m) if isinstance(m, ToolMessage) else m for m in messages]
            return dataclasses.replace(result, update={**update, "messages": stamped})
    return result


def _unstamped(message: Any) -> bool:
    return isinstance(message, ToolMessage) and TOOL_META_KEY not in message.additional_kwargs


def http_error_title(text: str) -> str | None:
    """The status line when a fetched page's title is only an HTTP error status, else None.

    The title is the page's first non-blank line, without a Markdown heading mark
    or a ``Title:`` label. Only 4xx and 5xx statuses count, and only when the
    title holds nothing else than the code and its standard reason phrase:
    "404 Not Found" is an error page, "404 errors explained" is an article.
    """
    for line in text[:_TITLE_SCAN_CHARS].splitlines():
        title = _TITLE_LABEL.sub("", line.strip()).strip().rstrip(".")
        if not title:
            continue
        found = _HTTP_ERROR_LINE.fullmatch(title)
        if found is None:
            return None
        try:
            phrase = HTTPStatus(int(found.group(1))).phrase
        except ValueError:  # not a registered status (e.g. 499): no phrase to compare
            phrase = ""
        reason = found.group(2) or ""
        if reason and _REASON_SPELLING.sub(" ", reason).strip().lower() != phrase.lower():
            return None
        return title
    return None


def _stamped(message: ToolMessage) -> ToolMessage:
    if not _unstamped(message):
        return message
    text = message_text(message)
    if message.name in PAGE_FETCH_TOOLS and message.status != "error":
        status_line = http_error_title(text)
        if status_line is not None:
            error_type, recoverable, action = classify_error_text(status_line)
            return with_tool_meta(message, ToolMeta(
                status="error", error_type=error_type, recoverable_by_model=recoverable,
                recommended_next_action=action, source="tool", http_status_title=status_line))
    meta = result_meta(text, errored=message.status == "error")
    return with_tool_meta(message, meta)


class ToolErrorHandlingMiddleware(AgentMiddleware):
    """Turns tool exceptions into error results and stamps every result's metadata."""

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], Result]) -> Result:
        try:
            result = handler(request)
        except (GraphBubbleUp, PluginHookError, StateWriteError):
            raise
        except Exception as exc:
            return self._failed(request, exc)
        return stamp_result(result)

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[Result]]
                              ) -> Result:
        try:
            result = await handler(request)
        except (GraphBubbleUp, PluginHookError, StateWriteError):
            raise
        except Exception as exc:
            return self._failed(request, exc)
        return stamp_result(result)

    @staticmethod
    def _failed(request: ToolCallRequest, exc: Exception) -> ToolMessage:
        logger.warning("tool %r raised %s; answering the model with an error result",
                       request.tool_call.get("name"), type(exc).__name__)
        logger.debug("the exception tool %r raised", request.tool_call.get("name"), exc_info=exc)
        return error_message(request, exc)


def build(ctx: BuildContext) -> ToolErrorHandlingMiddleware:
    """Factory named in the manifest (no configuration)."""
    return ToolErrorHandlingMiddleware()
