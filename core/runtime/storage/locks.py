"""Run locks of the embedded backends (the Postgres one lives with it).

Two runs interleaving their checkpoints on one thread lose a turn or leave a
tool call unanswered, so one run at a time holds a thread. `FileThreadLocks`
is an advisory file lock (`{base}/locks/{thread}.lock`), which the kernel
releases when its process dies, even by `kill -9`; `ProcessThreadLocks`
serves the in-memory saver, whose history no other process sees. Both serve
the runs of their process in arrival order (`turns`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Any

from antler.plugin_api.paths import validate_id

from .failures import ensure_directory, storage_errors
from .turns import QueuedThreadLocks, Ticket

__all__ = ["LOCKS_DIRNAME", "FileThreadLocks", "ProcessThreadLocks"]

LOCKS_DIRNAME = "locks"


class FileThreadLocks(QueuedThreadLocks):
    """`flock` on `{directory}/{thread}.lock`: released by the kernel when the holder dies.

    Each try opens its own file description, so a run of this process and one
    of another (or of another `FileThreadLocks` here) exclude each other.
    """

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory

    def path_for(self, thread_id: str) -> Path:
        return self.directory / f"{validate_id('thread id', thread_id)}.lock"

    def _check(self, thread_id: str) -> None:
        self.path_for(thread_id)

    def _try(self, thread_id: str) -> int | None:
        path = self.path_for(thread_id)
        ensure_directory(self.directory, "lock directory")
        with storage_errors(path):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _release(self, thread_id: str, held: int) -> None:
        os.close(held)  # closing the description releases the lock

    def forget(self, thread_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_for(thread_id).unlink()


class ProcessThreadLocks(QueuedThreadLocks):
    """Run locks of one process: for the in-memory saver, whose history no other
    process can see, so the turn in the line is the lock itself.

    A thread's line lives while a run holds or waits for it, and goes when the
    last of them leaves, so a long-lived process that serves many threads keeps
    nothing for a thread no run is on (a later run makes a new line). It is
    dropped at one known point, by the run that leaves it, whichever thread or
    event loop that run is on, rather than left to the collector.
    """

    def _try(self, thread_id: str) -> bool:
        return True

    def _release(self, thread_id: str, held: Any) -> None:
        pass

    async def _atake(self, thread_id: str, wait: bool, ticket: Ticket) -> bool:
        return True  # nothing to try in a worker thread

    async def _agive_back(self, thread_id: str, held: Any, ticket: Ticket) -> None:
        self._turns.leave(ticket)
