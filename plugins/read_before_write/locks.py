"""Per-key locks that serialize a gate check with the tool call it guards.

A key's lock lives while a caller holds or waits for it, so the table does not
grow with every path ever written. The same lock serves threads (the sync tool
node runs parallel calls in a thread pool) and coroutines: the async form polls
a non-blocking acquire instead of blocking the event loop, which would deadlock
two calls of one turn running as tasks on the same loop, and a cancelled waiter
never leaves the lock taken.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Hashable, Iterator
from contextlib import asynccontextmanager, contextmanager

__all__ = ["KeyedLocks"]

_POLL_START = 0.001
_POLL_MAX = 0.02


class _Entry:
    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


class KeyedLocks:
    """One mutual-exclusion lock per hashable key, usable from threads and coroutines."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._entries: weakref.WeakValueDictionary[Hashable, _Entry] = (
            weakref.WeakValueDictionary())

    def _entry(self, key: Hashable) -> _Entry:
        with self._guard:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
            return entry

    @contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        """Hold ``key``'s lock (blocking this thread while another holder has it)."""
        entry = self._entry(key)
        with entry.lock:
            yield

    @asynccontextmanager
    async def ahold(self, key: Hashable) -> AsyncIterator[None]:
        """Hold ``key``'s lock without blocking the event loop while waiting."""
        entry = self._entry(key)
        delay = _POLL_START
        while not entry.lock.acquire(blocking=False):
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
        try:
            yield
        finally:
            entry.lock.release()

    def __len__(self) -> int:
        return len(self._entries)
