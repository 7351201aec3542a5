"""Where a thread's history lives, who owns it, and who may run it right now.

A thread's checkpoints, its owner and its run lock are three services of one
`Storage`, opened from `storage.checkpointer` under the base directory
(`open_storage`, or `storage_for` over the whole `storage:` section):

* the **checkpointer** (LangGraph's saver) keeps the thread's history; it is
  SQLite by default (`sqlite`), or PostgreSQL with a `postgresql://` URL
  (`postgres`); either serves sync and async runs alike (`savers.DualSaver`);
* the **owner record** says which user created the thread (`owners`). A run of
  another user is refused before any graph step, so nothing of the thread is
  read or written for them. The record lives in the checkpoint database itself
  rather than in the checkpoint key: the thread id stays the key every
  LangGraph tool knows, deleting a thread removes both in one place, and a
  stranger gets a clear refusal instead of a silently separate thread of the
  same name;
* the **run lock** lets one run at a time work on a thread, across processes
  (`locks`; a Postgres deployment slots an advisory lock in behind the same
  `ThreadLocks` interface). The runs of one process that wait for a thread
  take it in the order they came, each woken when the run before it lets go
  (`locks.ThreadTurns`); an async run (`Storage.arun`) waits on its event
  loop and tries the lock in a worker thread, so runs queued behind a busy
  thread occupy no worker thread.

Beside it the storage opens the shared store (`store`) on the same backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import (
    ThreadLocks,
    ThreadOwners,
    not_yours,
    resolve_backend,
)
from .failures import ensure_directory, storage_errors
from .locks import LOCKS_DIRNAME, FileThreadLocks, PostgresThreadLocks, ProcessThreadLocks
from .owners import MemoryOwners, SqliteOwners
from .postgres import PostgresOwners, PostgresPool, is_postgres_url
from .savers import DualSaver
from .sqlite import CHECKPOINT_FILENAME, sqlite_saver
from .store import LazyStore, open_store

__all__ = ["Storage", "open_storage", "storage_for"]


@dataclass
class Storage:
    """The checkpointer of an agent plus its owner records, run locks and shared store."""

    saver: Any
    owners: ThreadOwners | None
    locks: ThreadLocks | None
    path: Path | None = None
    """The checkpoint database file, when there is one (named in error messages)."""
    connection: sqlite3.Connection | None = None
    store: Any = None
    """The shared store (`antler.runtime.storage.store`), opened on first use."""
    location: str | None = None
    """Where the checkpoints are, for error messages: the file, or the Postgres URL."""
    pool: PostgresPool | None = None
    """The Postgres connection pool of the checkpointer, when it is Postgres."""
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        if isinstance(self.saver, DualSaver):
            self.saver.close()
        if self.store is not None:
            self.store.close()
        while self.closers:
            self.closers.pop()()
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    async def async_saver(self) -> Any:
        """The saver for async use on the running event loop: LangGraph's
        `AsyncPostgresSaver` on a pool of this loop for Postgres; the saver itself for
        the others (it serves async calls too). For a server that runs graphs itself."""
        if isinstance(self.saver, DualSaver) and self.saver.has_async_side:
            return await self.saver.async_saver()
        return self.saver

    async def aclose(self) -> None:
        """Close what the running event loop opened, then everything else."""
        if isinstance(self.saver, DualSaver):
            await self.saver.aclose()
        self.close()

    def errors(self) -> contextlib.AbstractContextManager[None]:
        """Translate database errors of the block (a run) into `StorageError`."""
        return storage_errors(self.location or self.path or "the checkpoint store",
                              disk=False)

    def check_owner(self, thread_id: str, user_id: str) -> None:
        """Refuse `user_id` when another user created `thread_id`."""
        if self.owners is None:
            return
        with self.errors():
            owner = self.owners.owner(thread_id)
        if owner is not None and owner != user_id:
            raise not_yours(thread_id, user_id)

    def lock(self, thread_id: str, *,
             wait: bool = False) -> contextlib.AbstractContextManager[None]:
        """The thread's run lock for a block; nothing to hold for storage without locks.

        Only a missing lock service (None) means no lock. A lock service is
        never asked whether it is true: one with a `__len__` (a table of the
        locks held) would be false while it held none, and every run would then
        go unlocked.
        """
        if self.locks is None:
            return contextlib.nullcontext()
        return self.locks.hold(thread_id, wait=wait)

    def alock(self, thread_id: str, *,
              wait: bool = False) -> contextlib.AbstractAsyncContextManager[None]:
        """`lock` for an event loop (the lock service's `ahold`)."""
        if self.locks is None:
            return contextlib.nullcontext()
        return self.locks.ahold(thread_id, wait=wait)

    def claim(self, thread_id: str, user_id: str) -> None:
        """Make `user_id` the owner of a new thread; refuse them if another user owns it."""
        if self.owners is None:
            return
        with self.errors():
            owner = self.owners.claim(thread_id, user_id)
        if owner != user_id:
            raise not_yours(thread_id, user_id)

    @contextlib.contextmanager
    def run(self, thread_id: str, user_id: str, *, wait: bool = False) -> Iterator[None]:
        """Hold the thread for one run of `user_id`, claiming it when it is new.

        The owner is checked before the lock (a stranger learns nothing by
        waiting) and again after it, when the claim is made. Runs of this
        process that wait for the thread take it in the order they came.
        """
        self.check_owner(thread_id, user_id)
        with self.lock(thread_id, wait=wait):
            self.claim(thread_id, user_id)
            yield

    @contextlib.asynccontextmanager
    async def arun(self, thread_id: str, user_id: str, *,
                   wait: bool = False) -> AsyncIterator[None]:
        """`run` for an event loop: the owner record is read and written, and the lock
        tried and given back, in worker threads; a busy thread is waited for on the loop.

        A run never waits in a worker thread: the loop's executor has a few
        threads, and runs parked there in a lock wait would leave none for the
        run that holds the lock to give it back, so every run would hang. The
        run waits in the thread's line (`locks.ThreadTurns`) and is woken on
        its loop when its turn comes, in arrival order with the sync runs of
        the process. A caller cancelled while waiting leaves the line, giving
        the lock back as soon as a try it left gets it, so the thread is not
        left held by a run that no longer exists.
        """
        if self.owners is not None:
            await asyncio.to_thread(self.check_owner, thread_id, user_id)
        async with self.alock(thread_id, wait=wait):
            if self.owners is not None:
                await asyncio.to_thread(self.claim, thread_id, user_id)
            yield


def storage_for(settings: Any, base_dir: Path) -> Storage:
    """The storage the operator config's `storage:` section (`StorageSettings`) describes:
    its checkpointer, its store and its pool, under `base_dir`.

    It connects (blocking I/O): a server opens it once, at start-up, and closes it
    with `aclose()` on its event loop at shutdown.
    """
    return open_storage(settings.checkpointer, base_dir, pool=settings.pool,
                        store=settings.store)


def open_storage(kind: Any, base_dir: Path, *, pool: Any = None,
                 store: Any = "auto") -> Storage:
    """The storage for checkpointer `kind`: 'sqlite' (the default), 'memory', a path,
    a `postgresql://` URL, an environment reference `${NAME}` to one of those,
    None/'none', False, or a LangGraph saver.

    None keeps no checkpoints of its own but, run inside another graph, writes
    into the parent's; False never checkpoints, even nested. Without
    checkpoints a thread has no history to protect, so no owners and no locks.
    A caller-provided saver gets owner records kept in this process only (give
    such deployments their own `ThreadOwners`). `pool` (`storage.pool`) sizes a
    Postgres pool; `store` (`storage.store`) picks the shared store: 'auto' is the
    checkpointer's Postgres database, else SQLite under `base_dir`; None opens none.
    """
    kind = resolve_backend(kind)
    if is_postgres_url(kind):
        return _postgres_storage(kind, pool, store)
    storage = _open_checkpointer(kind, base_dir)
    if store is not None:
        storage.store = open_store(store, base_dir, pool)
    return storage


def _open_checkpointer(kind: Any, base_dir: Path) -> Storage:
    if kind is False:
        return Storage(False, None, None)
    if kind in (None, "none"):
        return Storage(None, None, None)
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return Storage(InMemorySaver(), MemoryOwners(), ProcessThreadLocks())
    locks = FileThreadLocks(base_dir / LOCKS_DIRNAME)
    if kind == "sqlite" or isinstance(kind, (str, Path)):
        path = base_dir / CHECKPOINT_FILENAME if kind == "sqlite" else Path(kind)
        if kind == "sqlite":
            ensure_directory(base_dir)
        saver, connection = sqlite_saver(path)
        try:
            with storage_errors(path):
                owners = SqliteOwners(saver.sync.cursor)  # type: ignore[attr-defined]
        except BaseException:
            connection.close()
            raise
        return Storage(saver, owners, locks, path, connection)
    return Storage(kind, MemoryOwners(), locks)


def _postgres_storage(url: str, pool_settings: Any, store: Any) -> Storage:
    pool = PostgresPool(url, min_size=getattr(pool_settings, "min", 1),
                        max_size=getattr(pool_settings, "max", 10)).open()
    try:
        sync = pool.sync_saver()
        owners = PostgresOwners(pool)
    except BaseException:
        pool.close()
        raise
    locks = PostgresThreadLocks(pool)
    storage = Storage(DualSaver(sync, pool.open_async_side, fence=locks.check), owners, locks,
                      location=url, pool=pool, closers=[pool.close])
    if store == "auto" or store == url:
        storage.store = LazyStore(lambda: (pool.store(), None), pool.where)
    return storage
