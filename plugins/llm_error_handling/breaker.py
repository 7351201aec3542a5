"""The circuit breaker per model and the process-wide cap on model calls in flight."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

__all__ = ["CircuitBreaker", "ConcurrencyLimiter", "process_limiter"]

logger = logging.getLogger(__name__)


class CircuitBreaker:
    """Closed, open or half-open, for one model.

    Closed: calls pass; `failure_threshold` consecutive counted failures open
    it. Open: calls are refused until `recovery_timeout` seconds passed; then
    it is half-open and lets exactly one trial call through (`allow` hands out
    that one permit). The trial's success closes it, a counted failure opens it
    again, and an outcome that says nothing about the model's health (a
    non-retried error, an interrupt) gives the permit back (`release`) so the
    next call can try, instead of leaving the breaker waiting for a trial that
    never reports.
    """

    def __init__(self, failure_threshold: int, recovery_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failure_threshold = failure_threshold
        self.recovery_timeout = recovery_timeout
        self.clock = clock
        self.state = "closed"
        self.failures = 0
        self._opened_at = 0.0
        self._probing = False
        self._lock = threading.Lock()

    # A closed breaker with nothing counted (the usual case) is read without the lock:
    # a check or reset that finds nothing to change is ordered before any concurrent write.

    def allow(self) -> bool:
        """Whether a call may go ahead now (in half-open state: whether it is the trial)."""
        if self.state == "closed":
            return True
        with self._lock:
            if self.state == "open" and self.clock() - self._opened_at >= self.recovery_timeout:
                self.state, self._probing = "half_open", False
            if self.state == "closed":
                return True
            if self.state == "half_open" and not self._probing:
                self._probing = True
                return True
            return False

    def retry_in(self) -> float:
        """Seconds until the open circuit lets a trial call through."""
        with self._lock:
            if self.state != "open":
                return 0.0
            return max(self.recovery_timeout - (self.clock() - self._opened_at), 0.0)

    def success(self) -> None:
        if self.state == "closed" and not self.failures and not self._probing:
            return
        with self._lock:
            self.state, self.failures, self._probing = "closed", 0, False

    def failure(self) -> None:
        """A counted failure (transient or busy): may open the circuit."""
        with self._lock:
            self.failures += 1
            if self.state == "half_open" or self.failures >= self.failure_threshold:
                if self.state != "open":
                    logger.warning("model circuit opened after %d consecutive failures",
                                   self.failures)
                self.state, self._opened_at, self._probing = "open", self.clock(), False

    def release(self) -> None:
        """An outcome that does not count: give a half-open trial permit back."""
        with self._lock:
            self._probing = False


class ConcurrencyLimiter:
    """At most `limit` model calls in flight, shared by threads and event loops alike.

    A threading semaphore works across event loops; the async form polls it
    without blocking the loop, so a task cancelled while waiting never holds a
    permit.
    """

    POLL_SECONDS = 0.005

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._semaphore = threading.BoundedSemaphore(limit)

    @contextmanager
    def hold(self) -> Iterator[None]:
        self._semaphore.acquire()
        try:
            yield
        finally:
            self._semaphore.release()

    @asynccontextmanager
    async def ahold(self) -> AsyncIterator[None]:
        while not self._semaphore.acquire(blocking=False):
            await asyncio.sleep(self.POLL_SECONDS)
        try:
            yield
        finally:
            self._semaphore.release()


_PROCESS_LIMITER: ConcurrencyLimiter | None = None
_PROCESS_LOCK = threading.Lock()


def process_limiter(limit: int) -> ConcurrencyLimiter | None:
    """The process-wide limiter, created by the first caller asking for a cap (`limit` > 0).

    The cap is fixed from then on: a later, different value is logged and the
    first one kept, so two agents cannot disagree on how many calls the process
    makes. `limit` 0 means this caller takes no part.
    """
    global _PROCESS_LIMITER
    if limit <= 0:
        return None
    with _PROCESS_LOCK:
        if _PROCESS_LIMITER is None:
            _PROCESS_LIMITER = ConcurrencyLimiter(limit)
        elif _PROCESS_LIMITER.limit != limit:
            logger.warning("llm_error_handling.max_concurrent_calls=%d ignored: this process "
                           "already caps model calls at %d", limit, _PROCESS_LIMITER.limit)
        return _PROCESS_LIMITER
