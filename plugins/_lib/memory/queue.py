"""The memory update queue: per-thread debounce in front of a slow processor.

Every finished run submits its thread's conversation. Extracting facts costs a
model call, so a chatty thread must not pay for one per turn: a submission
waits `debounce_seconds`, and a newer submission for the same thread replaces
the pending one and restarts its wait. Nothing is lost by replacing, because
each submission carries the thread's whole (filtered) conversation so far.

A background timer thread processes items as they fall due. `flush()`
processes everything pending right away, in the caller's thread, and waits for
a batch the timer thread may be processing, so after `flush()` returns every
submission made before it has been handled. Tests, the CLI and shutdown use
it; `close()` stops the timer thread and flushes by default.
"""

from __future__ import annotations

import functools
import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MemoryUpdate", "MemoryUpdateQueue", "QueueClosedError", "apply_update"]

logger = logging.getLogger(__name__)


class QueueClosedError(RuntimeError):
    """A submission arrived after the queue was closed."""


@dataclass(frozen=True)
class MemoryUpdate:
    """One thread's conversation, waiting to be turned into memory."""

    thread_id: str
    user_id: str
    messages: tuple[Any, ...]
    agent_name: str | None = None
    title: str | None = None
    submitted_at: float = field(default_factory=time.time)

    @property
    def key(self) -> tuple[str, str]:
        """The debounce key. The user is part of it: thread ids are only unique per user."""
        return (self.user_id, self.thread_id)


Processor = Callable[[MemoryUpdate], Any]


def apply_update(queue: Any, update: MemoryUpdate) -> bool:
    """Run `queue.processor` on `update`, counting it in `queue.processed` or
    `queue.failed`; a failure is logged, never raised. True when it was processed."""
    try:
        queue.processor(update)
    except Exception as exc:
        queue.failed += 1
        # One line by default: a provider outage must not flood the CLI with
        # tracebacks. The traceback is there at DEBUG level.
        logger.warning("memory update of thread %r (user %r) failed: %s: %s",
                       update.thread_id, update.user_id, type(exc).__name__, exc,
                       exc_info=logger.isEnabledFor(logging.DEBUG))
        return False
    queue.processed += 1
    return True


class MemoryUpdateQueue:
    """Debounces memory updates per thread and hands due ones to `processor`.

    `processor` runs in the timer thread or in the thread calling `flush()`,
    one update at a time. An exception from it is logged and counted in
    `failed`; it never stops the queue.
    """

    def __init__(self, processor: Processor, *, debounce_seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if debounce_seconds < 0:
            raise ValueError(f"debounce_seconds must be >= 0, got {debounce_seconds!r}")
        self.processor = processor
        self.debounce_seconds = float(debounce_seconds)
        self._clock = clock
        self._pending: dict[tuple[str, str], tuple[float, MemoryUpdate]] = {}
        self._cond = threading.Condition()
        # Held while a batch is processed, so `flush()` can wait for the timer thread.
        self._processing = threading.Lock()
        self._worker: threading.Thread | None = None
        self._closed = False
        self.submitted = 0
        self.replaced = 0
        self.processed = 0
        self.failed = 0

    # -- submitting --------------------------------------------------------------------

    def submit(self, update: MemoryUpdate) -> bool:
        """Queue `update`; return True when it replaced a pending one of the same thread."""
        with self._cond:
            if self._closed:
                raise QueueClosedError(
                    "the memory queue is closed; build a new agent to queue more updates"
                )
            replaced = self._pending.pop(update.key, None) is not None
            self._pending[update.key] = (self._clock() + self.debounce_seconds, update)
            self.submitted += 1
            self.replaced += replaced
            self._ensure_worker()
            self._cond.notify_all()
        return replaced

    def add(self, *, thread_id: str, user_id: str, messages: Sequence[Any],
            agent_name: str | None = None, title: str | None = None) -> MemoryUpdate:
        """Build a `MemoryUpdate` from its parts and `submit` it; return the update."""
        update = MemoryUpdate(thread_id=thread_id, user_id=user_id, messages=tuple(messages),
                              agent_name=agent_name, title=title)
        self.submit(update)
        return update

    @property
    def pending(self) -> list[MemoryUpdate]:
        """A snapshot of the waiting updates, soonest due first."""
        with self._cond:
            return [update for _due, update in sorted(self._pending.values(),
                                                       key=lambda item: item[0])]

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)

    # -- processing --------------------------------------------------------------------

    def flush(self) -> int:
        """Process every pending update now, due or not; return how many were processed."""
        with self._processing:
            with self._cond:
                batch = self._take(lambda _due: True)
            return self._process(batch)

    def close(self, *, flush: bool = True, timeout: float = 5.0) -> None:
        """Stop the timer thread; process what is still pending unless `flush=False`.

        Idempotent. Later submissions raise `QueueClosedError`.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)
        if flush:
            self.flush()
        else:
            with self._cond:
                dropped = len(self._pending)
                self._pending.clear()
            if dropped:
                logger.warning("memory queue closed without flushing; %d update(s) dropped",
                               dropped)

    @property
    def closed(self) -> bool:
        return self._closed

    def _ensure_worker(self) -> None:
        # Called with the condition held. Started on first use: an agent that never
        # finishes a run never pays for a thread.
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="antler-memory-queue",
                                            daemon=True)
            self._worker.start()

    def _take(self, is_due: Callable[[float], bool]) -> list[MemoryUpdate]:
        # Called with the condition held.
        taken = sorted((item for item in self._pending.values() if is_due(item[0])),
                       key=lambda item: item[0])
        for _due, update in taken:
            del self._pending[update.key]
        return [update for _due, update in taken]

    def _process(self, batch: list[MemoryUpdate]) -> int:
        return sum(apply_update(self, update) for update in batch)

    def _run(self) -> None:
        """Timer thread: sleep until the soonest update is due, then process the due ones."""
        while True:
            with self._cond:
                while not self._closed:
                    if not self._pending:
                        self._cond.wait()
                        continue
                    delay = min(due for due, _ in self._pending.values()) - self._clock()
                    if delay <= 0:
                        break
                    self._cond.wait(delay)
                if self._closed:
                    return
            with self._processing:
                with self._cond:
                    batch = self._take(functools.partial(operator.ge, self._clock()))
                self._process(batch)
