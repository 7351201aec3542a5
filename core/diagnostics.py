"""Turning validation failures into messages that say where and how to fix.

Shared by the manifest and operator-config loaders: both validate YAML with
pydantic and both must point at file:line:column and suggest the nearest valid
key when a name is misspelt.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from .yamlsource import PathKey, YamlDocument


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest option, or '' when none is close."""
    matches = difflib.get_close_matches(str(word), sorted(set(options)), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


def dotted(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _model_at(model: type[BaseModel] | None, path: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of `path`, for key suggestions."""
    current: Any = model
    for part in path:
        if current is None:
            return None
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _unwrap_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def describe_validation_error(
    exc: ValidationError,
    doc: YamlDocument,
    *,
    base: PathKey = (),
    model: type[BaseModel] | None = None,
) -> list[str]:
    """One line per problem: 'file:line:col: key.path: message (did you mean ...)'."""
    lines = []
    for error in exc.errors():
        loc = tuple(part for part in error["loc"] if not _is_union_tag(part))
        full = (*base, *loc)
        where = doc.locate(full)
        message = error["msg"]
        if error["type"] == "extra_forbidden" and loc:
            owner = _model_at(model, loc[:-1])
            hint = did_you_mean(str(loc[-1]), owner.model_fields) if owner else ""
            message = f"unknown key {loc[-1]!r}{hint}"
            if owner is not None and not hint:
                message += f"; valid keys: {', '.join(sorted(owner.model_fields))}"
        elif error["type"] == "missing":
            message = "required key is missing"
        lines.append(f"{where}: {dotted(full)}: {message}")
    return lines


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts the union member's type name into `loc`; it is noise here.
    return isinstance(part, str) and ("[" in part or part in {"str", "function-after"})
