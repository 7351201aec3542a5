"""Turning validation failures into messages that say where and how to fix.

Shared by the manifest and operator-config loaders: both validate YAML with
pydantic and both must point at file:line:column and suggest the nearest valid
key when a name is misspelt.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

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


def _alternatives(annotation: Any) -> list[Any]:
    """The members of a Union/Optional (or the annotation itself), Annotated unwrapped."""
    if get_origin(annotation) is Annotated:
        return _alternatives(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return [alt for arg in get_args(annotation) for alt in _alternatives(arg)]
    return [annotation]


def _step(annotation: Any, part: str | int) -> list[Any]:
    """The annotations reached from `annotation` by one path part (field, key or index)."""
    reached = []
    for alt in _alternatives(annotation):
        origin, args = get_origin(alt), get_args(alt)
        if isinstance(alt, type) and issubclass(alt, BaseModel):
            field = alt.model_fields.get(part) if isinstance(part, str) else None
            if field is not None:
                reached.append(field.annotation)
        elif origin is not None and isinstance(origin, type) and args:
            if issubclass(origin, Mapping) and isinstance(part, str):
                reached.append(args[-1])
            elif issubclass(origin, Sequence) and isinstance(part, int):
                reached.append(args[0])
    return reached


def _model_at(model: type[BaseModel] | None, path: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of `path`, for key suggestions.

    Walks fields, mapping values (`dict[str, Model]`: the key is a name, not a
    field) and list items, through Optional and unions.
    """
    current: list[Any] = [model] if model is not None else []
    for part in path:
        current = [found for annotation in current for found in _step(annotation, part)]
    for annotation in current:
        for alt in _alternatives(annotation):
            if isinstance(alt, type) and issubclass(alt, BaseModel):
                return alt
    return None


_UNWALKED = object()


def _clean_loc(loc: tuple[Any, ...], data: Any,
               error_type: str) -> tuple[tuple[Any, ...], int | None]:
    """`loc` without pydantic's union member tags, and where the first tag was.

    pydantic puts the member's name ('str', 'ExtensionEntry', 'function-after[...]')
    into `loc` when a union fails. Walking the document tells keys from tags: a
    tag is a part the input data does not have at that point (other than the
    last part of a missing key).
    """
    key_error = error_type in ("missing", "extra_forbidden")
    cleaned: list[Any] = []
    tag_at: int | None = None
    current = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if current is _UNWALKED:
            if _is_union_tag(part):
                tag_at = len(cleaned) if tag_at is None else tag_at
            else:
                cleaned.append(part)
            continue
        in_dict = isinstance(current, dict) and part in current
        in_list = (isinstance(current, list) and isinstance(part, int)
                   and not isinstance(part, bool) and 0 <= part < len(current))
        if in_dict or in_list:
            cleaned.append(part)
            current = current[part]
        elif isinstance(part, str) and not (last and key_error and isinstance(current, dict)):
            tag_at = len(cleaned) if tag_at is None else tag_at
        else:
            cleaned.append(part)
            current = _UNWALKED
    return tuple(cleaned), tag_at


def _walk(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return _UNWALKED
    return data


def describe_validation_error(
    exc: ValidationError,
    doc: YamlDocument,
    *,
    base: PathKey = (),
    model: type[BaseModel] | None = None,
    hint: Callable[[tuple[Any, ...]], str | None] | None = None,
) -> list[str]:
    """One line per problem: 'file:line:col: key.path: message (did you mean ...)'.

    When a value may take several shapes (a union) and the input has one of
    them, only that shape's problems are reported: a mapping entry with a
    misspelt key is not also told that it "should be a valid string".
    """
    data = _walk(doc.data, tuple(base))
    problems = [(*_clean_loc(tuple(error["loc"]), data, error["type"]), error)
                for error in exc.errors()]
    # Union branches the input got into (their errors lie deeper than the union itself).
    entered = {loc[:tag_at] for loc, tag_at, _ in problems
               if tag_at is not None and len(loc) > tag_at}
    # Union values whose branch of the input's shape refused the value itself (a
    # validator's sentence): that sentence alone, not "expects a string or <sentence>".
    refused = {loc for loc, tag_at, error in problems
               if tag_at is not None and len(loc) == tag_at and error["type"] == "value_error"}
    lines: list[str] = []
    shallow: dict[tuple[Any, ...], tuple[int, list[str]]] = {}
    for loc, tag_at, error in problems:
        if tag_at is not None and len(loc) == tag_at and loc in entered:
            continue
        if loc in refused and tag_at is not None and len(loc) == tag_at \
                and error["type"] != "value_error":
            continue
        full = (*base, *loc)
        where = doc.locate(full)
        message = error["msg"]
        known = hint(loc) if hint is not None and error["type"] == "extra_forbidden" else None
        if known is not None:
            message = f"unknown key {loc[-1]!r}: {known}"
        elif error["type"] == "extra_forbidden" and loc:
            owner = _model_at(model, loc[:-1])
            suggestion = did_you_mean(str(loc[-1]), owner.model_fields) if owner else ""
            if owner is not None and suggestion and not _accepts(
                    owner, suggestion.split("'")[1], error.get("input")):
                suggestion = ""  # the value could not go under that key either
            message = f"unknown key {loc[-1]!r}{suggestion}"
            if owner is not None and not suggestion:
                message += f"; valid keys: {', '.join(sorted(owner.model_fields))}"
        elif error["type"] == "missing":
            message = "required key is missing"
        elif error["type"] == "invalid_key":
            # pydantic's loc ends with the key itself (as text when it is null).
            parent, _ = _clean_loc(tuple(error["loc"])[:-1], data, error["type"])
            full = (*base, *parent)
            where = doc.locate((*full, error.get("input")))
            key = _flow(error.get("input"))
            message = f"the key `{key}` is not text; quote it (`'{key}': ...`) or remove it"
        elif tag_at is not None and len(loc) == tag_at and loc in refused:
            message = message.removeprefix("Value error, ")
        elif tag_at is not None and len(loc) == tag_at:
            # Every branch of a union failed on the value itself: one line, all shapes.
            shape = _SHAPE_ERRORS.get(error["type"], message)
            if loc in shallow:
                index, shapes = shallow[loc]
                shapes.append(shape)
                lines[index] = (f"{where}: {dotted(full)}: expects {' or '.join(shapes)}; got "
                                f"{_yaml_kind(error.get('input'))}")
                continue
            shallow[loc] = (len(lines), [shape])
            message = f"expects {shape}; got {_yaml_kind(error.get('input'))}"
        elif error["type"] in _SHAPE_ERRORS and loc and not isinstance(loc[-1], int):
            message = _expected_shape(model, loc, error)
        elif error["type"] == "value_error":
            message = message.removeprefix("Value error, ")  # a validator's own sentence
        lines.append(f"{where}: {dotted(full)}: {message}")
    return lines


def _first_paragraph(text: str) -> str:
    """The first paragraph of a (docstring) description, on one line."""
    return " ".join(text.strip().split("\n\n")[0].split())


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts the union member's type name into `loc`; it is noise here.
    return isinstance(part, str) and ("[" in part or part in {"str", "function-after"})


# pydantic error types that mean "the value has the wrong shape" (not a bad value of the
# right shape, such as a number out of range, whose own message is already precise).
_SHAPE_ERRORS = {
    "string_type": "a string", "float_type": "a number", "float_parsing": "a number",
    "int_type": "a whole number", "int_parsing": "a whole number",
    "int_from_float": "a whole number", "bool_type": "true or false",
    "bool_parsing": "true or false", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping",
}

_EXAMPLES: dict[str, Any] = {
    "a string": "text", "a number": 30, "a whole number": 10, "true or false": True,
    "a list": ["item"], "a mapping": {"key": "value"},
}


def _yaml_kind(value: Any) -> str:
    """How YAML calls the kind of `value`, for 'got ...' in a message."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string ({shown!r})"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _flow(value: Any) -> str:
    """`value` written as one line of YAML."""
    import yaml

    return str(yaml.safe_dump(value, default_flow_style=True, width=10_000)).strip()\
        .removesuffix("...").strip()


def _expected_shape(model: type[BaseModel] | None, loc: tuple[Any, ...],
                    error: Any) -> str:
    """'expects <shape> (<what the key is>), e.g. `key: example`; got <kind>'."""
    expected = _SHAPE_ERRORS[error["type"]]
    owner = _model_at(model, loc[:-1])
    field = owner.model_fields.get(loc[-1]) if owner is not None else None
    example: Any = _EXAMPLES[expected]
    what = ""
    if field is not None:
        default = field.get_default(call_default_factory=True)
        if default is not None and _shape_of(default) == expected:
            example = default
        if field.description:
            what = f" ({_first_paragraph(field.description).rstrip('.')})"
    return (f"expects {expected}{what}, e.g. `{loc[-1]}: {_flow(example)}`; "
            f"got {_yaml_kind(error.get('input'))}")


_SHAPES: tuple[tuple[type, str], ...] = (
    (bool, "true or false"), (int, "a whole number"), (float, "a number"),
    (str, "a string"), (list, "a list"), (dict, "a mapping"),
)
"""Python types and the shape a message calls them; `bool` before `int`, its base."""


def _shape_of(value: Any) -> str | None:
    return next((shape for kind, shape in _SHAPES if isinstance(value, kind)), None)


def _accepts(model: type[BaseModel], key: str, value: Any) -> bool:
    """Whether `value` is valid for `model`'s field `key` (so a did-you-mean fits)."""
    from pydantic import TypeAdapter

    info = model.model_fields.get(key)
    if info is None or info.annotation is None:
        return False
    try:
        TypeAdapter(info.annotation).validate_python(value)
    except Exception:
        return False
    return True
