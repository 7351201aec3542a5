"""Looking after the threads of a checkpoint database (`antler threads`).

`ThreadAdmin` lists, prunes and deletes threads of SQLite or PostgreSQL
checkpoint databases; each backend's tables are read and pruned by a small
adapter of its own (`_SqliteTables`, `_PostgresTables`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .base import StorageError
from .locks import FileThreadLocks
from .opening import Storage, open_storage
from .postgres import PostgresPool

__all__ = ["ThreadAdmin", "ThreadInfo"]


@dataclass(frozen=True)
class ThreadInfo:
    """One thread of the checkpoint database, as `antler threads list` shows it."""

    thread_id: str
    owner: str | None
    created_at: str | None
    checkpoints: int
    bytes: int

    def as_json(self) -> dict[str, Any]:
        return {"thread": self.thread_id, "owner": self.owner, "created_at": self.created_at,
                "checkpoints": self.checkpoints, "bytes": self.bytes}


class ThreadAdmin:
    """Listing, pruning and deleting the threads of one checkpoint database.

    `checkpointer` is `storage.checkpointer`: 'sqlite' (the file under
    `base_dir`), a SQLite path, or a Postgres URL (or `${NAME}` naming one).
    Pruning and deleting take the thread's run lock first, so they never cut
    under a run; a busy thread raises `ThreadBusyError`.
    """

    def __init__(self, base_dir: Path, checkpointer: Any = "sqlite") -> None:
        self.storage = open_storage(checkpointer, base_dir, store=None)
        self.base_dir = base_dir
        try:
            self.tables = _thread_tables(self.storage)
        except BaseException:
            self.storage.close()
            raise
        assert self.storage.owners is not None
        self.owners = self.storage.owners

    @property
    def where(self) -> str:
        """The database, for messages: its file, or the server without the password."""
        return self.tables.where

    def close(self) -> None:
        self.storage.close()

    def __enter__(self) -> ThreadAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def threads(self, user_id: str | None = None) -> list[ThreadInfo]:
        """Every thread with checkpoints or an owner, oldest first; `user_id` filters."""
        with self.storage.errors():
            sizes = self.tables.sizes()
            owners = self.owners.all()
        infos = []
        for thread in sorted(set(sizes) | set(owners),
                             key=lambda t: (owners.get(t, ("", ""))[1], t)):
            owner, created = owners.get(thread, (None, None))
            if user_id is not None and owner != user_id:
                continue
            count, total = sizes.get(thread, (0, 0))
            infos.append(ThreadInfo(thread, owner, created, count, int(total or 0)))
        return infos

    def info(self, thread_id: str, user_id: str | None = None) -> ThreadInfo:
        """One thread; `user_id` must own it when given."""
        if user_id is not None:
            self.storage.check_owner(thread_id, user_id)
        for info in self.threads():
            if info.thread_id == thread_id:
                return info
        raise StorageError(f"there is no thread {thread_id!r} in {self.where}; "
                           "`antler threads list` shows the threads there are.", self.where)

    def messages(self, thread_id: str) -> list[Any]:
        """The messages of the thread's latest checkpoint."""
        with self.storage.errors():
            latest = self.storage.saver.get_tuple({"configurable": {"thread_id": thread_id}})
        if latest is None:
            return []
        return list(latest.checkpoint.get("channel_values", {}).get("messages") or [])

    def prune(self, keep: int, thread_ids: list[str] | None = None) -> tuple[int, int | None]:
        """Keep the last `keep` checkpoints of each thread, then reclaim the space.

        Returns (checkpoints removed, bytes the database file shrank by; None for
        Postgres, which reclaims the space at its own vacuum). The latest
        checkpoint holds the whole state, so a thread resumes as before; only the
        history behind it (time travel) is gone.
        """
        if keep < 1:
            raise StorageError("--keep must be at least 1: the latest checkpoint is the "
                               "thread's state", self.where)
        before = self.tables.file_size()
        removed = 0
        targets = thread_ids if thread_ids is not None else [
            info.thread_id for info in self.threads()]
        for thread in targets:
            with self.storage.lock(thread), self.storage.errors():
                removed += self.tables.prune(thread, keep)
        with self.storage.errors():
            self.tables.compact()
        after = self.tables.file_size()
        return removed, None if before is None or after is None else max(0, before - after)

    def delete(self, thread_id: str, user_id: str | None = None) -> None:
        """Delete the thread's files, then its checkpoints and owner record.

        The files go first: the thread's sandbox namespace, should it still live in
        the process that ran the thread, is ended, and the directory removed with the
        folders its overlay left (`antler.runtime.sandbox.threaddir`). When that
        fails, a `StorageError` says why and the thread is still there to delete again.
        """
        from antler.runtime.sandbox.threaddir import ThreadDirectoryError, remove_thread_directory

        info = self.info(thread_id, user_id)
        with self.storage.lock(thread_id):
            if info.owner is not None:
                directory = self.base_dir / "users" / info.owner / "threads" / thread_id
                try:
                    remove_thread_directory(directory)
                except ThreadDirectoryError as error:
                    raise StorageError(f"thread {thread_id!r} was not deleted: {error}",
                                       directory) from error
            with self.storage.errors():
                self.storage.saver.delete_thread(thread_id)
                self.owners.forget(thread_id)
            if isinstance(self.storage.locks, FileThreadLocks):
                self.storage.locks.forget(thread_id)  # under the lock (see `FileThreadLocks`)


class _ThreadTables(Protocol):
    """The checkpoint tables of one backend, as `ThreadAdmin` reads and prunes them."""

    @property
    def where(self) -> str:
        """The database, for messages."""

    def sizes(self) -> dict[str, tuple[int, int]]:
        """Each thread's (checkpoints, bytes of checkpoints, blobs and pending writes)."""

    def prune(self, thread_id: str, keep: int) -> int:
        """Drop all but the thread's last `keep` checkpoints per namespace; how many went."""

    def compact(self) -> None:
        """Give the freed space back where the backend can do so at once."""

    def file_size(self) -> int | None:
        """The database file's size (None: the database is no file here)."""


def _thread_tables(storage: Storage) -> _ThreadTables:
    if storage.connection is not None and storage.path is not None:
        return _SqliteTables(storage.connection, storage.path)
    if storage.pool is not None:
        return _PostgresTables(storage.pool)
    raise StorageError(
        "`antler threads` reads a checkpoint database: storage.checkpointer must be "
        "'sqlite', a SQLite file or a postgresql:// URL (memory and none keep no threads "
        "another process could see)", storage.location)


@dataclass
class _SqliteTables:
    connection: sqlite3.Connection
    path: Path

    @property
    def where(self) -> str:
        return str(self.path)

    def sizes(self) -> dict[str, tuple[int, int]]:
        sizes = {row[0]: (row[1], row[2] or 0) for row in self.connection.execute(
            "SELECT thread_id, COUNT(*), SUM(LENGTH(checkpoint) + LENGTH(metadata)) "
            "FROM checkpoints GROUP BY thread_id")}
        for thread, size in self.connection.execute(
                "SELECT thread_id, SUM(LENGTH(value)) FROM writes GROUP BY thread_id"):
            count, total = sizes.get(thread, (0, 0))
            sizes[thread] = (count, total + (size or 0))
        return sizes

    def prune(self, thread_id: str, keep: int) -> int:
        with self.connection:
            removed = self.connection.execute(
                "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id NOT IN ("
                " SELECT checkpoint_id FROM checkpoints AS kept"
                " WHERE kept.thread_id = checkpoints.thread_id"
                " AND kept.checkpoint_ns = checkpoints.checkpoint_ns"
                " ORDER BY checkpoint_id DESC LIMIT ?)", (thread_id, keep)).rowcount
            self.connection.execute(
                "DELETE FROM writes WHERE thread_id = ? AND NOT EXISTS ("
                " SELECT 1 FROM checkpoints AS c WHERE c.thread_id = writes.thread_id"
                " AND c.checkpoint_ns = writes.checkpoint_ns"
                " AND c.checkpoint_id = writes.checkpoint_id)", (thread_id,))
        return int(removed)

    def compact(self) -> None:
        self.connection.execute("VACUUM")

    def file_size(self) -> int | None:
        return self.path.stat().st_size if self.path.exists() else 0


@dataclass
class _PostgresTables:
    """LangGraph's Postgres tables: a checkpoint keeps its large channel values as
    blobs (one per channel version, shared by the checkpoints that have it), so
    pruning drops the blobs no kept checkpoint names."""

    pool: PostgresPool

    @property
    def where(self) -> str:
        return self.pool.where

    def _rows(self, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self.pool.connection() as conn:
            cursor = conn.execute(query, params)
            return list(cursor.fetchall()) if cursor.description else []

    def sizes(self) -> dict[str, tuple[int, int]]:
        sizes = {row["thread_id"]: (int(row["n"]), int(row["size"] or 0)) for row in self._rows(
            "SELECT thread_id, COUNT(*) AS n, SUM(pg_column_size(checkpoint) + "
            "pg_column_size(metadata)) AS size FROM checkpoints GROUP BY thread_id")}
        for table in ("checkpoint_blobs", "checkpoint_writes"):
            for row in self._rows(f"SELECT thread_id, SUM(COALESCE(octet_length(blob), 0)) "
                                  f"AS size FROM {table} GROUP BY thread_id"):
                count, total = sizes.get(row["thread_id"], (0, 0))
                sizes[row["thread_id"]] = (count, total + int(row["size"] or 0))
        return sizes

    def prune(self, thread_id: str, keep: int) -> int:
        with self.pool.connection() as conn, conn.transaction():
            removed = conn.execute(
                "DELETE FROM checkpoints AS c WHERE thread_id = %s AND checkpoint_id NOT IN ("
                " SELECT checkpoint_id FROM checkpoints AS kept"
                " WHERE kept.thread_id = c.thread_id AND kept.checkpoint_ns = c.checkpoint_ns"
                " ORDER BY checkpoint_id DESC LIMIT %s)", (thread_id, keep)).rowcount
            conn.execute(
                "DELETE FROM checkpoint_writes AS w WHERE thread_id = %s AND NOT EXISTS ("
                " SELECT 1 FROM checkpoints AS c WHERE c.thread_id = w.thread_id"
                " AND c.checkpoint_ns = w.checkpoint_ns"
                " AND c.checkpoint_id = w.checkpoint_id)", (thread_id,))
            conn.execute(
                "DELETE FROM checkpoint_blobs AS b WHERE thread_id = %s AND NOT EXISTS ("
                " SELECT 1 FROM checkpoints AS c WHERE c.thread_id = b.thread_id"
                " AND c.checkpoint_ns = b.checkpoint_ns"
                " AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)",
                (thread_id,))
        return int(removed)

    def compact(self) -> None:
        """Nothing at once: Postgres's autovacuum reuses the space of deleted rows."""

    def file_size(self) -> int | None:
        return None
