"""The storage's vocabulary: its errors, the owner and lock interfaces, the backend setting.

Every other module of the package builds on this one and it imports none of
them. It names the three refusals a run can meet (`ThreadOwnershipError`,
`ThreadBusyError`, `RunLockLostError`) beside `StorageError`, the two
interfaces each backend fills (`ThreadOwners`, `ThreadLocks`), and how a
`storage.*` setting that names an environment variable is read
(`resolve_backend`).
"""

from __future__ import annotations

import contextlib
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from antler.errors import AntlerError

__all__ = [
    "CHECKPOINT_DATABASE",
    "LOCK_POLL_SECONDS",
    "SHARED_STORE",
    "RunLockLostError",
    "StorageError",
    "ThreadBusyError",
    "ThreadLocks",
    "ThreadOwners",
    "ThreadOwnershipError",
    "created_at_now",
    "not_yours",
    "resolve_backend",
    "thread_busy",
]

CHECKPOINT_DATABASE = "checkpoint database"
SHARED_STORE = "shared store"
"""What error messages call each database."""
LOCK_POLL_SECONDS = 0.05
"""How often the run next in line for a thread tries its lock again while a run of
another process holds it (a holder of the same process wakes it instead)."""


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


def thread_busy(thread_id: str) -> ThreadBusyError:
    """The refusal of a run whose thread another run holds."""
    return ThreadBusyError(
        f"thread {thread_id!r} is busy: another run is working on it. Wait for it to "
        "finish, or pass --wait (wait=True) to queue behind it.")


def not_yours(thread_id: str, user_id: str) -> ThreadOwnershipError:
    """The refusal of `user_id` on a thread another user created."""
    return ThreadOwnershipError(
        f"thread {thread_id!r} belongs to another user, so user {user_id!r} cannot run on "
        "it or read it. Use a thread id of your own (or leave --thread out for a new one).")


def created_at_now() -> str:
    """The `created_at` of an owner record made now (UTC, to the second)."""
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


class ThreadLocks(Protocol):
    """One run at a time per thread, across every process that shares the storage."""

    def hold(self, thread_id: str, *,
             wait: bool = False) -> contextlib.AbstractContextManager[None]:
        """Hold the thread's lock for the block; `ThreadBusyError` if busy and not `wait`."""

    def ahold(self, thread_id: str, *,
              wait: bool = False) -> contextlib.AbstractAsyncContextManager[None]:
        """`hold` for an event loop: a waiting run waits on the loop, never in a worker
        thread."""


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
