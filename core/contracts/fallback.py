"""The error-fallback marker on synthetic assistant replies.

When a model call cannot produce an answer (the provider kept failing, the
model returned nothing twice), a plugin may end the turn with an assistant
message that explains the failure instead of raising. Such a reply carries
``additional_kwargs["antler_error_fallback"] = {"error_type", "reason",
"detail"}`` so that:

- `antler run` reports the run as failed (exit code 1) with the reason;
- memory and title ignore it (it is not something the agent said);
- a `task` result built from it is marked failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ERROR_FALLBACK_KEY = "antler_error_fallback"


def error_fallback_message(text: str, *, error_type: str, reason: str,
                           detail: str | None = None, id: str | None = None) -> Any:
    """An `AIMessage` with `text` for the user, marked as an error fallback."""
    from langchain_core.messages import AIMessage

    marker = {"error_type": error_type, "reason": reason, "detail": detail}
    return AIMessage(content=text, id=id, additional_kwargs={ERROR_FALLBACK_KEY: marker})


def error_fallback_of(message: Any) -> dict[str, Any] | None:
    """The marker of an error-fallback reply, or None for any other message."""
    marker = _marker(message)
    return dict(marker) if marker is not None else None


def is_error_fallback(message: Any) -> bool:
    return _marker(message) is not None


def _marker(message: Any) -> Mapping[str, Any] | None:
    """The message's own error-fallback marker (not a copy), or None."""
    kwargs = getattr(message, "additional_kwargs", None)
    if not kwargs:
        return None  # most messages: nothing to look at
    if type(kwargs) is not dict and not isinstance(kwargs, Mapping):  # dict: no ABC check
        return None
    marker = kwargs.get(ERROR_FALLBACK_KEY)
    if marker is None:
        return None  # any other message with extra fields
    return marker if type(marker) is dict or isinstance(marker, Mapping) else None
