"""The human-input request an `ask_clarification` call becomes, and its text fallback.

A request is a versioned, JSON-safe payload that frontends render as a card:

* version 1, the legacy modes, unchanged for old frontends:
  ``{"version": 1, "source": "ask_clarification", "request_id", "question",
  "context", "mode": "free_text" | "choice_with_other", "options": [...]}``;
* version 2, the form mode, built from `fields`:
  ``{"version": 2, "source", "request_id", "question", "context",
  "mode": "form", "fields": [...]}``. A frontend that only knows version 1
  rejects it and shows the text fallback instead.

Mode selection is deterministic. An explicit legacy `mode` pins that mode;
otherwise usable `fields` make a form, and a form rejected by
`form.normalize_fields` (or absent) falls back to `choice_with_other` when
there are top-level options, else `free_text`. The response protocol is not
versioned: a form card answers with a readable text summary, like free text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from .form import cap_options, flatten_options, normalize_fields

__all__ = [
    "DEFAULT_QUESTION",
    "FORM_VERSION",
    "LEGACY_VERSION",
    "MODE_CHOICE",
    "MODE_FORM",
    "MODE_FREE_TEXT",
    "SOURCE",
    "build_request",
    "render_text",
]

logger = logging.getLogger(__name__)

SOURCE = "ask_clarification"
LEGACY_VERSION = 1
FORM_VERSION = 2
MODE_FREE_TEXT = "free_text"
MODE_CHOICE = "choice_with_other"
MODE_FORM = "form"

DEFAULT_QUESTION = "Could you tell me more about what you need?"
"""Asked when the model called the tool without a usable question."""


def build_request(args: Any, request_id: str | None = None) -> dict[str, Any]:
    """The human-input payload for one call's arguments. Never raises.

    `args` is the raw argument mapping the model produced (anything else is
    treated as empty); `request_id` is the tool call id, so an answer can be
    matched to its card.
    """
    if not isinstance(args, Mapping):
        args = {}
    mode = args.get("mode")
    mode = mode.strip().lower() if isinstance(mode, str) else None
    base: dict[str, Any] = {
        "source": SOURCE,
        "request_id": request_id,
        "question": _text(args.get("question")) or DEFAULT_QUESTION,
        "context": _text(args.get("context")) or None,
    }
    if mode not in (MODE_FREE_TEXT, MODE_CHOICE):
        form = normalize_fields(args.get("fields"))
        if form.fields is not None:
            return {"version": FORM_VERSION, **base, "mode": MODE_FORM, "fields": form.fields}
        if form.problem:
            logger.warning("ask_clarification form rejected, falling back to the legacy "
                           "modes: %s", form.problem)
    options = [] if mode == MODE_FREE_TEXT else cap_options(flatten_options(args.get("options")))
    return {"version": LEGACY_VERSION, **base, "mode": MODE_CHOICE if options else MODE_FREE_TEXT,
            "options": options}


def render_text(request: Mapping[str, Any]) -> str:
    """A readable rendering of a request, for channels and frontends without cards."""
    parts = []
    if request.get("context"):
        parts.append(str(request["context"]))
    parts.append(str(request.get("question") or DEFAULT_QUESTION))
    if request.get("mode") == MODE_FORM:
        lines = ["Please answer:"]
        lines += [_field_line(field) for field in request.get("fields") or []]
        parts.append("\n".join(lines))
    elif request.get("options"):
        lines = [f"{number}. {option}"
                 for number, option in enumerate(request["options"], start=1)]
        lines.append("Reply with a number, or describe something else.")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _field_line(field: Mapping[str, Any]) -> str:
    label = field.get("label") or field.get("name")
    kind = field.get("type")
    if kind == "checkbox":
        note = "must agree: yes/no" if field.get("required") else "yes/no, default no"
        line = f"- {label} ({note})"
    else:
        line = f"- {label}" + (" (required)" if field.get("required") else "")
        if field.get("options"):
            many = "one or more" if kind == "multiselect" else "one"
            line += f": choose {many} of " + "; ".join(field["options"])
    if field.get("description"):
        line += f" — {field['description']}"
    return line


def _text(value: Any) -> str:
    """Text from a model-written value: strings trimmed, other JSON rendered compactly."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    try:
        return json.dumps(value, ensure_ascii=False, default=str).strip()
    except (TypeError, ValueError, RecursionError):  # cycles, deep nesting, huge numbers
        return ""
