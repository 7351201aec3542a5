"""The bounds every YAML and JSON reader in Antler shares.

A file is read with `read_bounded`: never more than its size limit plus one
byte, so a huge file is refused after reading that much, not after reading it
whole. The text is then parsed by `yamlsource` (YAML) or `jsonsource` (JSON)
within `MAX_DEPTH` levels of nesting and `MAX_NODES` values, where a YAML alias
counts as every value it stands for and all aliases together may stand for at
most `MAX_ALIAS_NODES`. So a few kilobytes of nested aliases, a file of a
hundred thousand brackets or a 50 MB description are refused within about a
second (the worst case is a file of `MAX_NODES` plain values) with the file,
the line and what to change.

The size limit of operator files (config, `--extensions` JSON, manifests,
scripted-model files, token tables) is `ANTLER_MAX_FILE_BYTES`; skills have
their own (`skills: {max_file_bytes: ...}`).
"""

from __future__ import annotations

import errno
import os
from importlib.resources.abc import Traversable
from pathlib import Path

MAX_DEPTH = 100
"""Levels of nested mappings and lists (YAML) or objects and arrays (JSON)."""

MAX_NODES = 100_000
"""Values in one YAML document, each alias counted as every value it stands for."""

MAX_ALIAS_NODES = 10_000
"""Values all the aliases of one YAML document may stand for together."""

MAX_FILE_BYTES_ENV = "ANTLER_MAX_FILE_BYTES"
DEFAULT_MAX_FILE_BYTES = 1024 * 1024
"""Size limit of an operator file unless `ANTLER_MAX_FILE_BYTES` says otherwise."""


class SourceLimitError(ValueError):
    """A file is too large to parse, cannot be read, or is not UTF-8 text."""


def max_file_bytes() -> int:
    """The size limit of operator files: `ANTLER_MAX_FILE_BYTES`, else 1 MiB."""
    value = os.environ.get(MAX_FILE_BYTES_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_FILE_BYTES
    try:
        limit = int(value.replace("_", ""))
    except ValueError:
        limit = 0
    if limit <= 0:
        raise SourceLimitError(
            f"{MAX_FILE_BYTES_ENV}={value!r} is not a size: give a positive number of "
            f"bytes, e.g. {MAX_FILE_BYTES_ENV}={4 * DEFAULT_MAX_FILE_BYTES}")
    return limit


_READ_FIXES = {
    errno.ENOENT: "; check the path (it is relative to the current directory)",
    errno.EISDIR: "; give the path of a file, not of a directory",
    errno.EACCES: "; make the file readable by this user (chmod), or run as its owner",
    errno.ENOTDIR: "; a part of the path is a file, not a directory: check the path",
    errno.ELOOP: "; the path is a symbolic link loop: point it at the real file",
}
"""How to fix the common reasons a file cannot be opened, after its reason."""


def read_bounded(source: str | Path | Traversable, limit: int | None = None, *,
                 setting: str | None = None) -> str:
    """The UTF-8 text of `source`, read only up to `limit` (default: `max_file_bytes()`)
    plus one byte; `SourceLimitError` names the file, the limit and `setting` (default:
    `ANTLER_MAX_FILE_BYTES`) to raise it."""
    limit = max_file_bytes() if limit is None else limit
    setting = setting or MAX_FILE_BYTES_ENV
    path = Path(source) if isinstance(source, str) else source
    try:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise SourceLimitError(f"{source}: cannot read: {exc.strerror or exc}"
                               f"{_READ_FIXES.get(exc.errno or 0, '')}") from None
    if len(data) > limit:
        raise SourceLimitError(
            f"{source}:1:1: larger than the {limit:,}-byte limit for files Antler parses; "
            f"shorten it, or raise the limit with {setting} if the file really needs to be "
            "this large")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SourceLimitError(f"{source}:{line}: not UTF-8 text (byte {exc.start}); save it "
                               "as UTF-8") from None
