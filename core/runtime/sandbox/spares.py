"""Spare bubblewrap namespaces, started before the thread that will use them is known.

A namespace's start (bubblewrap, then the init's Python) costs tens of plain
command starts; a thread's first command would wait for it. So the bwrap
provider keeps one spare per base directory and skill set, started in the
background: a spare holds everything but the thread's own directories, which
its init mounts when a thread adopts it (`Namespace.adopt`), in about the time
of one command. Taking a spare starts the next one.

A spare nobody takes ends after the provider's idle time; all end with the
provider.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable

from .namespace import Namespace
from .provider import SandboxError

logger = logging.getLogger(__name__)

__all__ = ["SparePool"]

# How long a thread waits for a spare that is still starting, at most (then starts its own).
_WAIT_SECONDS = 30.0


class _Slot:
    """One spare: being started until `done` is set; then `namespace` (None if it failed)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.namespace: Namespace | None = None
        self.starter: threading.Timer | None = None
        self.timer: threading.Timer | None = None


class SparePool:
    """At most one spare namespace per key, started in the background.

    Args:
        start: starts a spare namespace for a key (blocking; raises `SandboxError` or
            `OSError` when it cannot).
        idle_seconds: how long a spare waits to be taken before it ends.
    """

    def __init__(self, start: Callable[[Hashable], Namespace], idle_seconds: float) -> None:
        self._start = start
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._slots: dict[Hashable, _Slot] = {}
        self._closed = False

    def fill(self, key: Hashable, delay: float = 0.0) -> None:
        """Start a spare for `key` in the background after `delay` seconds, unless one is
        there or starting."""
        with self._lock:
            if self._closed or key in self._slots:
                return
            slot = self._slots[key] = _Slot()
            starter = slot.starter = threading.Timer(delay, self._fill, (key, slot))
        starter.name, starter.daemon = "antler-bwrap-spare", True
        starter.start()

    def ready(self, key: Hashable) -> bool:
        """Whether a spare for `key` has started and waits to be taken."""
        with self._lock:
            slot = self._slots.get(key)
            return slot is not None and slot.namespace is not None

    def take(self, key: Hashable) -> Namespace | None:
        """The spare for `key` (waiting for one that is starting), or None; the caller
        starts the next one (`fill`) once it is done with this one."""
        with self._lock:
            slot = self._slots.pop(key, None)
        if slot is None:
            return None
        slot.done.wait(_WAIT_SECONDS)
        with self._lock:
            namespace, slot.namespace = slot.namespace, None
            if slot.timer is not None:
                slot.timer.cancel()
        return namespace if namespace is not None and namespace.alive else None

    def close(self) -> None:
        """End every spare: one still to start never starts; one starting is waited for."""
        with self._lock:
            self._closed = True
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            if slot.starter is not None:
                slot.starter.cancel()
                slot.starter.join(_WAIT_SECONDS)
            self._end(slot)

    def _fill(self, key: Hashable, slot: _Slot) -> None:
        with self._lock:
            if self._closed or self._slots.get(key) is not slot:
                slot.done.set()  # taken before it started: the taker starts its own
                return
        try:
            namespace: Namespace | None = self._start(key)
        except (SandboxError, OSError) as error:
            logger.debug("sandbox: a spare namespace could not start: %s", error)
            namespace = None
        with self._lock:
            slot.namespace = namespace
            wanted = self._slots.get(key) is slot
            if namespace is None and wanted:
                del self._slots[key]  # the next `fill` tries again
            elif wanted:
                slot.timer = threading.Timer(self._idle_seconds, self._expire, (key, slot))
                slot.timer.daemon = True
                slot.timer.start()
            closed = self._closed
        slot.done.set()
        if closed:
            self._end(slot)

    def _expire(self, key: Hashable, slot: _Slot) -> None:
        with self._lock:
            if self._slots.get(key) is not slot:
                return
            del self._slots[key]
        self._end(slot)

    def _end(self, slot: _Slot) -> None:
        with self._lock:
            namespace, slot.namespace = slot.namespace, None
            if slot.timer is not None:
                slot.timer.cancel()
        if namespace is not None:
            namespace.close()
