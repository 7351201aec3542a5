"""Idle times: functions called when their deadline comes, all from one thread.

The bwrap provider (re)sets an idle time for a thread's namespace at the end of
every run, and for a source of spare namespaces at every spare it makes. A
`threading.Timer` each would start a thread every time (about 70 us of CPU with
its cancellation, several times per run); here one thread waits for the nearest
deadline, and ends when none is left.

A function is called in that thread, so it must not wait long: the functions
here end a namespace (`Namespace.close`, which waits at most its grace time).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["Deadline", "call_later"]


class Deadline:
    """One function to call at a time; `cancel` before then and it is not called."""

    __slots__ = ("args", "cancelled", "function", "when")

    def __init__(self, when: float, function: Callable[..., object], args: tuple[Any, ...]
                 ) -> None:
        self.when = when
        self.function = function
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Deadlines:
    """The pending deadlines and the thread that waits for them."""

    def __init__(self) -> None:
        self._ready = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def call_later(self, seconds: float, function: Callable[..., object], *args: Any
                   ) -> Deadline:
        deadline = Deadline(time.monotonic() + seconds, function, args)
        with self._ready:
            heapq.heappush(self._heap, (deadline.when, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="antler-sandbox-idle",
                                                daemon=True)
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._ready.notify()  # nearer than the one waited for
        return deadline

    def _serve(self) -> None:
        while True:
            with self._ready:
                while self._heap and self._heap[0][2].cancelled:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._thread = None
                    return
                when, _, deadline = self._heap[0]
                left = when - time.monotonic()
                if left > 0:
                    self._ready.wait(left)
                    continue
                heapq.heappop(self._heap)
            if not deadline.cancelled:
                try:
                    deadline.function(*deadline.args)
                except Exception:
                    logger.exception("sandbox: an idle-time function failed")


_deadlines = _Deadlines()


def call_later(seconds: float, function: Callable[..., object], *args: Any) -> Deadline:
    """Call ``function(*args)`` in `seconds` (from the idle-time thread), unless cancelled."""
    return _deadlines.call_later(seconds, function, *args)
