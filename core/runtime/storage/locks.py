"""Run locks of the embedded backends (the Postgres one lives with it).

Two runs interleaving their checkpoints on one thread lose a turn or leave a
tool call unanswered, so one run at a time holds a thread. `FileThreadLocks`
is an advisory file lock (`{base}/locks/{thread}.lock`), which the kernel
releases when its process dies, even by `kill -9`; `ProcessThreadLocks`
serves the in-memory saver, whose history no other process sees.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from antler.plugin_api.paths import validate_id

from .base import LOCK_POLL_SECONDS, thread_busy
from .failures import ensure_directory, storage_errors

__all__ = ["LOCKS_DIRNAME", "FileThreadLocks", "ProcessThreadLocks"]

LOCKS_DIRNAME = "locks"


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
                        raise thread_busy(thread_id) from None
                    time.sleep(LOCK_POLL_SECONDS)
            yield
        finally:
            os.close(fd)  # closing the description releases the lock

    def forget(self, thread_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_for(thread_id).unlink()


class _ThreadLock:
    """One thread's lock in `ProcessThreadLocks`, with how many runs hold or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class ProcessThreadLocks:
    """Run locks of one process: for the in-memory saver, whose history no other
    process can see.

    A thread's entry lives while a run holds or waits for its lock, and goes
    when the last of them leaves, so a long-lived process that serves many
    threads keeps nothing for a thread no run is on (a later run makes a new
    entry). The count is kept under the table's guard rather than left to the
    collector (a weak table): an entry is dropped at one known point, by the
    run that leaves it, whichever thread or event loop that run is on.
    """

    def __init__(self) -> None:
        self._locks: dict[str, _ThreadLock] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def hold(self, thread_id: str, *, wait: bool = False) -> Iterator[None]:
        with self._guard:
            entry = self._locks.get(thread_id)
            if entry is None:
                entry = self._locks[thread_id] = _ThreadLock()
            entry.users += 1
        try:
            if not entry.lock.acquire(blocking=wait):
                raise thread_busy(thread_id)
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            with self._guard:
                entry.users -= 1
                if not entry.users:
                    del self._locks[thread_id]

    def threads(self) -> list[str]:
        """The threads whose lock a run holds or waits for (the entries kept)."""
        with self._guard:
            return sorted(self._locks)
