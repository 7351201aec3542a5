"""SQLite files: opening a database under a set-up lock, and the SQLite checkpointer.

The default backend keeps the checkpoints in `{base}/checkpoints.sqlite` and
the shared store in `{base}/store.sqlite`. A file is set up (migrated) when it
is opened, not on first use, so a damaged, locked or read-only database fails
before a run starts, with its path in the message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .base import CHECKPOINT_DATABASE
from .failures import ensure_directory, storage_errors
from .savers import DualSaver

__all__ = ["CHECKPOINT_FILENAME", "SETUP_LOCK_SUFFIX", "SQLITE_TIMEOUT_SECONDS", "open_sqlite",
           "setup_lock", "sqlite_saver"]

CHECKPOINT_FILENAME = "checkpoints.sqlite"
SETUP_LOCK_SUFFIX = ".setup.lock"
"""`{database}.setup.lock`: held while a process creates or migrates that database."""
SQLITE_TIMEOUT_SECONDS = 5.0
"""How long a write waits for another process's transaction before 'database is locked'."""


def open_sqlite(path: Path, make: Callable[[sqlite3.Connection], Any], *,
                what: str = CHECKPOINT_DATABASE, **connect: Any,
                ) -> tuple[Any, sqlite3.Connection]:
    """(make(connection), connection) on the SQLite file `path`, set up now.

    Set up now, not on first use: a damaged, locked or read-only database then
    fails before a run starts, with its path in the message (`what` names it).
    The set-up runs under `setup_lock`, one process at a time: LangGraph's
    migrations read the schema version and then insert the next one, so two
    processes migrating a fresh file together would both insert it.
    """
    ensure_directory(path.parent)
    with storage_errors(path, what=what):
        connection = sqlite3.connect(str(path), check_same_thread=False,
                                     timeout=SQLITE_TIMEOUT_SECONDS, **connect)
        try:
            made = make(connection)
            with setup_lock(path):
                made.setup()
        except BaseException:
            connection.close()
            raise
    return made, connection


@contextlib.contextmanager
def setup_lock(path: Path) -> Iterator[None]:
    """Hold `{path}.setup.lock` (an `flock`, waited for) while the block sets `path` up.

    The lock is a file of its own, never the database: closing a second
    descriptor of the database would drop SQLite's own POSIX locks on it. Where
    the lock file cannot be created (a read-only directory) the block runs
    unlocked, and the set-up itself reports what is wrong.
    """
    try:
        fd = os.open(f"{path}{SETUP_LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def sqlite_saver(path: Path) -> tuple[DualSaver, sqlite3.Connection]:
    """The SQLite checkpointer on `path` (sync and async), and its connection."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver, connection = open_sqlite(path, SqliteSaver)
    return DualSaver(saver), connection
