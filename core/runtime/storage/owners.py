"""Owner records of the in-process and SQLite backends (the Postgres ones live with it).

An owner record says which user created a thread; a run of another user is
refused before any graph step. It lives in the checkpoint database itself
(table `antler_threads`), so deleting a thread removes both in one place.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .base import created_at_now

__all__ = ["MemoryOwners", "SqliteOwners"]


@dataclass
class MemoryOwners:
    """Owner records of one process: for the in-memory and for caller-provided savers."""

    _owners: dict[str, tuple[str, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def owner(self, thread_id: str) -> str | None:
        record = self._owners.get(thread_id)
        return record[0] if record else None

    def claim(self, thread_id: str, user_id: str) -> str:
        with self._lock:
            return self._owners.setdefault(thread_id, (user_id, created_at_now()))[0]

    def forget(self, thread_id: str) -> None:
        with self._lock:
            self._owners.pop(thread_id, None)

    def all(self) -> dict[str, tuple[str, str]]:
        return dict(self._owners)


class SqliteOwners:
    """Owner records in the checkpoint database, table `antler_threads`."""

    def __init__(self, cursor: Callable[[], contextlib.AbstractContextManager[sqlite3.Cursor]],
                 ) -> None:
        self._cursor = cursor
        with self._cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS antler_threads ("
                        "thread_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, "
                        "created_at TEXT NOT NULL)")

    def owner(self, thread_id: str) -> str | None:
        with self._cursor() as cur:
            row = cur.execute("SELECT user_id FROM antler_threads WHERE thread_id = ?",
                              (thread_id,)).fetchone()
        return row[0] if row else None

    def claim(self, thread_id: str, user_id: str) -> str:
        with self._cursor() as cur:
            cur.execute("INSERT OR IGNORE INTO antler_threads VALUES (?, ?, ?)",
                        (thread_id, user_id, created_at_now()))
            row = cur.execute("SELECT user_id FROM antler_threads WHERE thread_id = ?",
                              (thread_id,)).fetchone()
        return str(row[0])

    def forget(self, thread_id: str) -> None:
        with self._cursor() as cur:
            cur.execute("DELETE FROM antler_threads WHERE thread_id = ?", (thread_id,))

    def all(self) -> dict[str, tuple[str, str]]:
        with self._cursor() as cur:
            rows = cur.execute("SELECT thread_id, user_id, created_at FROM antler_threads")
            return {row[0]: (row[1], row[2]) for row in rows}
