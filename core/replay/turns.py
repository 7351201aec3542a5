"""Model replies and provider errors as scripted turns, and back.

The recorder writes each reply the way `ScriptedChatModel` reads a turn
(content, tool calls with their ids, usage, finish reason) and each failed call
as an ``error:`` turn of the kind a provider's exception shows (`ERROR_KINDS`);
the replayer turns them back into the `AIMessage` (or exception) the chain got.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from antler.contracts.messages import message_text, provider_text
from antler.contracts.usage import usage_of
from antler.runtime.models.scripted import ErrorSpec, TurnSpec

from .redact import Redactor

__all__ = ["error_turn", "reply_turn", "turn_message"]


def reply_turn(message: Any, redactor: Redactor) -> TurnSpec:
    """The scripted turn that gives `message` again (its text, when its content is blocks)."""
    usage = usage_of(message)
    data: dict[str, Any] = {
        "content": redactor.text(message_text(message)),
        "tool_calls": [{"name": call.get("name"), "id": call.get("id"),
                        "args": redactor.data(dict(call.get("args") or {}))}
                       for call in getattr(message, "tool_calls", None) or []],
    }
    finish = provider_text(message, "finish_reason") or provider_text(message, "stop_reason")
    if finish:
        data["finish_reason"] = finish
    if usage is not None:
        data["usage"] = {"input_tokens": usage["input_tokens"],
                         "output_tokens": usage["output_tokens"]}
    return TurnSpec.model_validate(data)


_BY_STATUS = {401: "auth", 403: "permission", 429: "rate_limit", 529: "overloaded"}


def error_turn(error: BaseException, redactor: Redactor) -> TurnSpec:
    """The ``error:`` turn that fails the call as `error` did (kind, status, code, message)."""
    status = getattr(error, "status_code", None)
    status = status if isinstance(status, int) else None
    code = getattr(error, "code", None)
    code = code if isinstance(code, str) else None
    name = type(error).__name__.lower()
    text = str(error)
    if code == "insufficient_quota":
        kind = "quota"
    elif code == "context_length_exceeded" or "contextoverflow" in name:
        kind = "context_overflow"
    elif status in _BY_STATUS:
        kind = _BY_STATUS[status]
    elif status == 400:
        kind = "invalid_request"
    elif status is not None and status >= 500:
        kind = "server"
    elif "timeout" in name:
        kind = "timeout"
    elif "connection" in name:
        kind = "connection"
    elif "ratelimit" in name:
        kind = "rate_limit"
    else:
        kind = "generic"
    headers = getattr(getattr(error, "response", None), "headers", None) or {}
    retry_after: float | None = None
    try:
        value = headers.get("retry-after")
        retry_after = float(value) if value else None
    except (TypeError, ValueError, AttributeError):
        retry_after = None
    spec = ErrorSpec(kind=kind, message=redactor.text(text) or None, status_code=status,
                     code=code, retry_after=retry_after)
    return TurnSpec(error=spec)


def turn_message(turn: TurnSpec, model_name: str) -> AIMessage:
    """The reply a recorded turn stands for (raises the provider error of an error turn)."""
    if turn.error is not None:
        raise turn.error.exception()
    usage = None
    if turn.usage is not None:
        usage = {"input_tokens": turn.usage.input_tokens,
                 "output_tokens": turn.usage.output_tokens,
                 "total_tokens": turn.usage.input_tokens + turn.usage.output_tokens}
    message = AIMessage(
        content=turn.content,
        tool_calls=[{"name": call.name, "args": dict(call.args), "id": call.id,
                     "type": "tool_call"} for call in turn.tool_calls],
        usage_metadata=usage)
    message.response_metadata = {
        "finish_reason": turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop"),
        "model_name": model_name}
    return message
