"""What a run produced, as comparable values: `plain`, and where two of them differ.

Ids generated per run become `<id1>`, `<id2>`, ..., timestamps `<time>` and the
run's home directory `<home>`, so two runs that did the same thing compare
equal; `first_difference` shows where two that did not first part.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["as_json", "first_difference", "plain"]

_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}",
                   re.IGNORECASE)
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_MAX_DEPTH = 40
_VOLATILE_KEYS = re.compile(r"(^|_)(ms|seconds|elapsed|duration|started|finished|"
                            r"timestamp|created_at|updated_at|time)$")


class _Plain:
    """Turns messages, requests, updates and state into comparable JSON-like values.

    Ids generated per run (message ids, uuids) become `<id1>`, `<id2>`, ... in
    the order they first appear, timestamps become `<time>` and the run's home
    directory `<home>`, so two runs that did the same thing compare equal.
    """

    def __init__(self, home: str | None = None) -> None:
        self.home = home
        self.ids: dict[str, str] = {}
        self.depth = 0

    def text(self, value: str) -> str:
        if self.home:
            value = value.replace(self.home, "<home>")
        value = _UUID.sub(self._id, value)
        value = _TIME.sub("<time>", value)
        return _ADDRESS.sub("", value)

    def _id(self, match: re.Match[str]) -> str:
        key = match.group(0).lower().replace("-", "")
        return self.ids.setdefault(key, f"<id{len(self.ids) + 1}>")

    def __call__(self, value: Any) -> Any:
        if self.depth > _MAX_DEPTH:  # a structure that refers to itself
            return f"<{type(value).__name__} nested too deep>"
        self.depth += 1
        try:
            return self._plain(value)
        finally:
            self.depth -= 1

    def _plain(self, value: Any) -> Any:
        from langchain_core.messages import BaseMessage

        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, BaseMessage):
            return self.message(value)
        if isinstance(value, Mapping):
            return {self.text(str(key)): self(item) for key, item in value.items()
                    if not _VOLATILE_KEYS.search(str(key))}
        if isinstance(value, (list, tuple)):
            return [self(item) for item in value]
        if isinstance(value, (set, frozenset)):
            return sorted((self(item) for item in value), key=repr)
        kind = type(value).__name__
        special = getattr(self, f"_{kind}", None)
        if special is not None:
            return special(value)
        if hasattr(value, "model_dump"):
            return self(value.model_dump())
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {"type": kind, **self({f.name: getattr(value, f.name)
                                          for f in dataclasses.fields(value)})}
        return f"<{kind}>"

    def message(self, message: Any) -> dict[str, Any]:
        plain: dict[str, Any] = {"type": message.type, "content": self(message.content)}
        for field in ("name", "tool_call_id", "status"):
            if getattr(message, field, None) is not None:
                plain[field] = self(getattr(message, field))
        calls = getattr(message, "tool_calls", None)
        if calls:
            plain["tool_calls"] = [{"name": call.get("name"), "args": self(call.get("args")),
                                    "id": self(call.get("id"))} for call in calls]
        if message.additional_kwargs:
            plain["additional_kwargs"] = self(message.additional_kwargs)
        finish = (message.response_metadata or {}).get("finish_reason")
        if finish:
            plain["finish_reason"] = finish
        if message.id is not None:
            plain["id"] = self(message.id)
        return plain

    def _ModelRequest(self, request: Any) -> dict[str, Any]:
        return {"system": self(request.system_message), "messages": self(request.messages),
                "tools": sorted(_tool_name(tool) for tool in request.tools or []),
                "tool_choice": self(request.tool_choice),
                "model_settings": self(request.model_settings)}

    def _ToolCallRequest(self, request: Any) -> dict[str, Any]:
        return {"tool_call": self(dict(request.tool_call))}

    def _ModelResponse(self, response: Any) -> dict[str, Any]:
        return {"result": self(response.result),
                "structured_response": self(response.structured_response)}

    def _ExtendedModelResponse(self, response: Any) -> dict[str, Any]:
        return {"model_response": self(response.model_response),
                "command": self(response.command)}

    def _Command(self, command: Any) -> dict[str, Any]:
        return {"goto": self(command.goto), "update": self(command.update),
                "resume": self(command.resume), "graph": self(command.graph)}


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        return str(tool.get("name") or tool.get("function", {}).get("name"))
    return str(getattr(tool, "name", type(tool).__name__))


def plain(value: Any, home: str | None = None) -> Any:
    """`value` as comparable JSON-like data, with ids numbered afresh (see `_Plain`)."""
    return _Plain(home)(value)


def as_json(value: Any) -> Any:
    """`value` as it comes back through JSON (tuples become lists)."""
    return json.loads(json.dumps(value, default=str))


def first_difference(one: Any, other: Any) -> str:
    """Where two normalized values first differ, and the two sides there."""
    path, a, b = _diff(as_json(one), as_json(other), "")
    return f"    at {path or 'the top'}:\n    one:   {_short(a)}\n    other: {_short(b)}"


def _diff(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key, _MISSING) != b.get(key, _MISSING):
                if key not in a or key not in b:
                    return f"{path}.{key}", a.get(key, "(absent)"), b.get(key, "(absent)")
                return _diff(a[key], b[key], f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list):
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return _diff(x, y, f"{path}[{index}]")
        if len(a) != len(b):
            return f"{path}[{min(len(a), len(b))}:]", a[len(b):], b[len(a):]
    return path, a, b


_MISSING = object()


def _short(value: Any, limit: int = 1500) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "..."
