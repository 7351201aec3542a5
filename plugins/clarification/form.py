"""Normalizing what a model wrote into `ask_clarification`: options and form fields.

The clarification middleware short-circuits the tool call before LangChain
validates its arguments against the tool schema, so nothing upstream checks
them. This module is that check. It is pure (no LangChain), deterministic and
total: whatever JSON-like value arrives, it returns a well-formed result and
never raises.

Two kinds of problems are told apart:

* **Structural** problems make a form untrustworthy as a whole: a field that is
  not an object, a missing, malformed, duplicate or reserved name (one that
  collides with a JavaScript `Object.prototype` member such as `__proto__` or
  `toString`, which a browser would resolve to an inherited property), more
  than `MAX_FORM_FIELDS` fields, more than `MAX_FIELD_OPTIONS` options in one
  field, a text longer than `MAX_TEXT_CHARS`, or a normalized definition
  larger than `MAX_FORM_SERIALIZED_BYTES` of UTF-8 JSON. Any one of them
  rejects the *whole* form (`FormResult.fields is None`), and the caller falls
  back to the legacy option/free-text modes: a card must never render as
  complete while silently missing a business field.
* **Benign** problems are repaired in place: an unknown field type (including
  an unhashable one such as `type: []`) becomes `text`, a choice field with no
  usable option becomes `text`, a missing label becomes the name, options are
  flattened, trimmed and deduplicated, blanks dropped.

Options written by a model often come from XML converted to dicts
(`{"option": ["A", {"#text": "B"}]}`) or still carry tags (`<option>A</option>`).
`flatten_options` walks dict/list containers in source order, keeps string and
number leaves, strips residual tags, trims, drops blanks and deduplicates.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from antler.plugins._lib.jsontext import json_container

__all__ = [
    "CHOICE_TYPES",
    "FIELD_TYPES",
    "MAX_FIELD_NAME_CHARS",
    "MAX_FIELD_OPTIONS",
    "MAX_FORM_FIELDS",
    "MAX_FORM_SERIALIZED_BYTES",
    "MAX_TEXT_CHARS",
    "RESERVED_FIELD_NAMES",
    "FormResult",
    "cap_options",
    "clean_text",
    "flatten_options",
    "form_size",
    "normalize_fields",
]

MAX_FORM_FIELDS = 16
"""Most fields one form may have; more rejects the form."""

MAX_FIELD_OPTIONS = 24
"""Most options one choice field may have (after normalization); more rejects the form."""

MAX_TEXT_CHARS = 200
"""Longest label, description, placeholder or option text (after trimming)."""

MAX_FIELD_NAME_CHARS = 64
"""Longest field name."""

MAX_FORM_SERIALIZED_BYTES = 16 * 1024
"""Largest normalized form definition, as compact UTF-8 JSON.

The per-item caps alone admit forms whose plain-text fallback would exceed what
chat channels deliver, truncating trailing fields away; this caps the whole.
"""

FIELD_TYPES = ("text", "textarea", "number", "select", "multiselect", "checkbox")
"""Field types a form may use. Anything else becomes `text`."""

CHOICE_TYPES = frozenset({"select", "multiselect"})
"""Field types that need options; without any they become `text`."""

_TYPE_ALIASES = {
    "string": "text",
    "str": "text",
    "long_text": "textarea",
    "integer": "number",
    "int": "number",
    "float": "number",
    "choice": "select",
    "radio": "select",
    "dropdown": "select",
    "multi_select": "multiselect",
    "multi-select": "multiselect",
    "multiple_choice": "multiselect",
    "boolean": "checkbox",
    "bool": "checkbox",
    "consent": "checkbox",
}

RESERVED_FIELD_NAMES = frozenset({
    "__proto__",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
    "constructor",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "toString",
    "valueOf",
})
"""Members of JavaScript's `Object.prototype`. A form answer keyed by one of these
names would shadow (or, for `__proto__`, replace) an inherited property in the
frontend, so such a name is a structural error."""

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_TAG_RE = re.compile(r"<[^<>]*>")
_WHITESPACE_RE = re.compile(r"\s+")


class _Broken(Exception):
    """A structural problem: the whole form is rejected with this reason."""


@dataclass(frozen=True)
class FormResult:
    """The outcome of `normalize_fields`.

    `fields` is the normalized definition, or None when there is no usable form:
    either none was given (`problem` is None) or a structural problem rejected it
    (`problem` says which, for logs; it is never shown as a form).
    """

    fields: list[dict[str, Any]] | None
    problem: str | None = None


def clean_text(value: Any) -> str:
    """A scalar as one trimmed line of text without XML tags; '' for anything else.

    Strings and finite numbers count (booleans do not: `True` is not a label).
    Runs of whitespace collapse to one space, so a label cannot hide text in
    line breaks.
    """
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, int):
        try:
            text = str(value)
        except ValueError:  # more digits than Python will print
            return ""
    elif isinstance(value, float):
        if not math.isfinite(value):
            return ""
        text = repr(value)
    else:
        return ""
    # Repeat until stable: removing `<a>` from `<<a>b>` leaves the tag `< b>`.
    count = 1
    while count:
        text, count = _TAG_RE.subn(" ", text)
    return _WHITESPACE_RE.sub(" ", text).strip()


MAX_JSON_TEXT_CHARS = 4 * MAX_FORM_SERIALIZED_BYTES
"""Longest JSON-in-a-string `decode_json_text` parses; longer text stays text."""

_TRUE_WORDS = frozenset({"true", "yes", "y", "1", "on", "required"})


def decode_json_text(value: Any) -> Any:
    """A list or object the model sent as a JSON string, decoded; anything else unchanged.

    Models often pass structured arguments as text (``"options": "[\\"a\\", \\"b\\"]"``).
    Only text that starts like a JSON list or object and parses as one is
    decoded, so a plain label such as ``"[draft] plan"`` stays a label.
    """
    if not isinstance(value, str) or len(value) > MAX_JSON_TEXT_CHARS:
        return value
    decoded = json_container(value)
    return value if decoded is None else decoded


def as_flag(value: Any) -> bool:
    """A yes/no argument as the model may write it: ``true``, ``1``, ``"yes"``, ``"true"``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    return isinstance(value, str) and value.strip().lower() in _TRUE_WORDS


def flatten_options(raw: Any) -> list[str]:
    """The option labels in `raw`, flattened, cleaned and deduplicated, in source order.

    `raw` may be a scalar (one option), a list, or a dict from XML conversion;
    containers are walked depth-first in source order (dict values in insertion
    order, keys ignored). Blank labels are dropped; so are duplicates after
    cleaning. No cap is applied here: see `cap_options` and `normalize_fields`.
    """
    options: list[str] = []
    seen: set[str] = set()
    stack: list[Any] = [decode_json_text(raw)]
    walked: set[int] = set()
    # Iterative walk: arbitrarily deep nesting must not hit the recursion limit,
    # and a container met twice (a cycle, from a Python caller) is walked once.
    while stack:
        item = stack.pop()
        # A label (`str`) first: the usual item, without the Mapping ABC check's cost.
        if type(item) is not str and isinstance(item, (Mapping, list, tuple)):
            if id(item) in walked:
                continue
            walked.add(id(item))
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend(reversed(list(children)))
            continue
        text = clean_text(item)
        if text and text not in seen:
            seen.add(text)
            options.append(text)
    return options


def cap_options(options: Iterable[str]) -> list[str]:
    """Options fitted to the caps for the legacy choice mode, which cannot degrade further.

    Labels longer than `MAX_TEXT_CHARS` are shortened with an ellipsis, at most
    `MAX_FIELD_OPTIONS` are kept, and duplicates that shortening created are
    dropped.
    """
    capped: list[str] = []
    seen: set[str] = set()
    for option in options:
        if len(option) > MAX_TEXT_CHARS:
            option = option[: MAX_TEXT_CHARS - 1].rstrip() + "…"
        if option and option not in seen:
            seen.add(option)
            capped.append(option)
        if len(capped) == MAX_FIELD_OPTIONS:
            break
    return capped


def form_size(fields: list[dict[str, Any]]) -> int:
    """Bytes of the compact UTF-8 JSON of a normalized definition."""
    return len(json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def normalize_fields(raw: Any) -> FormResult:
    """Normalize a form definition; reject it whole on any structural problem.

    `raw` is what the model passed as `fields` (a JSON string of the list is
    decoded first). None or an empty list means "no form" (`FormResult(None)`);
    anything else that is not a list is structural. Never raises.
    """
    raw = decode_json_text(raw)
    if raw is None or (isinstance(raw, (list, tuple)) and not raw):
        return FormResult(None)
    try:
        fields = _normalize(raw)
    except _Broken as problem:
        return FormResult(None, str(problem))
    return FormResult(fields)


def _normalize(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, (list, tuple)):
        raise _Broken(f"fields must be a list of objects, got {type(raw).__name__}")
    if len(raw) > MAX_FORM_FIELDS:
        raise _Broken(f"{len(raw)} fields, the limit is {MAX_FORM_FIELDS}")
    names: set[str] = set()
    fields = []
    for index, item in enumerate(raw):
        field = _normalize_field(index, item)
        if field["name"] in names:
            raise _Broken(f"field {index}: duplicate name {field['name']!r}")
        names.add(field["name"])
        fields.append(field)
    size = form_size(fields)
    if size > MAX_FORM_SERIALIZED_BYTES:
        raise _Broken(f"definition is {size} bytes, the limit is {MAX_FORM_SERIALIZED_BYTES}")
    return fields


def _normalize_field(index: int, item: Any) -> dict[str, Any]:
    item = decode_json_text(item)
    if not isinstance(item, Mapping):
        raise _Broken(f"field {index} is a {type(item).__name__}, not an object")
    name = item.get("name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) \
            or len(name) > MAX_FIELD_NAME_CHARS:
        raise _Broken(f"field {index}: name must be 1-{MAX_FIELD_NAME_CHARS} letters, digits, "
                      f"'_' or '-' starting with a letter or '_' (got {_preview(name)})")
    if name in RESERVED_FIELD_NAMES:
        raise _Broken(f"field {index}: name {name!r} collides with Object.prototype")

    field_type = _field_type(item.get("type"), has_options=item.get("options") is not None)
    field: dict[str, Any] = {
        "name": name,
        "label": _bounded_text(index, "label", item.get("label")) or name,
        "type": field_type,
        "required": as_flag(item.get("required")),
    }
    for key in ("description", "placeholder"):
        text = _bounded_text(index, key, item.get(key))
        if text:
            field[key] = text

    if field_type in CHOICE_TYPES:
        options = flatten_options(item.get("options"))
        if len(options) > MAX_FIELD_OPTIONS:
            raise _Broken(f"field {name!r}: {len(options)} options, the limit is "
                          f"{MAX_FIELD_OPTIONS}")
        for option in options:
            if len(option) > MAX_TEXT_CHARS:
                raise _Broken(f"field {name!r}: an option is longer than {MAX_TEXT_CHARS} "
                              "characters")
        if options:
            field["options"] = options
        else:
            field["type"] = "text"  # a choice with nothing to choose is free text
    elif field_type == "checkbox":
        # A boolean that starts at an explicit "no": agreeing must be the user's act.
        # `required` therefore means "must agree", not merely "must answer".
        field["default"] = False
    return field


def _field_type(raw: Any, *, has_options: bool) -> str:
    if raw is None:
        return "select" if has_options else "text"
    if not isinstance(raw, str):  # e.g. `type: []`: unhashable, and no type at all
        return "text"
    key = raw.strip().lower()
    key = _TYPE_ALIASES.get(key, key)
    return key if key in FIELD_TYPES else "text"


def _bounded_text(index: int, key: str, raw: Any) -> str:
    text = clean_text(raw)
    if len(text) > MAX_TEXT_CHARS:
        raise _Broken(f"field {index}: {key} is {len(text)} characters, the limit is "
                      f"{MAX_TEXT_CHARS}")
    return text


def _preview(value: Any) -> str:
    if not isinstance(value, str):
        return f"a {type(value).__name__}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
