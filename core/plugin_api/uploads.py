"""Staging user uploads into a thread's uploads directory, safely.

An upload's name comes from a user. It becomes a file name inside the thread's
uploads directory and nothing else: no separators, no `..`, no control bytes,
no hidden dot-files, bounded length. The metadata returned is what the uploads
plugin reads from the user message's `additional_kwargs["files"]`.
"""

from __future__ import annotations

import os
import shutil
import unicodedata
from pathlib import Path
from typing import Any

from antler.errors import AntlerError

from . import confined
from .paths import VIRTUAL_ROOT, ThreadPaths

MAX_UPLOAD_NAME = 200


class UploadError(AntlerError, ValueError):
    """An upload was refused; the message says which file and why."""


def safe_upload_name(name: object) -> str:
    """`name` if it is a plain file name, else `UploadError` saying what is wrong."""
    if not isinstance(name, str) or not name.strip():
        raise UploadError(f"upload name {name!r} is empty; give the file a name")
    normalized = unicodedata.normalize("NFC", name)
    problems = []
    if "/" in normalized or "\\" in normalized:
        problems.append("contains a path separator")
    if normalized in {".", ".."} or normalized.startswith("."):
        problems.append("starts with '.' (hidden or relative names are not allowed)")
    # Printable text has no control, format or unassigned characters: the per-character
    # look-up is only needed for the rare name that is not.
    if not normalized.isprintable() and any(
            unicodedata.category(ch).startswith("C") for ch in normalized):
        problems.append("contains control or invisible characters")
    if len(normalized.encode("utf-8")) > MAX_UPLOAD_NAME:
        problems.append(f"is longer than {MAX_UPLOAD_NAME} bytes")
    if problems:
        raise UploadError(
            f"upload name {name[:60]!r} is refused: it {' and '.join(problems)}; rename the "
            "file to a plain name such as 'report.pdf'"
        )
    return normalized


def upload_names(records: Any) -> list[str]:
    """The checked file names of a message's ``additional_kwargs["files"]`` records.

    Raises `UploadError` naming the record when the value is not a list of
    ``{"filename": ...}`` records or a name is refused (see `safe_upload_name`).
    """
    if records is None:
        return []
    if not isinstance(records, list):
        raise UploadError(f"additional_kwargs['files'] must be a list of file records, got "
                          f"{type(records).__name__}")
    names = []
    for index, item in enumerate(records):
        name = item.get("filename") if isinstance(item, dict) else None
        try:
            names.append(safe_upload_name(name))
        except UploadError as exc:
            raise UploadError(f"additional_kwargs['files'][{index}]: {exc}") from None
    return names


def stage_upload(paths: ThreadPaths, source: str | Path, name: str | None = None) -> dict[str, Any]:
    """Copy `source` into the thread's uploads directory; return its file record."""
    source = Path(source)
    if not source.is_file():
        raise UploadError(f"upload {str(source)!r} is not a readable file")
    filename = safe_upload_name(name or source.name)
    paths.ensure_directories()
    virtual = f"{VIRTUAL_ROOT}/uploads/{filename}"
    # Opened beneath the thread's root (`confined`): a name the thread's commands
    # made a symlink to a host file is refused, never written through.
    fd = confined.place(paths.mapper, virtual).open(os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                                    0o644)
    with os.fdopen(fd, "wb") as target, source.open("rb") as origin:
        shutil.copyfileobj(origin, target)
        target.flush()
        size = os.fstat(target.fileno()).st_size
    return {"filename": filename, "size": size, "path": virtual}
