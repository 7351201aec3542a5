"""Where a thread's history lives, who owns it, and who may run it right now.

A thread's checkpoints, its owner and its run lock are three services of one
`Storage`, opened from `storage.checkpointer` under the base directory:

* the **checkpointer** (LangGraph's saver) keeps the thread's history;
* the **owner record** says which user created the thread. A run of another
  user is refused before any graph step, so nothing of the thread is read or
  written for them. The record lives in the checkpoint database itself (table
  `antler_threads`) rather than in the checkpoint key: the thread id stays the
  key every LangGraph tool knows, deleting a thread removes both in one place,
  and a stranger gets a clear refusal instead of a silently separate thread of
  the same name;
* the **run lock** lets one run at a time work on a thread, across processes:
  two runs interleaving their checkpoints lose a turn or leave a tool call
  unanswered. The embedded lock is an advisory file lock
  (`{base}/locks/{thread}.lock`), which the kernel releases when its process
  dies, even by `kill -9`; a Postgres deployment slots an advisory lock in
  behind the same `ThreadLocks` interface.

The checkpointer is SQLite by default, or PostgreSQL with a
`postgresql://` URL (see `antler.runtime.postgres`); either serves sync and
async runs alike (`antler.runtime.savers.DualSaver`). Beside it the storage
opens the shared store (`antler.runtime.store`) on the same backend.

Storage failures (a damaged, locked, read-only or full database, a base
directory that is a file, a database server that cannot be reached) become
one `StorageError` naming the path or server and what to do about it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from antler.errors import AntlerError
from antler.plugin_api.paths import validate_id

from .postgres import (
    PostgresOwners,
    PostgresPool,
    PostgresThreadLocks,
    is_postgres_url,
    postgres_error,
)
from .savers import DualSaver
from .store import STORE_FILENAME, LazyStore, open_sqlite_store

__all__ = [
    "CHECKPOINT_FILENAME",
    "FileThreadLocks",
    "MemoryOwners",
    "ProcessThreadLocks",
    "RunLockLostError",
    "SqliteOwners",
    "Storage",
    "StorageError",
    "ThreadAdmin",
    "ThreadBusyError",
    "ThreadInfo",
    "ThreadLocks",
    "ThreadOwners",
    "ThreadOwnershipError",
    "open_storage",
    "open_store",
    "resolve_backend",
    "storage_error",
    "storage_for",
]

CHECKPOINT_FILENAME = "checkpoints.sqlite"
CHECKPOINT_DATABASE = "checkpoint database"
SHARED_STORE = "shared store"
"""What error messages call each SQLite database."""
SETUP_LOCK_SUFFIX = ".setup.lock"
"""`{database}.setup.lock`: held while a process creates or migrates that database."""
LOCKS_DIRNAME = "locks"
SQLITE_TIMEOUT_SECONDS = 5.0
"""How long a write waits for another process's transaction before 'database is locked'."""
_LOCK_POLL_SECONDS = 0.05


class StorageError(AntlerError):
    """The base directory or a database (checkpoints, shared store) cannot be used; the
    message says which and why."""

    def __init__(self, message: str, path: Path | str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ThreadOwnershipError(AntlerError, PermissionError):
    """A run asked for a thread another user created."""


class ThreadBusyError(AntlerError):
    """Another run (in this process or another) is working on the thread."""


class RunLockLostError(AntlerError):
    """A run's lock on its thread ended before the run did (its database session ended);
    the run is stopped before its next checkpoint write."""


# -- error translation -------------------------------------------------------------------

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


# -- owners ------------------------------------------------------------------------------

def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ThreadOwners(Protocol):
    """Who created each thread."""

    def owner(self, thread_id: str) -> str | None:
        """The user who created `thread_id`, or None for a thread nobody created yet."""

    def claim(self, thread_id: str, user_id: str) -> str:
        """Record `user_id` as the owner unless the thread has one; return the owner."""

    def forget(self, thread_id: str) -> None:
        """Drop the owner record (the thread was deleted)."""

    def all(self) -> dict[str, tuple[str, str]]:
        """Every thread's (owner, created_at)."""


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
            return self._owners.setdefault(thread_id, (user_id, _now()))[0]

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
                        (thread_id, user_id, _now()))
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


# -- run locks ---------------------------------------------------------------------------

class ThreadLocks(Protocol):
    """One run at a time per thread, across every process that shares the storage."""

    def hold(self, thread_id: str, *,
             wait: bool = False) -> contextlib.AbstractContextManager[None]:
        """Hold the thread's lock for the block; `ThreadBusyError` if busy and not `wait`."""


class FileThreadLocks:
    """`flock` on `{directory}/{thread}.lock`: released by the kernel when the holder dies.

    Each `hold` opens its own file description, so two runs in one process
    exclude each other as two processes do.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, thread_id: str) -> Path:
        return self.directory / f"{validate_id('thread id', thread_id)}.lock"

    @contextlib.contextmanager
    def hold(self, thread_id: str, *, wait: bool = False) -> Iterator[None]:
        path = self.path_for(thread_id)
        ensure_directory(self.directory, "lock directory")
        with storage_errors(path):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not wait:
                        raise _busy(thread_id) from None
                    time.sleep(_LOCK_POLL_SECONDS)
            yield
        finally:
            os.close(fd)  # closing the description releases the lock

    def forget(self, thread_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_for(thread_id).unlink()


class ProcessThreadLocks:
    """Run locks of one process: for the in-memory saver, whose history no other
    process can see."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def hold(self, thread_id: str, *, wait: bool = False) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(thread_id, threading.Lock())
        if not lock.acquire(blocking=wait):
            raise _busy(thread_id)
        try:
            yield
        finally:
            lock.release()


# -- the storage -------------------------------------------------------------------------

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
    """The shared store (`antler.runtime.store`), opened on first use."""
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
            raise _not_yours(thread_id, user_id)

    @contextlib.contextmanager
    def run(self, thread_id: str, user_id: str, *, wait: bool = False) -> Iterator[None]:
        """Hold the thread for one run of `user_id`, claiming it when it is new.

        The owner is checked before the lock (a stranger learns nothing by
        waiting) and again after it, when the claim is made.
        """
        self.check_owner(thread_id, user_id)
        lock = self.locks.hold(thread_id, wait=wait) if self.locks else contextlib.nullcontext()
        with lock:
            if self.owners is not None:
                with self.errors():
                    owner = self.owners.claim(thread_id, user_id)
                if owner != user_id:
                    raise _not_yours(thread_id, user_id)
            yield


def _busy(thread_id: str) -> ThreadBusyError:
    return ThreadBusyError(
        f"thread {thread_id!r} is busy: another run is working on it. Wait for it to "
        "finish, or pass --wait (wait=True) to queue behind it.")


def _not_yours(thread_id: str, user_id: str) -> ThreadOwnershipError:
    return ThreadOwnershipError(
        f"thread {thread_id!r} belongs to another user, so user {user_id!r} cannot run on "
        "it or read it. Use a thread id of your own (or leave --thread out for a new one).")


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


def _sqlite_saver(path: Path) -> tuple[DualSaver, sqlite3.Connection]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver, connection = open_sqlite(path, SqliteSaver)
    return DualSaver(saver), connection


_ENV_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def resolve_backend(value: Any, what: str = "storage.checkpointer") -> Any:
    """`value` with an environment reference (`${DATABASE_URL}`) replaced by the variable."""
    if not isinstance(value, str):
        return value
    match = _ENV_REFERENCE.match(value.strip())
    if match is None:
        return value
    name = match.group(1)
    resolved = os.environ.get(name, "").strip()
    if not resolved:
        raise StorageError(
            f"{what} is {value}, but the environment variable {name} is not set (or is "
            f"empty). Export it (for example `export {name}=postgresql://user@host/db`) or "
            f"set {what} to 'sqlite'.", value)
    return resolved


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
        saver, connection = _sqlite_saver(path)
        try:
            with storage_errors(path):
                owners = SqliteOwners(saver.sync.cursor)  # type: ignore[attr-defined]
        except BaseException:
            connection.close()
            raise
        return Storage(saver, owners, locks, path, connection)
    return Storage(kind, MemoryOwners(), locks)


# -- looking after threads (`antler threads`) ------------------------------------------------

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
            with self.storage.locks.hold(thread) if self.storage.locks else (
                    contextlib.nullcontext()), self.storage.errors():
                removed += self.tables.prune(thread, keep)
        with self.storage.errors():
            self.tables.compact()
        after = self.tables.file_size()
        return removed, None if before is None or after is None else max(0, before - after)

    def delete(self, thread_id: str, user_id: str | None = None) -> None:
        """Delete the thread's checkpoints, owner record and files."""
        info = self.info(thread_id, user_id)
        with self.storage.locks.hold(thread_id) if self.storage.locks else (
                contextlib.nullcontext()):
            with self.storage.errors():
                self.storage.saver.delete_thread(thread_id)
                self.owners.forget(thread_id)
            if info.owner is not None:
                import shutil

                directory = self.base_dir / "users" / info.owner / "threads" / thread_id
                if directory.exists():
                    with storage_errors(directory):
                        shutil.rmtree(directory)
        if isinstance(self.storage.locks, FileThreadLocks):
            self.storage.locks.forget(thread_id)


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
