"""The line in front of every run lock: a process serves a thread's runs in arrival order.

A run lock says which run may work on a thread, across processes (`locks`,
`postgres`). Inside one process the runs that want a thread line up first,
each with a ticket (`ThreadTurns`), and only the run at the head of the line
tries the lock itself (`QueuedThreadLocks`). When the holder gives the thread
back, the next ticket gets the turn at once and its run is woken: a sync run
through its `threading.Event`, an async one through its own event loop
(`call_soon_threadsafe` on a future). So no run waits out a poll interval
behind a holder of its own process, and none that came later overtakes one
that came earlier, whether each waits in a thread or on a loop. A holder in
another process (a file lock, a Postgres advisory lock) cannot wake anyone
here: the head of the line alone polls it, every `LOCK_POLL_SECONDS`.

An async run waits for its turn on its loop and tries the lock in a worker
thread without waiting, so runs queued behind a busy thread occupy no
executor thread and the holder always finds one to give the thread back. A
run that leaves the line (cancelled, interrupted) gives its turn on if it was
handed it meanwhile, and a try it no longer waits for gives back what it
took. A thread's line is dropped when its last run leaves, so a long-lived
process keeps nothing for a thread no run is on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from .base import LOCK_POLL_SECONDS, thread_busy

__all__ = ["QueuedThreadLocks", "ThreadTurns", "Ticket"]


class Ticket:
    """One run's place in a thread's line, and how to wake its run when its turn comes."""

    __slots__ = ("thread_id", "wake")

    def __init__(self, thread_id: str, wake: Callable[[], object]) -> None:
        self.thread_id = thread_id
        self.wake = wake
        """Tells the run its turn came; raises `RuntimeError` when its loop is closed."""


def _settle(turn: asyncio.Future[None]) -> None:
    if not turn.done():  # a cancelled waiter gives the turn on itself
        turn.set_result(None)


class ThreadTurns:
    """Each thread's line of runs in this process; the head of a line has the turn.

    A line lives while a run holds or waits for the thread, under one guard
    shared by every thread and event loop of the process.
    """

    def __init__(self) -> None:
        self._lines: dict[str, deque[Ticket]] = {}
        self._guard = threading.Lock()

    def _join(self, ticket: Ticket, wait: bool) -> bool:
        """Put `ticket` in its line: True when it has the turn at once. Without `wait`,
        a thread another run holds or waits for is refused (`ThreadBusyError`)."""
        with self._guard:
            line = self._lines.get(ticket.thread_id)
            if line is None:
                self._lines[ticket.thread_id] = deque((ticket,))
                return True
            if not wait:
                raise thread_busy(ticket.thread_id)
            line.append(ticket)
            return False

    def take(self, thread_id: str, wait: bool) -> Ticket:
        """Wait in this thread for the turn on `thread_id` (see `_join`)."""
        woken = threading.Event()
        ticket = Ticket(thread_id, woken.set)
        if not self._join(ticket, wait):
            try:
                woken.wait()
            except BaseException:
                self.leave(ticket)
                raise
        return ticket

    async def atake(self, thread_id: str, wait: bool) -> Ticket:
        """Wait on the running loop for the turn on `thread_id` (see `_join`)."""
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        ticket = Ticket(thread_id, functools.partial(loop.call_soon_threadsafe, _settle, turn))
        if not self._join(ticket, wait):
            try:
                await turn
            except BaseException:  # cancelled, even as the turn came: give it on
                self.leave(ticket)
                raise
        return ticket

    def leave(self, ticket: Ticket) -> None:
        """Take `ticket` out of its line; if it had the turn, hand the turn to the next."""
        with self._guard:
            line = self._lines.get(ticket.thread_id)
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
            del self._lines[ticket.thread_id]

    def threads(self) -> list[str]:
        """The threads a run of this process holds or waits for (the lines kept)."""
        with self._guard:
            return sorted(self._lines)

    def queued(self, thread_id: str) -> int:
        """How many runs of this process wait behind the one with the turn on `thread_id`."""
        with self._guard:
            line = self._lines.get(thread_id)
            return len(line) - 1 if line else 0


class QueuedThreadLocks:
    """A run lock with this process's line in front of it.

    A backend says how to try its lock once without waiting (`_try`: what it
    took, or None while another process holds it) and how to give it back
    (`_release`); `hold` and `ahold` put each run in the line first, so only
    the run with the turn tries.
    """

    def __init__(self) -> None:
        self._turns = ThreadTurns()

    def _check(self, thread_id: str) -> None:
        """Refuse a thread id the backend cannot lock, before the run queues."""

    def _try(self, thread_id: str) -> Any:
        raise NotImplementedError

    def _release(self, thread_id: str, held: Any) -> None:
        raise NotImplementedError

    def threads(self) -> list[str]:
        """The threads a run of this process holds or waits for."""
        return self._turns.threads()

    def queued(self, thread_id: str) -> int:
        """How many runs of this process wait behind the one with the turn on `thread_id`."""
        return self._turns.queued(thread_id)

    @contextlib.contextmanager
    def hold(self, thread_id: str, *, wait: bool = False) -> Iterator[None]:
        """Hold the thread for the block, waiting in this thread with `wait`; else a busy
        thread raises `ThreadBusyError` at once."""
        self._check(thread_id)
        ticket = self._turns.take(thread_id, wait)
        try:
            while (held := self._try(thread_id)) is None:
                if not wait:
                    raise thread_busy(thread_id)
                time.sleep(LOCK_POLL_SECONDS)  # a holder in another process
            try:
                yield
            finally:
                self._release(thread_id, held)
        finally:
            self._turns.leave(ticket)

    @contextlib.asynccontextmanager
    async def ahold(self, thread_id: str, *, wait: bool = False) -> AsyncIterator[None]:
        """`hold` for an event loop: the run waits on the loop, the lock is tried and given
        back in a worker thread."""
        self._check(thread_id)
        ticket = await self._turns.atake(thread_id, wait)
        held = await self._atake(thread_id, wait, ticket)
        try:
            yield
        finally:
            await self._agive_back(thread_id, held, ticket)

    async def _atake(self, thread_id: str, wait: bool, ticket: Ticket) -> Any:
        """The backend lock for the run with the turn; on any failure the run leaves the
        line (a cancelled run once the try it left has given back what it took)."""
        loop = asyncio.get_running_loop()
        while True:
            trying = loop.run_in_executor(None, self._try, thread_id)
            try:
                held = await asyncio.shield(trying)
                if held is not None:
                    return held
                if not wait:
                    raise thread_busy(thread_id)
                await asyncio.sleep(LOCK_POLL_SECONDS)  # a holder in another process
            except asyncio.CancelledError:
                trying.add_done_callback(self._give_back_late(thread_id, ticket))
                raise
            except BaseException:
                self._turns.leave(ticket)
                raise

    def _give_back_late(self, thread_id: str,
                        ticket: Ticket) -> Callable[[asyncio.Future[Any]], None]:
        """A done callback for a try whose run left: what it took goes back, then the turn."""
        def give_back(trying: asyncio.Future[Any]) -> None:
            try:
                if not trying.cancelled() and trying.exception() is None \
                        and trying.result() is not None:
                    self._release(thread_id, trying.result())
            finally:
                self._turns.leave(ticket)
        return give_back

    async def _agive_back(self, thread_id: str, held: Any, ticket: Ticket) -> None:
        """Give the lock back in a worker thread, then the turn (even if the run is
        cancelled meanwhile: the next run then finds the lock free)."""
        releasing = asyncio.get_running_loop().run_in_executor(
            None, self._release, thread_id, held)
        releasing.add_done_callback(lambda _: self._turns.leave(ticket))
        await asyncio.shield(releasing)
