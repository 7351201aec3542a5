"""What a long tool result looks like, told in a few lines: its kind, size, structure and ends.

`describe` finds the kind (``json``, ``csv``, ``tsv``, ``yaml``, ``xml``,
``code``, ``log`` or ``text``) and the structure worth knowing before reading
on: a JSON or YAML document's top-level keys, a table's columns and row count,
an XML document's root element, a log's error lines. `synopsis` writes the
block the model sees in place of the result; `cut` is the fallback when the
result could not be saved: its head and tail, never longer than asked.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import yaml

from antler.plugins._lib.jsontext import json_container

__all__ = ["LOG_TOOLS", "PARSE_LIMIT", "Shape", "cut", "describe", "head_and_tail", "joined_text",
           "synopsis"]

LOG_TOOLS = frozenset({"bash", "web_fetch"})
"""Tools whose output is a log by nature (saved as ``.log``)."""

PARSE_LIMIT = 5_000_000
"""Longer results are not parsed (JSON, tables): their kind is told from their name and lines."""

PAGE_CHARS = 8_000
"""About how much one suggested `read_file` page holds."""

_SAMPLE_LINES = 20
_MAX_KEYS = 30
_MAX_ERROR_LINES = 5
_LOG_LINE = re.compile(
    r"^\s*\[?(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|(ERROR|WARN(ING)?|INFO|DEBUG|TRACE|FATAL)\b)")
_ERROR_LINE = re.compile(r"\b(error|failed|failure|exception|traceback|fatal)\b", re.IGNORECASE)
_XML_START = re.compile(r"<\?xml\b|<([A-Za-z_][\w:.-]*)[\s>/]")
_YAML_LINE = re.compile(r"^(?:---|\s*-\s|\s*-$|\s*[\w\"'][\w .\"'-]*:(?:\s|$)|\s*#)")
_CODE_LINE = re.compile(
    r"^\s*(?:(?:def|class|import|from\s+\S+\s+import|function|const|let|var|return|package"
    r"|public|private|protected|fn|func|struct|enum|interface|async\s+def|#include|#define)\b"
    r"|[}\])]|@\w+)|[;{]\s*$")


@dataclass(frozen=True)
class Shape:
    """A result's kind and a few facts about its structure."""

    kind: str
    chars: int
    lines: int
    details: list[str] = field(default_factory=list)

    @property
    def extension(self) -> str:
        return "log" if self.kind == "log" else "json" if self.kind == "json" else "txt"


def describe(text: str, tool: str = "") -> Shape:
    """The kind and structure of `text`, the output of `tool`."""
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    parse = len(text) <= PARSE_LIMIT
    shape = _json_shape(text, lines) if parse else None
    if shape is not None:
        return shape
    sample = _head_lines(text, 200)
    # Timestamped or levelled lines are a log, even when they hold commas or tabs.
    log_like = bool(sample) and sum(1 for line in sample if _LOG_LINE.match(line)) * 3 \
        >= len(sample)
    shape = _table_shape(text, lines) if parse and not log_like else None
    if shape is None and parse:
        shape = _xml_shape(text, lines)
    if shape is None and parse and not log_like:
        shape = _yaml_shape(text, lines)
    if shape is None and not log_like and tool not in LOG_TOOLS:
        shape = _code_shape(text, lines)
    if shape is not None:
        return shape
    if log_like or tool in LOG_TOOLS:
        return Shape("log", len(text), lines, _error_lines(text))
    longest = max((len(line) for line in _head_lines(text, 2_000)), default=0)
    return Shape("text", len(text), lines, [f"longest of the first lines: {longest:,} characters"])


def _head_lines(text: str, count: int) -> list[str]:
    return text[:count * 400].splitlines()[:count]


def _json_shape(text: str, lines: int) -> Shape | None:
    data = json_container(text)
    if data is None:
        return None
    if isinstance(data, dict):
        keys = [f"{key} ({_json_type(value)})" for key, value in list(data.items())[:_MAX_KEYS]]
        more = f", and {len(data) - _MAX_KEYS} more" if len(data) > _MAX_KEYS else ""
        details = [f"object with {len(data)} top-level keys: {', '.join(keys)}{more}"]
    else:
        details = [f"array of {len(data)} items"
                   + (f"; the first is {_json_type(data[0])}" if data else "")]
        if data and isinstance(data[0], dict):
            details.append(f"keys of the first item: {', '.join(list(data[0])[:_MAX_KEYS])}")
    return Shape("json", len(text), lines, details)


def _json_type(value: object) -> str:
    if isinstance(value, dict):
        return f"object of {len(value)} keys"
    if isinstance(value, list):
        return f"array of {len(value)}"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return "number"


def _table_shape(text: str, lines: int) -> Shape | None:
    sample = [line for line in _head_lines(text, _SAMPLE_LINES + 1) if line.strip()]
    if len(sample) < 3 or any(line[:1].isspace() for line in sample):
        return None  # indented output (code, a listing) is not a table
    for delimiter, name in (("\t", "TSV"), (",", "CSV")):
        if not all(delimiter in line for line in sample):
            continue
        try:
            rows = list(csv.reader(sample, delimiter=delimiter))
        except csv.Error:
            continue
        widths = {len(row) for row in rows}
        if len(widths) == 1 and rows[0] and len(rows[0]) >= 2:
            header = ", ".join(cell.strip() for cell in rows[0][:_MAX_KEYS])
            return Shape(name.lower(), len(text), lines,
                         [f"{name}, {len(rows[0])} columns, about {max(lines - 1, 0):,} rows "
                          "after the first", f"first row: {header}"])
    return None


def _xml_shape(text: str, lines: int) -> Shape | None:
    start, end = text.lstrip()[:400], text.rstrip()[-1:]
    if end != ">" or not _XML_START.match(start):
        return None
    root = next((m.group(1) for m in re.finditer(r"<([A-Za-z_][\w:.-]*)[\s>/]", start)), None)
    if root is None:
        return None
    return Shape("xml", len(text), lines, [f"root element <{root}>"])


YAML_PARSE_LIMIT = 1_000_000
"""Longer YAML-looking results are not loaded (the YAML parser is far slower than JSON's)."""

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml_shape(text: str, lines: int) -> Shape | None:
    if len(text) > YAML_PARSE_LIMIT:
        return None
    sample = [line for line in _head_lines(text, _SAMPLE_LINES * 2) if line.strip()]
    if len(sample) < 3 or sum(1 for line in sample if _YAML_LINE.match(line)) < len(sample):
        return None
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)  # a safe loader
    except yaml.YAMLError:
        return None
    if isinstance(data, dict) and data:
        keys = [str(key) for key in list(data)[:_MAX_KEYS]]
        more = f", and {len(data) - _MAX_KEYS} more" if len(data) > _MAX_KEYS else ""
        return Shape("yaml", len(text), lines,
                     [f"mapping with {len(data)} top-level keys: {', '.join(keys)}{more}"])
    if isinstance(data, list) and data:
        return Shape("yaml", len(text), lines, [f"sequence of {len(data)} items"])
    return None


def _code_shape(text: str, lines: int) -> Shape | None:
    sample = [line for line in _head_lines(text, 200) if line.strip()]
    if len(sample) < 5:
        return None
    hits = sum(1 for line in sample if _CODE_LINE.search(line))
    if hits * 3 < len(sample):  # a third of the lines look like source code
        return None
    return Shape("code", len(text), lines, [f"source code; {hits} of the first "
                                            f"{len(sample)} non-blank lines are statements "
                                            "or declarations"])


def _error_lines(text: str) -> list[str]:
    found: list[int] = []
    total = 0
    for number, line in enumerate(text.splitlines(), 1):
        if _ERROR_LINE.search(line):
            total += 1
            if len(found) < _MAX_ERROR_LINES:
                found.append(number)
    if not total:
        return ["no line mentions an error"]
    where = ", ".join(f"{n:,}" for n in found)
    return [f"{total:,} lines mention an error or failure (first at lines {where})"]


def head_and_tail(text: str, head: int, tail: int) -> tuple[str, str]:
    """The first `head` and last `tail` characters, cut at line ends where one is near.

    The two never overlap; neither is longer than asked.
    """
    if head + tail >= len(text):
        return text, ""
    start = text[:head]
    newline = start.rfind("\n")
    if newline >= head // 2:
        start = start[:newline + 1]
    end = text[len(text) - tail:] if tail else ""
    newline = end.find("\n")
    if 0 <= newline < len(end) // 2:
        end = end[newline + 1:]
    return start, end


def synopsis(text: str, shape: Shape, *, path: str | None, head: int, tail: int,
             read_tool: str = "read_file") -> str:
    """The block shown instead of `text`; with `path`, how to read the saved file in pages."""
    first, last = head_and_tail(text, head, tail)
    size = f"{shape.chars:,} characters (~{shape.chars // 4:,} tokens), {shape.lines:,} lines"
    if path is not None:
        page = _page_lines(shape)
        lines = [f"[Tool output saved to a file: {size}; kind: {shape.kind}]",
                 f"File: {path}",
                 f'Read more with {read_tool}(path="{path}", start_line=1, end_line={page}) '
                 f"and the following line ranges; reading it is not budgeted."]
        if shape.chars // max(1, shape.lines) > PAGE_CHARS:
            lines.append(f'Its lines are long: read it {PAGE_CHARS:,} characters at a time with '
                         f'bash(command="tail -c +1 {path} | head -c {PAGE_CHARS}"), raising '
                         f"the +1 by {PAGE_CHARS:,} each time.")
    else:
        lines = [f"[Earlier tool output shown shortened: {size}; kind: {shape.kind}. The full "
                 "text was not saved; run the tool again if you need the rest.]"]
    lines += [f"Structure: {detail}" for detail in shape.details]
    lines.append(f"--- first {len(first):,} characters ---")
    lines.append(first.rstrip("\n"))
    if last:
        from_line = shape.lines - last.count("\n") + (1 if last.endswith("\n") else 0)
        lines.append(f"--- last {len(last):,} characters (from line {max(from_line, 1):,}) ---")
        lines.append(last.rstrip("\n"))
    return "\n".join(lines)


def _page_lines(shape: Shape) -> int:
    average = max(1, shape.chars // max(1, shape.lines))
    return max(1, min(shape.lines, PAGE_CHARS // average))


def cut(text: str, max_chars: int, head: int, tail: int, reason: str) -> str:
    """`text` cut to its head and tail with an omission note, at most `max_chars` long."""
    if len(text) <= max_chars:
        return text
    first, last = head_and_tail(text, head, tail)
    note = (f"\n[... {len(text) - len(first) - len(last):,} of {len(text):,} characters "
            f"omitted: {reason} ...]\n")
    while len(first) + len(note) + len(last) > max_chars and (first or last):
        excess = len(first) + len(note) + len(last) - max_chars
        if last:
            last = last[min(excess, len(last)):]
        else:
            first = first[:max(0, len(first) - excess)]
    return (first + note + last)[:max_chars]


def joined_text(blocks: Iterable[object]) -> str | None:
    """The text of content blocks when every block is text; None when any is not."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text") or ""))
        else:
            return None
    return "\n".join(parts)
