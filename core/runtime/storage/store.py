"""The shared store: cross-thread data of every plugin, in LangGraph's `BaseStore`.

What outlives a thread (a user's memory, title records, any plugin's
per-user data) goes into one store, the `store` service, so every process and
every replica of a deployment sees the same data:

* **SQLite** (the default): `{base}/store.sqlite`, shared by the processes of
  one machine;
* **Postgres**, with a Postgres checkpointer (or `storage.store: URL`): the
  store tables of that database, shared by every replica;
* **memory**: this process only (tests, throwaway agents).

The store is opened on first use, so an agent whose plugins never touch it
creates no file; nor does reading a SQLite store whose file does not exist yet
(there is nothing to read: the answer is empty). Its async form runs the
SQLite store's calls off the event loop (LangGraph's `SqliteStore` has none);
the Postgres store has its own.
Plugins reach it through the `store` service or `runtime.store`, never by
opening it themselves; under LangGraph Server `runtime.store` is the server's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from langgraph.store.base import BaseStore, GetOp, ListNamespacesOp, Op, Result, SearchOp

from .base import SHARED_STORE, resolve_backend
from .failures import storage_errors
from .postgres import PostgresPool, is_postgres_url
from .sqlite import open_sqlite

__all__ = ["STORE_FILENAME", "LazyStore", "open_sqlite_store", "open_store"]

STORE_FILENAME = "store.sqlite"


def open_sqlite_store(path: Path) -> tuple[Any, Callable[[], None]]:
    """LangGraph's `SqliteStore` on `path`, migrated, usable from async code too."""
    from langgraph.store.sqlite import SqliteStore

    class ThreadedSqliteStore(SqliteStore):
        """`SqliteStore` whose errors name the store, and whose async calls run the sync
        ones in a worker thread."""

        def batch(self, ops: Iterable[Op]) -> list[Result]:
            with storage_errors(path, disk=False, what=SHARED_STORE):
                return super().batch(ops)

        async def abatch(self, ops: Iterable[Op]) -> list[Result]:
            return await asyncio.to_thread(self.batch, list(ops))

    store, connection = open_sqlite(path, ThreadedSqliteStore, what=SHARED_STORE,
                                    isolation_level=None)
    return store, connection.close


class LazyStore(BaseStore):
    """A store opened by `opener` on first use; `close()` closes it if it was opened."""

    def __init__(self, opener: Callable[[], tuple[Any, Callable[[], None] | None]],
                 description: str, *, exists: Callable[[], bool] | None = None) -> None:
        self._opener = opener
        self.description = description
        self._exists = exists
        """Whether there is anything to read yet (None: always open to find out)."""
        self._store: Any = None
        self._closer: Callable[[], None] | None = None
        self._lock = threading.Lock()

    @property
    def store(self) -> Any:
        """The opened store (opening it now if needed)."""
        if self._store is None:
            with self._lock:
                if self._store is None:
                    self._store, self._closer = self._opener()
        return self._store

    @property
    def opened(self) -> bool:
        return self._store is not None

    def _nothing_yet(self, ops: list[Op]) -> list[Result] | None:
        """Empty answers to reads of a store not created yet; None when it must be opened."""
        if self._store is not None or self._exists is None or self._exists():
            return None
        if not all(isinstance(op, (GetOp, SearchOp, ListNamespacesOp)) for op in ops):
            return None
        return [None if isinstance(op, GetOp) else [] for op in ops]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        empty = self._nothing_yet(ops)
        return empty if empty is not None else list(self.store.batch(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if self._store is None:  # checking and opening are blocking I/O: not on the loop
            empty = await asyncio.to_thread(self._nothing_yet, ops)
            if empty is not None:
                return empty
            await asyncio.to_thread(lambda: self.store)
        return list(await self.store.abatch(ops))

    def close(self) -> None:
        with self._lock:
            closer, self._closer, self._store = self._closer, None, None
        if closer is not None:
            closer()

    def __repr__(self) -> str:
        return f"LazyStore({self.description})"


def open_store(kind: Any, base_dir: Path, pool_settings: Any = None) -> LazyStore:
    """The shared store for `storage.store` `kind`: 'sqlite' (`{base}/store.sqlite`),
    'memory', or a Postgres URL (its own pool); opened on first use."""
    kind = resolve_backend(kind, "storage.store")
    if kind == "memory":
        from langgraph.store.memory import InMemoryStore

        return LazyStore(lambda: (InMemoryStore(), None), "memory")
    if is_postgres_url(kind):
        def open_postgres() -> tuple[Any, Callable[[], None]]:
            pool = PostgresPool(kind, min_size=getattr(pool_settings, "min", 1),
                                max_size=getattr(pool_settings, "max", 10)).open()
            try:
                return pool.store(), pool.close
            except BaseException:
                pool.close()
                raise

        return LazyStore(open_postgres, "postgres")
    path = base_dir / STORE_FILENAME if kind in ("sqlite", "auto") else Path(kind)
    return LazyStore(lambda: open_sqlite_store(path), str(path), exists=path.exists)
