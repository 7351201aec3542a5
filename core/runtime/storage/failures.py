"""What a storage failure means: database and file-system errors as one `StorageError`.

A damaged, locked, read-only or full SQLite file, a base directory that is a
file or cannot be written, and a PostgreSQL server that cannot be reached each
become one `StorageError` naming the path or server and what to do about it
(`storage_error`, and `storage_errors` around a block).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .base import CHECKPOINT_DATABASE, StorageError
from .postgres import is_postgres_url, postgres_error

__all__ = ["ensure_directory", "space_errno", "storage_error", "storage_errors"]

_SQLITE_PROBLEMS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("not a database", "malformed", "database disk image"),
     "is damaged ({error}). Move it aside (`mv {path} {path}.bad`) to start without the "
     "old threads, or restore it from a backup"),
    (("database is locked", "database table is locked"),
     "is locked by another process ({error}). Wait for the other run to finish, or stop "
     "it, and try again"),
    (("readonly", "read-only"),
     "cannot be written ({error}). Check that you may write the file and its directory, "
     "and that the file system is not mounted read-only"),
    (("disk is full", "database or disk is full"),
     "cannot grow: the disk is full ({error}). Free space (`antler threads prune` drops old "
     "checkpoints) and try again"),
    (("unable to open", "disk i/o error"),
     "cannot be opened or read ({error}). Check that its directory exists and that you "
     "may read and write it"),
)

_FREE_SPACE = "free space (`antler threads prune` drops old checkpoints) and try again"

_SPACE_PROBLEMS = {
    errno.ENOSPC: ("the disk is full", _FREE_SPACE),
    errno.EDQUOT: ("the disk quota is used up", _FREE_SPACE),
    errno.EFBIG: ("the file size limit of the process is reached",
                  f"raise it (`ulimit -f`) or {_FREE_SPACE}"),
}
"""Why a file cannot grow and what to do, by the `errno` a write met."""

_SQLITE_IO_CODES = ("SQLITE_IOERR", "SQLITE_CANTOPEN")
"""SQLite result codes (and their extended forms) that hide the `errno` behind them: 'disk
I/O error' and 'unable to open' may well mean a full disk."""

_PROBE_BYTES = 64 * 1024
"""What the space probe writes: more than SQLite needs to open a database (its 32 KiB
shared-memory file) or to add a page to it."""

_OS_PROBLEMS = {
    **{number: "; ".join(problem) for number, problem in _SPACE_PROBLEMS.items()},
    errno.EROFS: "the file system is read-only; use a base directory on a writable one "
                 "(--home or $ANTLER_HOME)",
    errno.EACCES: "permission denied; use a base directory you may write (--home or "
                  "$ANTLER_HOME)",
    errno.EPERM: "permission denied; use a base directory you may write (--home or "
                 "$ANTLER_HOME)",
    errno.ENOTDIR: "a file stands where a directory is needed; move it away or choose "
                   "another base directory (--home or $ANTLER_HOME)",
    errno.EEXIST: "a file stands where a directory is needed; move it away or choose "
                  "another base directory (--home or $ANTLER_HOME)",
}


def storage_error(error: BaseException, path: Path | str,
                  what: str = CHECKPOINT_DATABASE) -> StorageError | None:
    """The `StorageError` for `error` met while using `path`, or None if it is not one.

    `what` names the database in the message: the checkpoint database or the shared store.
    """
    if isinstance(error, StorageError):
        return error
    if is_postgres_url(path):
        return postgres_error(error, str(path))
    if isinstance(error, sqlite3.Error):
        text = str(error)
        lowered = text.lower()
        code = getattr(error, "sqlite_errorname", "") or ""
        if code.startswith(_SQLITE_IO_CODES):
            space = space_errno(Path(path).parent)
            if space is not None:
                reason, advice = _SPACE_PROBLEMS[space]
                return StorageError(
                    f"the {what} {path} cannot grow: {reason} ({text}; writing in "
                    f"{Path(path).parent}: {os.strerror(space)}). {advice[0].upper()}"
                    f"{advice[1:]}", path)
        for needles, advice in _SQLITE_PROBLEMS:
            if any(needle in lowered for needle in needles):
                return StorageError(
                    f"the {what} {path} " + advice.format(error=text, path=path), path)
        return StorageError(f"the {what} {path} failed: {text}", path)
    if isinstance(error, OSError) and error.errno in _OS_PROBLEMS:
        where = error.filename or path
        return StorageError(f"cannot use {where}: {_OS_PROBLEMS[error.errno]}", where)
    return None


def space_errno(directory: Path) -> int | None:
    """ENOSPC, EDQUOT or EFBIG when a file in `directory` cannot grow by `_PROBE_BYTES`,
    else None.

    SQLite reports a write or a shared-memory file it could not extend as 'disk I/O
    error' without the `errno`; writing (and removing) a small file of our own
    there finds out which it was.
    """
    try:
        fd, name = tempfile.mkstemp(prefix=".antler-space-", dir=directory)
    except OSError as exc:
        return exc.errno if exc.errno in _SPACE_PROBLEMS else None
    try:
        left = memoryview(bytes(_PROBE_BYTES))
        while left:
            left = left[os.write(fd, left):]
    except OSError as exc:
        return exc.errno if exc.errno in _SPACE_PROBLEMS else None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
    return None


@contextlib.contextmanager
def storage_errors(path: Path | str, *, disk: bool = True,
                   what: str = CHECKPOINT_DATABASE) -> Iterator[None]:
    """Re-raise database (and, with `disk`, file system) errors of the block as a
    `StorageError`.

    During a run only database errors are translated: an `OSError` there may
    come from a tool or a plugin, and must not be blamed on the storage.
    """
    caught: tuple[type[BaseException], ...] = (sqlite3.Error, OSError) if disk else (
        sqlite3.Error,)
    if is_postgres_url(path):
        caught = (Exception,)  # `storage_error` keeps only psycopg's
    try:
        yield
    except caught as exc:
        translated = storage_error(exc, path, what)
        if translated is None:
            raise
        raise translated from exc


def ensure_directory(path: Path, what: str = "base directory") -> Path:
    """Create `path` (and parents), or explain in one line why it cannot be."""
    if path.exists() and not path.is_dir():
        raise StorageError(
            f"the {what} {path} is a file, not a directory. Move the file away or point "
            "--home / $ANTLER_HOME at a directory.", path)
    with storage_errors(path):
        path.mkdir(parents=True, exist_ok=True)
    return path
