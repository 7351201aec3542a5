"""Run locks: one run at a time holds a thread, and a process serves its runs in turn.

Two runs interleaving their checkpoints on one thread lose a turn or leave a
tool call unanswered, so one run at a time holds a thread, across every
process that shares the storage. Each backend's lock is tried without waiting:
`FileThreadLocks` is an advisory file lock (`{base}/locks/{thread}.lock`),
which the kernel releases when its process dies, even by `kill -9`;
`PostgresThreadLocks` a session advisory lock, which Postgres releases when
the holding connection ends; `ProcessThreadLocks` serves the in-memory saver,
whose history no other process sees.

In front of each lock the runs of one process that want a thread line up,
each with a ticket (`ThreadTurns`), and only the run at the head of the line
tries the lock itself (`QueuedThreadLocks`). When the holder gives the thread
back, the next ticket gets the turn at once and its run is woken: a sync run
through its `threading.Event`, an async one through its own event loop
(`call_soon_threadsafe` on a future). So no run waits out a poll interval
behind a holder of its own process, and none that came later overtakes one
that came earlier, whether each waits in a thread or on a loop. A holder in
another process cannot wake anyone here: the head of the line alone polls it,
every `LOCK_POLL_SECONDS`.

An async run waits for its turn on its loop and tries the lock in a worker
thread without waiting, so runs queued behind a busy thread occupy no
executor thread and the holder always finds one to give the thread back. A
run that leaves the line (cancelled, interrupted) gives its turn on if it was
handed it meanwhile, and a try it no longer waits for gives back what it
took. A thread's line is dropped when its last run leaves, so a long-lived
process keeps nothing for a thread no run is on. The lock services of one
process on one lock (`FileThreadLocks` on one lock directory,
`PostgresThreadLocks` on one database) share their lines, so two agents on one
home or one database take turns as the runs of one agent do; what the run at
the head of a line holds is kept with its ticket, so each of those services
sees it (`ThreadTurns.holding`).

Deleting a thread removes its lock file under the lock, and a file lock once
taken is checked to be the file still at its path (`FileThreadLocks`): a run
that opened the file before it was removed never holds the thread beside a
run that locked the new file.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

from antler.plugin_api.paths import validate_id

from .base import LOCK_POLL_SECONDS, RunLockLostError, thread_busy
from .failures import ensure_directory, storage_errors
from .postgres import PostgresPool, advisory_key, database_key, without_secrets

__all__ = [
    "LOCKS_DIRNAME",
    "FileThreadLocks",
    "PostgresThreadLocks",
    "ProcessThreadLocks",
    "QueuedThreadLocks",
    "ThreadTurns",
]

LOCKS_DIRNAME = "locks"


Line = tuple[Hashable, str]
"""A line's key: the lock it queues for (`QueuedThreadLocks.scope`) and the thread id."""


class _Ticket:
    """One run's place in a thread's line, how to wake its run when its turn comes, and
    the lock it took once it has the turn."""

    __slots__ = ("held", "line", "wake")

    def __init__(self, line: Line, wake: Callable[[], object]) -> None:
        self.line = line
        self.wake = wake
        """Tells the run its turn came; raises `RuntimeError` when its loop is closed."""
        self.held: Any = None
        """What the backend's try took for the run (None until it holds the lock)."""


def _settle(turn: asyncio.Future[None]) -> None:
    if not turn.done():  # a cancelled waiter gives the turn on itself
        turn.set_result(None)


class ThreadTurns:
    """Each thread's line of runs in this process; the head of a line has the turn.

    A line is keyed by the lock it queues for and the thread (`Line`), and lives
    while a run holds or waits for the thread, under one guard shared by every
    thread and event loop of the process.
    """

    def __init__(self) -> None:
        self._lines: dict[Line, deque[_Ticket]] = {}
        self._guard = threading.Lock()

    def _join(self, ticket: _Ticket, wait: bool) -> bool:
        """Put `ticket` in its line: True when it has the turn at once. Without `wait`,
        a thread another run holds or waits for is refused (`ThreadBusyError`)."""
        with self._guard:
            line = self._lines.get(ticket.line)
            if line is None:
                self._lines[ticket.line] = deque((ticket,))
                return True
            if not wait:
                raise thread_busy(ticket.line[1])
            line.append(ticket)
            return False

    def take(self, line: Line, wait: bool) -> _Ticket:
        """Wait in this thread for the turn in `line` (see `_join`)."""
        woken = threading.Event()
        ticket = _Ticket(line, woken.set)
        if not self._join(ticket, wait):
            try:
                woken.wait()
            except BaseException:
                self.leave(ticket)
                raise
        return ticket

    async def atake(self, line: Line, wait: bool) -> _Ticket:
        """Wait on the running loop for the turn in `line` (see `_join`)."""
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        ticket = _Ticket(line, functools.partial(loop.call_soon_threadsafe, _settle, turn))
        if not self._join(ticket, wait):
            try:
                await turn
            except BaseException:  # cancelled, even as the turn came: give it on
                self.leave(ticket)
                raise
        return ticket

    def leave(self, ticket: _Ticket) -> None:
        """Take `ticket` out of its line; if it had the turn, hand the turn to the next."""
        with self._guard:
            line = self._lines.get(ticket.line)
            if line is None:
                return
            if line[0] is not ticket:
                with contextlib.suppress(ValueError):
                    line.remove(ticket)
                return
            line.popleft()
            while line:
                try:
                    line[0].wake()
                    return
                except RuntimeError:  # its loop is closed: nobody is left to run
                    line.popleft()
            del self._lines[ticket.line]

    def threads(self, scope: Hashable) -> list[str]:
        """The threads a run of this process holds or waits for on the lock `scope`
        (the lines kept)."""
        with self._guard:
            return sorted(thread_id for kept, thread_id in self._lines if kept == scope)

    def in_line(self, line: Line) -> int:
        """How many runs of this process hold or wait for their turn in `line`."""
        with self._guard:
            return len(self._lines.get(line, ()))

    def holding(self, line: Line) -> Any:
        """What the run at the head of `line` holds the lock with; None while no run of
        this process holds it."""
        with self._guard:
            tickets = self._lines.get(line)
            return tickets[0].held if tickets else None


class QueuedThreadLocks:
    """A run lock with this process's line in front of it.

    A backend says how to try its lock once without waiting (`_try`: what it
    took, or None while another process holds it) and how to give it back
    (`_release`); `hold` and `ahold` put each run in the line first, so only
    the run with the turn tries. The lines are those of `turns` for `scope`:
    by default a line of its own per lock service; services that share a lock
    share its lines (`FileThreadLocks` on one directory, `PostgresThreadLocks` on one
    database), and so what the run with the turn holds (`holding`).
    """

    def __init__(self, turns: ThreadTurns | None = None,
                 scope: Hashable | None = None) -> None:
        self._turns = ThreadTurns() if turns is None else turns
        self.scope: Hashable = object() if scope is None else scope
        """What the lines of `_turns` are kept for: the lock itself."""

    def _check(self, thread_id: str) -> None:
        """Refuse a thread id the backend cannot lock, before the run queues."""

    def _try(self, thread_id: str) -> Any:
        raise NotImplementedError

    def _release(self, thread_id: str, held: Any) -> None:
        raise NotImplementedError

    def threads(self) -> list[str]:
        """The threads a run of this process holds or waits for."""
        return self._turns.threads(self.scope)

    def in_line(self, thread_id: str) -> int:
        """How many runs of this process hold or wait for `thread_id` (the one with the
        turn, which holds the lock or tries it, and those behind it)."""
        return self._turns.in_line((self.scope, thread_id))

    def holding(self, thread_id: str) -> Any:
        """What a run of this process holds `thread_id` with, through any service on this
        lock; None when none holds it."""
        return self._turns.holding((self.scope, thread_id))

    @contextlib.contextmanager
    def hold(self, thread_id: str, *, wait: bool = False) -> Iterator[None]:
        """Hold the thread for the block, waiting in this thread with `wait`; else a busy
        thread raises `ThreadBusyError` at once."""
        self._check(thread_id)
        ticket = self._turns.take((self.scope, thread_id), wait)
        try:
            while (held := self._try(thread_id)) is None:
                if not wait:
                    raise thread_busy(thread_id)
                time.sleep(LOCK_POLL_SECONDS)  # a holder in another process
            ticket.held = held
            try:
                yield
            finally:
                ticket.held = None
                self._release(thread_id, held)
        finally:
            self._turns.leave(ticket)

    @contextlib.asynccontextmanager
    async def ahold(self, thread_id: str, *, wait: bool = False) -> AsyncIterator[None]:
        """`hold` for an event loop: the run waits on the loop, the lock is tried and given
        back in a worker thread."""
        self._check(thread_id)
        ticket = await self._turns.atake((self.scope, thread_id), wait)
        held = ticket.held = await self._atake(thread_id, wait, ticket)
        try:
            yield
        finally:
            ticket.held = None
            await self._agive_back(thread_id, held, ticket)

    async def _atake(self, thread_id: str, wait: bool, ticket: _Ticket) -> Any:
        """The backend lock for the run with the turn; on any failure the run leaves the
        line (a cancelled run once the try it left has given back what it took)."""
        loop = asyncio.get_running_loop()
        trying: asyncio.Future[Any] | None = None
        while True:
            try:
                trying = loop.run_in_executor(None, self._try, thread_id)
                held = await asyncio.shield(trying)
                if held is not None:
                    return held
                if not wait:
                    raise thread_busy(thread_id)
                await asyncio.sleep(LOCK_POLL_SECONDS)  # a holder in another process
            except asyncio.CancelledError:
                assert trying is not None  # a cancellation comes at an await, after a try
                trying.add_done_callback(self._give_back_late(thread_id, ticket))
                raise
            except BaseException:
                self._turns.leave(ticket)
                raise

    def _give_back_late(self, thread_id: str,
                        ticket: _Ticket) -> Callable[[asyncio.Future[Any]], None]:
        """A done callback for a try whose run left: what it took goes back, then the turn."""
        def give_back(trying: asyncio.Future[Any]) -> None:
            try:
                if not trying.cancelled() and trying.exception() is None \
                        and trying.result() is not None:
                    self._release(thread_id, trying.result())
            finally:
                self._turns.leave(ticket)
        return give_back

    async def _agive_back(self, thread_id: str, held: Any, ticket: _Ticket) -> None:
        """Give the lock back in a worker thread, then the turn (even if the run is
        cancelled meanwhile: the next run then finds the lock free)."""
        releasing = asyncio.get_running_loop().run_in_executor(
            None, self._release, thread_id, held)
        releasing.add_done_callback(lambda _: self._turns.leave(ticket))
        await asyncio.shield(releasing)


_SHARED_TURNS = ThreadTurns()
"""The lines of every `FileThreadLocks` and `PostgresThreadLocks` of this process, kept per
lock directory and per database."""


class FileThreadLocks(QueuedThreadLocks):
    """`flock` on `{directory}/{thread}.lock`: released by the kernel when the holder dies.

    Each try opens its own file description, so a run of this process and one
    of another exclude each other. Every `FileThreadLocks` of the process on one
    directory (two agents on one home) lines its runs up in the same lines,
    kept per resolved directory, so their runs too are handed the thread in turn
    rather than polling each other.

    Deleting a thread removes its lock file (`forget`), which a run of another
    process may have opened already: once it locks that file, the file is no
    longer the thread's lock, and a run that came later locks a new file at the
    path. So `forget` unlinks only while a run of this process holds the thread,
    through any `FileThreadLocks` on the directory (the deleter may hold it through
    an agent's storage and remove the file through its own), and a try that got its
    lock checks that the file it locked is still the one at the path; if it is not,
    it opens the path again.
    """

    def __init__(self, directory: Path) -> None:
        super().__init__(_SHARED_TURNS, os.path.realpath(directory))
        self.directory = directory

    def path_for(self, thread_id: str) -> Path:
        return self.directory / f"{validate_id('thread id', thread_id)}.lock"

    def _check(self, thread_id: str) -> None:
        self.path_for(thread_id)

    def _try(self, thread_id: str) -> int | None:
        path = self.path_for(thread_id)
        ensure_directory(self.directory, "lock directory")
        while True:
            with storage_errors(path):
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                with storage_errors(path):
                    live = _is_at(fd, path)
            except BlockingIOError:
                os.close(fd)
                return None
            except BaseException:
                os.close(fd)
                raise
            if live:
                return fd
            os.close(fd)  # the thread was deleted since the open: lock the file now there

    def _release(self, thread_id: str, held: int) -> None:
        os.close(held)  # closing the description releases the lock

    def forget(self, thread_id: str) -> None:
        """Remove the thread's lock file (its thread was deleted), inside `hold` of this
        or another `FileThreadLocks` on the directory: only while this process holds the
        thread, or a run could lock the removed file while another locks a new one."""
        path = self.path_for(thread_id)
        if self.holding(thread_id) is None:
            raise RuntimeError(
                f"the lock file of thread {thread_id!r} in {self.directory} can only be "
                "removed while this process holds the thread: call forget inside `hold` "
                "(of any lock service on this directory)")
        with storage_errors(path), contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is the file at `path`, and not one unlinked since."""
    opened = os.fstat(fd)
    if opened.st_nlink == 0:
        return False
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    return (opened.st_dev, opened.st_ino) == (there.st_dev, there.st_ino)


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

    async def _atake(self, thread_id: str, wait: bool, ticket: _Ticket) -> bool:
        return True  # nothing to try in a worker thread

    async def _agive_back(self, thread_id: str, held: Any, ticket: _Ticket) -> None:
        self._turns.leave(ticket)


class PostgresThreadLocks(QueuedThreadLocks):
    """Run locks as session advisory locks, one pooled connection held per run.

    Every process sharing the database excludes every other, and Postgres
    drops the lock when the holder's connection ends (a crash, `kill -9`).
    It drops it too when the server restarts under a run that is still going:
    `check`, the fence of every checkpoint write (`DualSaver`), finds the
    holding connection gone and stops that run before it writes, since another
    run may hold the thread by then. The runs of this process line up first
    (`ThreadTurns`): only the one with the turn asks the database. Every
    `PostgresThreadLocks` of the process on one database (two agents, or an agent and
    `antler threads`, on one URL) shares those lines, kept per server and database,
    so their runs are handed the thread in turn, none polls the database behind a
    run of its own process, and `check` sees the connection whichever of them holds.
    """

    def __init__(self, pool: PostgresPool) -> None:
        super().__init__(_SHARED_TURNS, ("postgres", database_key(pool.url)))
        self._pool = pool

    def _try(self, thread_id: str) -> tuple[Any, int, contextlib.ExitStack] | None:
        key = advisory_key(f"antler:thread:{thread_id}")
        leased = contextlib.ExitStack()
        try:
            with self._pool.errors():
                conn = leased.enter_context(self._pool.connection())
                took = conn.execute("SELECT pg_try_advisory_lock(%s) AS held",
                                    (key,)).fetchone()["held"]
        except BaseException:
            leased.close()
            raise
        if not took:
            leased.close()  # the connection goes back to the pool between tries
            return None
        return conn, key, leased

    def _release(self, thread_id: str, held: tuple[Any, int, contextlib.ExitStack]) -> None:
        conn, key, leased = held
        try:
            _unlock(conn, key)
        finally:
            with self._pool.errors():
                leased.close()

    def check(self, thread_id: str) -> None:
        """Raise `RunLockLostError` when this process's run of `thread_id` no longer holds
        its lock (the session that held it ended); nothing for a thread not held here.

        A live session still holds its advisory locks, so one round trip on the
        holding connection answers it.
        """
        held = self.holding(thread_id)
        if held is None:
            return
        conn = held[0]
        import psycopg

        try:
            conn.execute("")
        except psycopg.Error as exc:
            reason = without_secrets(str(exc) or type(exc).__name__, self._pool.url)
            raise RunLockLostError(
                f"thread {thread_id!r} lost its run lock: the connection to "
                f"{self._pool.where} that held it ended ({reason.rstrip(' .')}), so another "
                "run may be working on the thread. This run stopped before saving its next "
                "step; run the thread again to resume it.") from None


def _unlock(conn: Any, key: int) -> None:
    """Release advisory lock `key` of `conn`'s session; a session that cannot answer is
    closed, which releases its locks too (a connection that ended already has)."""
    import psycopg

    try:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    except psycopg.Error:
        with contextlib.suppress(Exception):
            conn.close()
