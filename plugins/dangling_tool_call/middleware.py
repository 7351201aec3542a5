"""DanglingToolCallMiddleware: no tool call reaches the model without a result.

A run can stop between the model asking for a tool and the tool answering: the
user pressed stop, the process restarted, the tool call timed out. The
checkpoint then holds an `AIMessage` whose tool call has no `ToolMessage`, and
every provider rejects the next request built from that history. This
middleware repairs the *request* (never the checkpointed state): right after
each such `AIMessage`, after whatever results it does have, it inserts an
error `ToolMessage` saying the call was interrupted.

It also makes malformed tool calls acceptable to strict (OpenAI-compatible)
providers, again in the request copy only: names outside ``[A-Za-z0-9_-]``
(or empty) are rewritten, arguments that are not a JSON object are wrapped in
one, a missing id is filled in, and calls LangChain could not parse
(``invalid_tool_calls``) become ordinary calls answered by an error result.
The provider's raw payload in ``additional_kwargs["tool_calls"]`` is left as
it was, so nothing the provider said is lost.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage

from antler.plugin_api.context import BuildContext

__all__ = [
    "INTERRUPTED_PLACEHOLDER",
    "MALFORMED_PLACEHOLDER",
    "DanglingToolCallMiddleware",
    "build",
    "repair_messages",
    "sanitize_tool_name",
]

logger = logging.getLogger(__name__)

INTERRUPTED_PLACEHOLDER = "[Tool call was interrupted and did not return a result.]"
MALFORMED_PLACEHOLDER = "[Tool call was malformed and was not executed.]"
FALLBACK_TOOL_NAME = "unknown_tool"
MAX_TOOL_NAME = 64  # OpenAI's limit, the strictest common one

_VALID_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_TOOL_NAME}}}")
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def sanitize_tool_name(name: Any) -> str:
    """A tool name strict providers accept: ``[A-Za-z0-9_-]{1,64}``."""
    if isinstance(name, str) and _VALID_NAME.fullmatch(name):
        return name
    if not isinstance(name, str) or not name.strip():
        return FALLBACK_TOOL_NAME
    return _INVALID_NAME_CHARS.sub("_", name.strip())[:MAX_TOOL_NAME]


def _as_args(args: Any) -> dict[str, Any]:
    """Tool-call arguments as a JSON object, keeping whatever the model sent."""
    if isinstance(args, dict):
        return args
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
        return {"raw_arguments": args}
    return {"raw_arguments": json.dumps(args, default=str)}


def _repair_ai_message(
    message: AIMessage, answered: set[str], position: int
) -> tuple[AIMessage, list[ToolMessage]]:
    """The message with well-formed calls, and placeholders for calls without a result.

    Returns ``message`` itself when its calls needed no change.
    """
    calls: list[dict[str, Any]] = []
    placeholders: list[ToolMessage] = []
    changed = bool(message.invalid_tool_calls)
    raw_calls: list[tuple[Any, str]] = [(c, INTERRUPTED_PLACEHOLDER) for c in message.tool_calls]
    raw_calls += [(c, MALFORMED_PLACEHOLDER) for c in message.invalid_tool_calls]
    for index, (raw, placeholder) in enumerate(raw_calls):
        call: dict[str, Any] = raw if isinstance(raw, dict) else {}
        changed = changed or call is not raw
        name = sanitize_tool_name(call.get("name"))
        args = _as_args(call.get("args"))
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            # Without an id no result can be paired with the call; make one up
            # that is stable for this position in the history.
            call_id = f"antler_missing_id_{position}_{index}"
        if (name, args, call_id) != (call.get("name"), call.get("args"), call.get("id")):
            changed = True
        calls.append({"name": name, "args": args, "id": call_id, "type": "tool_call"})
        if call_id not in answered:
            placeholders.append(ToolMessage(
                content=placeholder, status="error", tool_call_id=call_id, name=name,
            ))
    if changed:
        # model_copy keeps additional_kwargs (the provider's raw tool_calls) untouched.
        message = message.model_copy(update={"tool_calls": calls, "invalid_tool_calls": []})
    return message, placeholders


def repair_messages(messages: Sequence[AnyMessage]) -> list[AnyMessage] | None:
    """The messages with every dangling tool call answered, or None when none needed it.

    Two linear passes: one collects the ids that have a result, one builds the
    repaired list. A placeholder goes right after its `AIMessage` and the
    results that message does have (the run of `ToolMessage` that follows it),
    never at the end of the history. The input is not modified.
    """
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    repaired: list[AnyMessage] | None = None
    pending: list[ToolMessage] = []
    for position, message in enumerate(messages):
        if pending and not isinstance(message, ToolMessage):
            assert repaired is not None
            repaired.extend(pending)
            pending = []
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            fixed, placeholders = _repair_ai_message(message, answered, position)
            if repaired is None and (fixed is not message or placeholders):
                repaired = list(messages[:position])
            pending = placeholders
            message = fixed
        if repaired is not None:
            repaired.append(message)
    if pending:
        assert repaired is not None
        repaired.extend(pending)
    return repaired


class DanglingToolCallMiddleware(AgentMiddleware[AgentState]):
    """Answers interrupted tool calls and fixes malformed ones in the model-bound request.

    Hooks:

    ``wrap_model_call`` / ``awrap_model_call``
        Before each model call, runs `repair_messages` over the request's
        messages. When something needed repair, the model gets a copy of the
        request with the repaired messages; otherwise the very same request
        object passes through. The graph state, and so the checkpoint, is never
        changed: the history keeps exactly what happened.

    Why a wrap hook and not ``before_model``: a ``before_model`` update goes
    through the ``add_messages`` reducer, which can only append or replace, so
    a placeholder could not be put where it belongs, right after the
    `AIMessage` that made the call. Why here: after uploads, so it sees the
    messages as rewritten for this run, and before summarization, which must
    only ever summarize a well-formed history; being early in the list also
    makes it an outer wrapper, so inner wrappers (retries, fallbacks) already
    see the repaired request.
    """

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        return handler(self._repaired(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        return await handler(self._repaired(request))

    @staticmethod
    def _repaired(request: ModelRequest[Any]) -> ModelRequest[Any]:
        repaired = repair_messages(request.messages)
        if repaired is None:
            return request
        logger.debug("model request: added %d placeholder result(s) and/or fixed malformed "
                     "tool calls", len(repaired) - len(request.messages))
        return request.override(messages=repaired)


def build(ctx: BuildContext) -> DanglingToolCallMiddleware:
    """Factory named in the manifest. Stateless; takes no config."""
    return DanglingToolCallMiddleware()
