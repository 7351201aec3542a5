"""Checkpoints, owners, run locks and the store in PostgreSQL (`storage.checkpointer: URL`).

Needs the `postgres` extra (`pip install 'antler[postgres]'`):
`langgraph-checkpoint-postgres` with psycopg and its pool. Each process keeps
one connection pool (`storage.pool: {min, max}`) shared by the sync saver, the
owner records, the run locks and the store; an async run opens an async pool
on its event loop (see `antler.runtime.storage.savers`).

* The schema is migrated on first use (the savers' and the store's `setup()`),
  under an advisory lock so two processes starting together do not race.
* Owner records live in table `antler_threads`, as in SQLite.
* The run lock (`locks.PostgresThreadLocks`) is a session advisory lock on a
  connection of this pool held for the run (`advisory_key`): Postgres releases
  it when that connection ends, so a crashed process never leaves a thread
  locked. A run whose lock ended under it (the server restarted) is stopped
  before its next checkpoint write.
* A connection failure is one `StorageError` naming host, port, database and
  user, never the password.
* Each connection is checked as it leaves the pool (an empty query): one that
  died while idle, as every connection does when the server restarts, is
  replaced by a fresh one, so a restart between runs goes unnoticed.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

from antler.errors import AntlerError

from .base import (
    StorageError,
    created_at_now,
)
from .savers import AsyncSide

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "POSTGRES_SCHEMES",
    "PostgresOwners",
    "PostgresPool",
    "advisory_key",
    "database_key",
    "describe_url",
    "is_postgres_url",
    "postgres_error",
    "without_secrets",
]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT_SECONDS = 10
_SETUP_LOCK = "antler:setup"
_EXTRA_HINT = "install the Postgres extra: pip install 'antler[postgres]'"


def is_postgres_url(value: Any) -> bool:
    """Whether a `storage.*` setting names a PostgreSQL database."""
    return isinstance(value, str) and value.startswith(POSTGRES_SCHEMES)


def _parts(url: str) -> dict[str, Any]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return dict(conninfo_to_dict(url))
    except Exception:
        return {}


def describe_url(url: str) -> str:
    """'host H port P, database D, user U': the URL without its password."""
    parts = _parts(url)
    host = parts.get("host") or "localhost"
    port = parts.get("port") or 5432
    database = parts.get("dbname") or parts.get("user") or "(default)"
    user = parts.get("user")
    return (f"PostgreSQL at host {host} port {port}, database {database}"
            + (f", user {user}" if user else ""))


def database_key(url: str) -> tuple[str, str, str]:
    """(host, port, database) of `url`: the URLs of one database, whatever user, password
    or options they add, share it (the scope of its advisory locks); a URL that does not
    parse is its own key."""
    parts = _parts(url)
    if not parts:
        return (url, "", "")
    return (str(parts.get("host") or ""), str(parts.get("port") or ""),
            str(parts.get("dbname") or parts.get("user") or ""))


def without_secrets(text: str, url: str) -> str:
    """`text` with `url` described and its password masked, for messages."""
    password = _parts(url).get("password")
    text = text.replace(url, describe_url(url))
    if password:
        text = text.replace(str(password), "***")
    return " ".join(text.split())


def postgres_error(error: BaseException, url: str) -> StorageError | None:
    """The `StorageError` for a psycopg error met on `url`, or None if it is not one."""
    module = type(error).__module__ or ""
    if not (module.startswith("psycopg") or module.startswith("psycopg_pool")):
        return None
    where = describe_url(url)
    reason = without_secrets(str(error) or type(error).__name__, url).rstrip(" .?")
    import psycopg

    if isinstance(error, psycopg.OperationalError) or module.startswith("psycopg_pool"):
        return StorageError(
            f"cannot connect to {where}: {reason}. Check that the server is running and "
            "reachable, that the database exists and that the user may log in (the URL of "
            "`storage.checkpointer`, or the variable it names)", where)
    return StorageError(f"the checkpoint database ({where}) failed: {reason}", where)


def _connection_kwargs() -> dict[str, Any]:
    from psycopg.rows import dict_row

    # What LangGraph's savers and store expect of their connections.
    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


def _require_driver() -> None:
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise AntlerError(f"a Postgres checkpointer needs {exc.name}: {_EXTRA_HINT}") from None


class PostgresPool:
    """One process's connection pool to the database of `url`, sized by `storage.pool`."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.url = url
        self.min_size = min_size
        self.max_size = max_size
        self.where = describe_url(url)
        self.pool: Any = None

    def open(self) -> PostgresPool:
        """Connect (a failure names the server, not the password) and open the pool."""
        _require_driver()
        import psycopg
        from psycopg_pool import ConnectionPool

        with self.errors():
            # One plain connection first: the pool would retry and time out with a
            # generic message, where the first failure says what is wrong.
            psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_SECONDS).close()
            self.pool = ConnectionPool(self.url, min_size=self.min_size,
                                       max_size=self.max_size, kwargs=_connection_kwargs(),
                                       check=ConnectionPool.check_connection,
                                       open=False, name="antler")
            self.pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
        return self

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def errors(self) -> contextlib.AbstractContextManager[None]:
        return _translated(self.url)

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self.pool.connection()

    @contextlib.contextmanager
    def setup_lock(self) -> Iterator[None]:
        """Hold the database-wide migration lock: one process migrates at a time."""
        with self.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (advisory_key(_SETUP_LOCK),))
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (advisory_key(_SETUP_LOCK),))

    def sync_saver(self) -> Any:
        """LangGraph's `PostgresSaver` on this pool, its tables migrated."""
        from langgraph.checkpoint.postgres import PostgresSaver

        saver = PostgresSaver(self.pool)
        with self.errors(), self.setup_lock():
            saver.setup()
        return saver

    async def open_async_side(self, serde: Any) -> Any:
        """An `AsyncPostgresSaver` on an async pool of the running loop."""
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg_pool import AsyncConnectionPool

        with self.errors():
            pool: Any = AsyncConnectionPool(self.url, min_size=self.min_size,
                                            max_size=self.max_size,
                                            kwargs=_connection_kwargs(),
                                            check=AsyncConnectionPool.check_connection,
                                            open=False, name="antler-async")
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
        return AsyncSide(AsyncPostgresSaver(pool, serde=serde), pool.close)

    def store(self) -> Any:
        """LangGraph's `PostgresStore` on this pool, its tables migrated."""
        from langgraph.store.postgres import PostgresStore

        store = PostgresStore(self.pool)
        with self.errors(), self.setup_lock():
            store.setup()
        return store


@contextlib.contextmanager
def _translated(url: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        translated = postgres_error(exc, url)
        if translated is None:
            raise
        raise translated from None


def advisory_key(name: str) -> int:
    """A signed 64-bit advisory lock key for `name` (stable across processes)."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresOwners:
    """Owner records in table `antler_threads` of the Postgres database."""

    def __init__(self, pool: PostgresPool) -> None:
        self._pool = pool
        with pool.errors(), pool.setup_lock(), pool.connection() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS antler_threads ("
                         "thread_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, "
                         "created_at TEXT NOT NULL)")

    def _one(self, query: str, params: tuple[Any, ...]) -> Any:
        with self._pool.errors(), self._pool.connection() as conn:
            return conn.execute(query, params).fetchone()

    def owner(self, thread_id: str) -> str | None:
        row = self._one("SELECT user_id FROM antler_threads WHERE thread_id = %s", (thread_id,))
        return row["user_id"] if row else None

    def claim(self, thread_id: str, user_id: str) -> str:
        row = self._one(
            "WITH inserted AS (INSERT INTO antler_threads VALUES (%s, %s, %s) "
            "ON CONFLICT (thread_id) DO NOTHING RETURNING user_id) "
            "SELECT user_id FROM inserted UNION ALL "
            "SELECT user_id FROM antler_threads WHERE thread_id = %s LIMIT 1",
            (thread_id, user_id, created_at_now(), thread_id))
        return str(row["user_id"])

    def forget(self, thread_id: str) -> None:
        with self._pool.errors(), self._pool.connection() as conn:
            conn.execute("DELETE FROM antler_threads WHERE thread_id = %s", (thread_id,))

    def all(self) -> dict[str, tuple[str, str]]:
        with self._pool.errors(), self._pool.connection() as conn:
            rows = conn.execute("SELECT thread_id, user_id, created_at FROM antler_threads")
            return {row["thread_id"]: (row["user_id"], row["created_at"]) for row in rows}
