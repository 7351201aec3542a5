"""What of a model request replay compares with the recording, to see that it diverged.

A replayed chain answers each model call with the reply recorded at the same
position. That reply is only the right answer if the chain asks what it asked
when the conversation was recorded, so each recorded call keeps the *shape* of
its request: one line per message of the current run the model saw (from the
run's user message on; an earlier run that differed was reported with that
run), without the system prompt and the hidden messages plugins inject (those
are reported on their own, and may hold the time of day):

* ``user <digest>`` for a user message (its original text, uploads block cut);
* ``assistant <digest> calls name(id), ...`` for an earlier reply;
* ``tool name(id): <status>`` for a tool result (``success``, ``denied``, ...).

Tool results are compared by status, not text: a tool that runs again for real
may print another time or size, and that alone does not change what the model
is deciding about. A refusal, a failure or a missing result does.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from antler.contracts.messages import is_hidden, message_text, user_text
from antler.contracts.toolmeta import tool_meta

from .redact import Redactor

__all__ = ["describe_divergence", "request_shape"]

_UPLOADED_FILES = re.compile(r"<uploaded_files>.*?(?:</uploaded_files>|\Z)\s*", re.DOTALL)


def _digest(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:10]


def request_shape(messages: Sequence[Any], redactor: Redactor) -> list[str]:
    """One line per message of a model request's current run, as the module says."""
    start = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if getattr(message, "type", None) == "human" and not is_hidden(message):
            start = index
            break
    shape = []
    for message in messages[start:]:
        kind = getattr(message, "type", None)
        if kind == "system" or is_hidden(message):
            continue
        if kind == "human":
            text = _UPLOADED_FILES.sub("", redactor.text(user_text(message)))
            shape.append(f"user {_digest(text)}")
        elif kind == "ai":
            calls = ", ".join(f"{call.get('name')}({call.get('id')})"
                              for call in getattr(message, "tool_calls", None) or [])
            text = redactor.text(message_text(message))
            shape.append(f"assistant {_digest(text)}" + (f" calls {calls}" if calls else ""))
        elif kind == "tool":
            meta = tool_meta(message)
            status = (meta.error_type or meta.status) if meta is not None else \
                str(getattr(message, "status", None) or "success")
            shape.append(f"tool {getattr(message, 'name', None)}"
                         f"({getattr(message, 'tool_call_id', None)}): {status}")
    return shape



def describe_divergence(expected: Sequence[str], got: Sequence[str]) -> str | None:
    """None when the shapes are equal, else the first difference in words."""
    if list(expected) == list(got):
        return None
    for index, (want, have) in enumerate(zip(expected, got, strict=False)):
        if want != have:
            return f"message {index + 1}: recorded `{want}`, now `{have}`"
    if len(got) > len(expected):
        return f"the request has {len(got) - len(expected)} more message(s): `{got[len(expected)]}`"
    return f"the request lacks {len(expected) - len(got)} message(s): `{expected[len(got)]}`"
