"""``glob`` and ``grep`` over a directory descriptor: bounded, confined, by virtual path.

Both walk the tree below a directory the caller opened beneath its root
(`antler.plugin_api.confined`), with `confined.walk`: each subdirectory is opened
relative to its parent's descriptor with ``O_NOFOLLOW``, so a symlink is never
followed, whatever the tree does meanwhile, and every file ``grep`` reads is
opened the same way (and must be a regular file). Matches are named by virtual
path (the directory's virtual name plus the relative path).

Bounds, each reported in the result's ``notes`` with how to narrow the search:

* results: ``max_results`` matches (at most `MAX_RESULTS_CAP`), and
  `MAX_RESULT_BYTES` of result text; a grep line is shown up to
  `MAX_SHOWN_LINE_CHARS` characters;
* the walk: `MAX_ENTRIES` entries and `MAX_DEPTH` levels; saved tool results
  (``outputs/.tool-results``) are not searched unless the search starts there;
* grep's reading: the first `MAX_FILE_BYTES` of a file, `MAX_TOTAL_BYTES` over
  all files; files with a NUL byte in their first `BINARY_SNIFF_BYTES` are
  binary and skipped (counted);
* grep's regex time: matching uses the `regex` engine (Python's `re` syntax;
  ``re`` itself backtracks and cannot be interrupted), whose searches take a
  timeout: each file is searched with what is left of `TIME_LIMIT_SECONDS` for
  the whole call (a match is reported at the line where it starts), so a
  pattern that backtracks badly (``(a|aa)+$``, or ``a.*b.*c`` on a long line)
  stops the search there with a note instead of holding the thread. Matching
  releases the interpreter lock, so the agent's other calls run meanwhile.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator
from typing import Any

from antler.contracts.tooloutput import TOOL_RESULTS_DIRNAME
from antler.plugin_api import confined
from antler.plugin_api.sandbox import CUT_NOTE as _CUT
from antler.plugin_api.sandbox import (
    DEFAULT_GLOB_RESULTS,
    DEFAULT_GREP_RESULTS,
    GlobResult,
    GrepResult,
    SearchPatternError,
)

__all__ = [
    "DEFAULT_GLOB_RESULTS",
    "DEFAULT_GREP_RESULTS",
    "GlobResult",
    "GrepResult",
    "SearchPatternError",
    "glob",
    "grep",
]

MAX_RESULTS_CAP = 1000
MAX_RESULT_BYTES = 64 * 1024
MAX_SHOWN_LINE_CHARS = 300
MAX_ENTRIES = 100_000
MAX_DEPTH = 64
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 64 * 1024 * 1024
BINARY_SNIFF_BYTES = 8192
TIME_LIMIT_SECONDS = 10.0

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(
    os, "O_CLOEXEC", 0)




# -- glob patterns --------------------------------------------------------------------------


def compile_glob(pattern: str) -> tuple[re.Pattern[str], int]:
    """A regex matching relative paths for ``pattern``, and how deep it can reach.

    ``*`` and ``?`` match within one path component, ``[...]`` is a character
    class (``[!...]`` negated), ``**`` as a whole component matches any number
    of directories (none included). A pattern without ``/`` matches at any
    depth only through ``**``: ``*.py`` is the top level, ``**/*.py`` every level.
    Names starting with ``.`` are matched like any other.
    """
    if not isinstance(pattern, str) or not pattern.strip():
        raise SearchPatternError("Invalid glob pattern: it is empty; give one such as "
                                 "'**/*.py'.")
    if pattern.startswith("/"):
        raise SearchPatternError(
            f"Invalid glob pattern {pattern!r}: it is absolute, and patterns are relative to "
            "`path`. Put "
            "the directory in `path` and the rest in the pattern (path='/mnt/user-data/"
            "workspace', pattern='**/*.py').")
    components = [part for part in pattern.split("/") if part not in ("", ".")]
    if ".." in components:
        raise SearchPatternError(
            f"Invalid glob pattern {pattern!r}: it contains '..'; search from a higher `path` "
            "instead.")
    pieces: list[str] = []
    for index, part in enumerate(components):
        last = index == len(components) - 1
        if part == "**":
            pieces.append(".*" if last else "(?:[^/]*/)*")
        else:
            pieces.append(_component(part) + ("" if last else "/"))
    depth = MAX_DEPTH if "**" in components else len(components)
    try:
        return re.compile("".join(pieces) + r"\Z", re.DOTALL), depth
    except re.error as error:
        raise SearchPatternError(f"Invalid glob pattern {pattern!r}: {error}.") from None


def _component(part: str) -> str:
    """One path component of a glob pattern as a regex (never matching ``/``)."""
    out: list[str] = []
    index = 0
    while index < len(part):
        char = part[index]
        index += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = index
            if end < len(part) and part[end] in "!^":
                end += 1
            if end < len(part) and part[end] == "]":
                end += 1
            while end < len(part) and part[end] != "]":
                end += 1
            if end >= len(part):
                out.append(re.escape(char))  # no closing ']': a literal '['
                continue
            body = part[index:end].replace("\\", "\\\\")
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append(f"(?!/)[{body}]")
            index = end + 1
        else:
            out.append(re.escape(char))
    return "".join(out)


def _skipped_dirs(virtual: str) -> tuple[str, ...]:
    """Directory names not walked: saved tool results, unless the search starts in them."""
    return () if TOOL_RESULTS_DIRNAME in virtual.split("/") else (TOOL_RESULTS_DIRNAME,)


def _entries(dir_fd: int, depth: int, virtual: str,
             notes: list[str]) -> Iterator[confined.Entry]:
    """`confined.walk`, minus skipped folders, bounded by `MAX_ENTRIES` (noted when cut)."""
    skipped = _skipped_dirs(virtual)
    for seen, entry in enumerate(confined.walk(dir_fd, depth, skip_names=skipped)):
        if seen >= MAX_ENTRIES:
            notes.append(_cut(f"the walk stopped after {MAX_ENTRIES} entries", "`path`"))
            return
        if entry.name in skipped:
            continue
        yield entry


def _cut(what: str, narrow: str, *, more: bool = False) -> str:
    """The note of a cut result: what happened and how to narrow the search."""
    raise_limit = f", or raise max_results (at most {MAX_RESULTS_CAP})" if more else ""
    return f"{_CUT}{what}; narrow {narrow}{raise_limit}]"


def glob(dir_fd: int, virtual: str, pattern: str, *, include_dirs: bool = False,
         max_results: int = DEFAULT_GLOB_RESULTS) -> GlobResult:
    """Paths below the directory ``dir_fd`` (named ``virtual``) that match ``pattern``."""
    matcher, depth = compile_glob(pattern)
    limit = _limit(max_results)
    result = GlobResult()
    size = 0
    for entry in _entries(dir_fd, depth, virtual, result.notes):
        if (entry.kind == "dir" and not include_dirs) or not matcher.match(entry.relative):
            continue
        shown = f"{virtual}/{entry.relative}" + ("/" if entry.kind == "dir" else "")
        size += len(shown.encode("utf-8")) + 1
        if len(result.matches) >= limit:
            result.notes.append(_cut(f"more than {limit} matches", "the pattern or `path`",
                                     more=True))
            break
        if size > MAX_RESULT_BYTES:
            result.notes.append(_cut(f"the matches passed {MAX_RESULT_BYTES} bytes after "
                                     f"{len(result.matches)} paths", "the pattern or `path`"))
            break
        result.matches.append(shown)
    return result


# -- grep -----------------------------------------------------------------------------------


def compile_regex(pattern: str, *, literal: bool, case_sensitive: bool) -> Any:
    """``pattern`` compiled for `grep` (with `regex`), or `SearchPatternError` saying why not."""
    if not isinstance(pattern, str) or pattern == "":
        raise SearchPatternError("Invalid regular expression: it is empty; give the text or "
                                 "regex to find.")
    import regex  # on the first grep: importing it costs a sandbox's start 15 ms

    # MULTILINE: each file is searched whole, and ^ and $ are a line's ends.
    flags = regex.MULTILINE | (0 if case_sensitive else regex.IGNORECASE)
    if literal:
        return regex.compile(regex.escape(pattern), flags)
    try:
        return regex.compile(pattern, flags)
    except regex.error as error:
        where = f" at position {error.pos}" if error.pos is not None else ""
        raise SearchPatternError(
            f"Invalid regular expression {pattern!r}: {error.msg}{where}. Escape special "
            "characters with '\\' or pass literal=true to search for the text as is."
        ) from None


def _glob_filter(pattern: str | None) -> re.Pattern[str] | None:
    """The file filter of grep's ``glob``: a name pattern (no ``/``) matches at any depth."""
    if pattern is None or pattern == "":
        return None
    if "/" not in pattern.strip("/"):
        pattern = "**/" + pattern
    return compile_glob(pattern)[0]


def grep(dir_fd: int, virtual: str, pattern: str, *, glob: str | None = None,
         literal: bool = False, case_sensitive: bool = False,
         max_results: int = DEFAULT_GREP_RESULTS) -> GrepResult:
    """Lines matching ``pattern`` in the regular files below ``dir_fd`` (named ``virtual``)."""
    compiled = compile_regex(pattern, literal=literal, case_sensitive=case_sensitive)
    only = _glob_filter(glob)
    limit = _limit(max_results)
    result = GrepResult()
    deadline = time.monotonic() + TIME_LIMIT_SECONDS
    size = total = partial = 0
    stop: str | None = None  # why the search stopped early, as a note

    for entry in _entries(dir_fd, MAX_DEPTH, virtual, result.notes):
        if entry.kind != "file" or (only is not None and not only.match(entry.relative)):
            continue
        if time.monotonic() > deadline:
            stop = _cut(f"the search stopped after {TIME_LIMIT_SECONDS:g}s",
                        "`path` or `glob`, or simplify the pattern")
            break
        if total >= MAX_TOTAL_BYTES:
            stop = _cut(f"the search stopped after reading {MAX_TOTAL_BYTES} bytes",
                        "`path` or `glob`")
            break
        data, whole = _read_file(entry, min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - total))
        if data is None:
            continue
        total += len(data)
        if b"\x00" in data[:BINARY_SNIFF_BYTES]:
            result.binary_skipped += 1
            continue
        result.files_searched += 1
        partial += not whole
        # Windows line ends as plain ones, so `$` is a line's end there too.
        text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
        for number, line in _matching_lines(compiled, text, deadline):
            if number is None:
                stop = _cut(f"the search stopped after {TIME_LIMIT_SECONDS:g}s",
                            "`path` or `glob`, or simplify the pattern")
                break
            line = line.strip()
            if len(line) > MAX_SHOWN_LINE_CHARS:
                line = line[:MAX_SHOWN_LINE_CHARS] + " [...]"
            shown = f"{virtual}/{entry.relative}:{number}: {line}"
            size += len(shown.encode("utf-8")) + 1
            if len(result.matches) >= limit:
                stop = _cut(f"more than {limit} matching lines", "the pattern, `path` or `glob`",
                            more=True)
                break
            if size > MAX_RESULT_BYTES:
                stop = _cut(f"the matches passed {MAX_RESULT_BYTES} bytes",
                            "the pattern, `path` or `glob`")
                break
            result.matches.append(shown)
        if stop:
            break
    if stop is None and time.monotonic() > deadline:
        stop = _cut(f"the search stopped after {TIME_LIMIT_SECONDS:g}s",
                    "`path` or `glob`, or simplify the pattern")
    if stop:
        result.notes.append(stop)
    if partial:
        result.notes.append(f"[{partial} file(s) larger than {MAX_FILE_BYTES} bytes were "
                            "searched in their first part only; read them with read_file]")
    if result.binary_skipped:
        result.notes.append(f"[{result.binary_skipped} binary file(s) skipped]")
    return result


def _matching_lines(compiled: Any, text: str,
                    deadline: float) -> Iterator[tuple[int | None, str]]:
    """(line number, line) of each line of ``text`` where a match starts, in order.

    The whole text is searched at once (one call per matching line, not per
    line: the engine's timeout costs a clock set-up per call), from the start
    of the line after the last hit; a match is reported at the line where it
    starts. ``(None, "")`` when the deadline passed mid-search.
    """
    position = counted = 0
    number = 1
    while position <= len(text):
        try:
            # The engine stops itself at the deadline, and lets other threads run.
            match = compiled.search(text, position,
                                    timeout=max(0.0, deadline - time.monotonic()),
                                    concurrent=True)
        except TimeoutError:
            yield None, ""
            return
        if match is None:
            return
        start = match.start()
        number += text.count("\n", counted, start)
        counted = start
        first = text.rfind("\n", 0, start) + 1
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield number, text[first:end]
        position = end + 1


def _read_file(entry: confined.Entry, limit: int) -> tuple[bytes | None, bool]:
    """Up to ``limit`` bytes of a regular file, and whether that was all of it; None if unreadable.

    Opened relative to its directory's descriptor with ``O_NOFOLLOW``: a file
    swapped for a symlink meanwhile is not read.
    """
    try:
        fd = os.open(entry.name, _READ, dir_fd=entry.parent_fd)
    except OSError:
        return None, False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, False
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None, False
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data[:limit], len(data) <= limit


def _limit(max_results: int) -> int:
    if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
        raise SearchPatternError(f"Invalid max_results {max_results!r}: give a positive "
                                 f"whole number (at most {MAX_RESULTS_CAP}).")
    return min(max_results, MAX_RESULTS_CAP)
