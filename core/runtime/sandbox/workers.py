"""Background work of the sandbox, run by threads that wait for the next job when done.

The bwrap provider does some work off the run's thread, twice per new thread: the
thread's namespace adopted while the model is called (`BwrapSandbox.prepare`), and
the spare namespace made ahead for the next thread (`SparePool`). A
`threading.Thread` each costs about 70 us of CPU (its start and its end); handing
a job to a thread that waits for one costs about a tenth of that. A job goes to a
waiting thread when there is one, else to a new one (a job may wait for another, so
none waits behind one that is running); a thread that gets no job for
`KEEP_SECONDS` ends.

A job must not raise: what it raises anyway is logged.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["KEEP_SECONDS", "submit"]

KEEP_SECONDS = 60.0
"""How long a thread with nothing to do waits for the next job."""


class _Workers:
    """The threads and the jobs handed to those that wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]]] = \
            queue.SimpleQueue()
        self._waiting = 0
        """Threads waiting for a job, less the jobs queued for them."""

    def submit(self, function: Callable[..., object], *args: Any) -> None:
        with self._lock:
            if self._waiting:
                self._waiting -= 1
                self._jobs.put((function, args))
                return
        threading.Thread(target=self._work, args=(function, args),
                         name="antler-sandbox-worker", daemon=True).start()

    def _work(self, function: Callable[..., object], args: tuple[Any, ...]) -> None:
        while True:
            try:
                function(*args)
            except Exception:
                logger.exception("sandbox: a background job failed")
            with self._lock:
                self._waiting += 1
            try:
                function, args = self._jobs.get(timeout=KEEP_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._waiting > 0:  # no job is queued for this thread: end
                        self._waiting -= 1
                        return
                # A job was queued for it as it gave up waiting: it is in the queue.
                function, args = self._jobs.get()


_workers = _Workers()


def submit(function: Callable[..., object], *args: Any) -> None:
    """Call ``function(*args)`` in a background thread, soon."""
    _workers.submit(function, *args)
