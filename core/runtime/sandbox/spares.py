"""Spare bubblewrap namespaces, started before the thread that will use them is known.

A namespace's start (bubblewrap, then the init's Python) costs tens of plain
command starts; a thread's first command would wait for it. So the bwrap
provider keeps one spare per base directory and skill set, started in the
background: a spare holds everything but the thread's own directories, which
its init mounts when a thread adopts it (`Namespace.adopt`), in about the time
of one command. Spares are started when a run starts (the provider's `warm`),
when a thread's sandbox is acquired and has none to take, and at the end of a
run that took one.

A spare nobody takes ends after the provider's idle time; all end with the
provider.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from typing import Protocol

from antler.plugin_api.sandbox import SandboxError

from .namespace import Namespace

logger = logging.getLogger(__name__)

__all__ = ["SparePool"]

# How long a thread waits for a spare that is still starting, at most (then starts its own).
_WAIT_SECONDS = 30.0


class _Slot:
    """One spare: being set up until `done` is set; then `namespace` (None if it failed)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.namespace: Namespace | None = None
        self.setup: threading.Thread | None = None
        self.timer: threading.Timer | None = None


class SpareStarter(Protocol):
    """Starts a spare namespace for a key, in two halves (see `Namespace.launch`)."""

    def launch(self, key: Hashable) -> Namespace:
        """Start bubblewrap for a spare of `key` (raises `SandboxError` or `OSError`)."""

    def finish(self, namespace: Namespace) -> None:
        """Wait until the launched spare runs, and hold it to its limits (raises
        `SandboxError` or `OSError`; the namespace is closed then)."""


class SparePool:
    """At most one spare namespace per key.

    Args:
        starter: starts the spares.
        idle_seconds: how long a spare waits to be taken before it ends.
    """

    def __init__(self, starter: SpareStarter, idle_seconds: float) -> None:
        self._starter = starter
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._slots: dict[Hashable, _Slot] = {}
        self._closed = False

    def fill(self, key: Hashable) -> None:
        """Start a spare for `key`, unless one is there or starting: bubblewrap is started
        now, in the caller's thread (a few milliseconds; see `Namespace.launch` for why
        here), and its setup is waited for in the background."""
        with self._lock:
            if self._closed or key in self._slots:
                return
            slot = self._slots[key] = _Slot()
        try:
            namespace = self._starter.launch(key)
        except (SandboxError, OSError) as error:
            logger.debug("sandbox: a spare namespace could not start: %s", error)
            with self._lock:
                if self._slots.get(key) is slot:
                    del self._slots[key]
            slot.done.set()
            return
        slot.setup = threading.Thread(target=self._finish, args=(key, slot, namespace),
                                      name="antler-bwrap-spare", daemon=True)
        slot.setup.start()

    def ready(self, key: Hashable) -> bool:
        """Whether a spare for `key` has started and waits to be taken."""
        with self._lock:
            slot = self._slots.get(key)
            return slot is not None and slot.namespace is not None

    def take(self, key: Hashable) -> Namespace | None:
        """The spare for `key` (waiting for one being set up), or None."""
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
        """End every spare, waiting for those being set up."""
        with self._lock:
            self._closed = True
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            if slot.setup is not None:
                slot.setup.join(_WAIT_SECONDS)
            self._end(slot)

    def _finish(self, key: Hashable, slot: _Slot, launched: Namespace) -> None:
        try:
            self._starter.finish(launched)
            namespace: Namespace | None = launched
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
