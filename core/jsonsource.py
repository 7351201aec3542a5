"""JSON decoding within the parse limits.

`json.loads` recurses once per level of nesting, so a hundred thousand brackets
end in a `RecursionError` that names no file or line (or, where the text came
from a tool, breaks the hook reading it). `loads` first measures the nesting
with a scan that runs at the speed of `re` and `str.translate`, and refuses text
nested deeper than `MAX_DEPTH` with a `json.JSONDecodeError` at the bracket that
passed the limit, so every caller that handles invalid JSON handles this too.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from pathlib import Path
from typing import Any

from .parselimits import MAX_DEPTH, read_bounded

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def loads(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(text)`, refused (`json.JSONDecodeError`) past `max_depth` levels."""
    position = too_deep_at(text, max_depth)
    if position is not None:
        raise json.JSONDecodeError(
            f"nested deeper than {max_depth} levels of objects and arrays; flatten the "
            "structure", text, position)
    return json.loads(text)


def load_file(path: str | Path, max_bytes: int | None = None, *,
              max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in the file at `path`, read within its size limit (`read_bounded`,
    whose `SourceLimitError` is a ValueError too)."""
    return loads(read_bounded(Path(path), max_bytes), max_depth=max_depth)


def too_deep_at(text: str, max_depth: int = MAX_DEPTH) -> int | None:
    """The offset of the first bracket nested deeper than `max_depth` (None: none is)."""
    if text.count("[") + text.count("{") <= max_depth:
        return None
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= max_depth:
        return None
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        depth += _STEP.get(match.group(), 0)
        if depth > max_depth:
            return match.start()
    return None  # pragma: no cover - the two scans agree
