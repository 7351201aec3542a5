"""Spare bubblewrap namespaces, made before the thread that will use them is known.

A namespace's start (bubblewrap, then the init's Python) costs tens of plain
command starts, CPU a thread's first command would pay for. So the bwrap
provider keeps one *source* per base directory and skill set: a namespace
started once, whose init runs no command but forks spare namespaces on request
(`Namespace.spawn`: a fork of a small interpreter and a few namespaces and
mounts, a fraction of a start). A spare holds everything but the thread's own
directories, which its init mounts when the thread adopts it
(`Namespace.adopt`). Sources are started when a run starts (the provider's
`warm`), when a thread's sandbox is acquired, at the end of a run, and by the
first `take` that finds none. Each source makes one spare ahead, for the next
thread to take (once it runs, and at each `fill`: a run's start and end, a
sandbox's acquisition): a spare's namespaces and ``pids`` cgroup cost little
CPU but milliseconds of waiting on the kernel (a network namespace, a cgroup
move).

A source ends after the provider's idle time without a spare taken from it,
but not while a namespace it made is alive (theirs are nested in its own, and
end with it); all end with the provider.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from typing import Protocol

from antler.plugin_api.sandbox import SandboxError

from . import workers
from .deadlines import Deadline, call_later
from .namespace import Namespace

logger = logging.getLogger(__name__)

__all__ = ["SparePool", "SpareStarter"]

# How long a thread waits for a source that is still starting, at most.
_WAIT_SECONDS = 30.0


class _Next:
    """A spare being made ahead, for the next thread: made once `done` is set, `namespace`
    None if it failed."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.namespace: Namespace | None = None


class _Slot:
    """One source: being set up until `done` is set; then `namespace` (None if it failed)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.namespace: Namespace | None = None
        self.setup: threading.Thread | None = None
        self.timer: Deadline | None = None
        self.spawned: set[Namespace] = set()
        """The spares it made that have not been closed (they end with it)."""
        self.error = "it is still starting"
        self.retired = False
        """Replaced: it ends once no spare of it is alive."""
        self.next: _Next | None = None
        """The spare made ahead for the next `take`."""


class SpareStarter(Protocol):
    """Starts a key's source in two halves (see `Namespace.launch`), and spares from it."""

    def launch(self, key: Hashable) -> Namespace:
        """Start bubblewrap for a source of `key` (raises `SandboxError` or `OSError`)."""

    def finish(self, namespace: Namespace) -> None:
        """Wait until the launched source runs (raises `SandboxError` or `OSError`)."""

    def spawn(self, source: Namespace) -> Namespace:
        """A spare made by `source`, held to its limits (raises `SandboxError` or
        `OSError`)."""


class SparePool:
    """At most one source of spare namespaces per key.

    Args:
        starter: starts the sources and their spares.
        idle_seconds: how long a source waits for the next `take` before it ends.
    """

    def __init__(self, starter: SpareStarter, idle_seconds: float) -> None:
        self._starter = starter
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._slots: dict[Hashable, _Slot] = {}
        self._closed = False

    def fill(self, key: Hashable) -> None:
        """Start a source for `key`, unless one is there or starting: bubblewrap is started
        now, in the caller's thread (a few milliseconds; see `Namespace.launch` for why
        here), and its setup is waited for in the background; once it runs, it makes a
        spare ahead (in the background), unless it has one."""
        with self._lock:
            if self._closed:
                return
            if key in self._slots:
                self._make_next(self._slots[key])
                return
            slot = self._slots[key] = _Slot()
        try:
            namespace = self._starter.launch(key)
        except (SandboxError, OSError) as error:
            logger.debug("sandbox: a source of spare namespaces could not start: %s", error)
            slot.error = str(error)
            with self._lock:
                if self._slots.get(key) is slot:
                    del self._slots[key]
            slot.done.set()
            return
        slot.setup = threading.Thread(target=self._finish, args=(key, slot, namespace),
                                      name="antler-bwrap-spare", daemon=True)
        slot.setup.start()

    def has(self, key: Hashable) -> bool:
        """Whether a source for `key` has started or is starting."""
        with self._lock:
            return key in self._slots

    def ready(self, key: Hashable) -> bool:
        """Whether the source for `key` has started and is not making a spare (the next
        `take` gets the one it made ahead, or makes one)."""
        with self._lock:
            slot = self._slots.get(key)
            return slot is not None and slot.namespace is not None and (
                slot.next is None or slot.next.done.is_set())

    def settle(self, timeout: float = _WAIT_SECONDS) -> None:
        """Wait (at most `timeout` seconds each) until no source is starting and no spare
        is being made in the background (for measurements: the work a run started is
        done)."""
        with self._lock:
            slots = list(self._slots.values())
        for slot in slots:
            slot.done.wait(timeout)
            with self._lock:
                upcoming = slot.next
            if upcoming is not None:
                upcoming.done.wait(timeout)

    def take(self, key: Hashable) -> Namespace:
        """A new spare namespace for `key`, from its source (started now when there is
        none; waited for when it is starting).

        Raises:
            SandboxError: no source could start, or it could not make a spare.
        """
        with self._lock:
            slot = self._slots.get(key)
        if slot is None:
            self.fill(key)
            with self._lock:
                slot = self._slots.get(key)
        if slot is None:
            raise SandboxError("no source of spare namespaces: the pool is closed, or one "
                               "could not start")
        slot.done.wait(_WAIT_SECONDS)
        with self._lock:
            source = slot.namespace
            gone = source is None or not source.alive
            if gone and self._slots.get(key) is slot:
                del self._slots[key]  # the next `take` starts another
            elif not gone:
                self._restart_timer(key, slot)
        if source is None or gone:
            self._end(slot)  # what is left of it: the spare made ahead, the source's process
            why = slot.error if source is None else "it ended"
            raise SandboxError(f"no source of spare namespaces ({why})")
        spare = self._made_ahead(slot)
        if spare is None:
            try:
                spare = self._starter.spawn(source)
            except OSError as error:
                raise SandboxError(f"the source could not make a spare namespace ({error})") \
                    from None
        with self._lock:
            slot.spawned.add(spare)  # the next is made at the next `fill`, not now: this
            # thread's first command is about to run
        spare.on_close(lambda: self._forget(slot, spare))
        return spare

    def _made_ahead(self, slot: _Slot) -> Namespace | None:
        """The spare made ahead for this `take` (waited for while it is being made), if it
        was made and still lives."""
        with self._lock:
            upcoming = slot.next
        if upcoming is None:
            return None
        upcoming.done.wait(_WAIT_SECONDS)
        with self._lock:
            if slot.next is not upcoming:
                return None  # another take got it
            slot.next = None
            spare, upcoming.namespace = upcoming.namespace, None
        if spare is not None and not spare.alive:
            spare.close(grace=0.0)
            return None
        return spare

    def _make_next(self, slot: _Slot) -> None:
        """Start making a spare ahead, in the background (its namespaces' and cgroup's
        setup takes milliseconds of waiting on the kernel); called with the lock held."""
        if slot.next is not None or slot.retired or self._closed or slot.namespace is None:
            return
        upcoming = slot.next = _Next()
        workers.submit(self._make, slot, upcoming)

    def _make(self, slot: _Slot, upcoming: _Next) -> None:
        source = slot.namespace
        spare: Namespace | None = None
        if source is not None:
            try:
                spare = self._starter.spawn(source)
            except (SandboxError, OSError) as error:
                logger.debug("sandbox: a spare namespace could not be made ahead: %s", error)
        with self._lock:
            keep = slot.next is upcoming and slot.namespace is source and not slot.retired
            upcoming.namespace = spare if keep else None
        upcoming.done.set()
        if spare is not None and not keep:
            spare.close(grace=0.0)

    def discard(self, key: Hashable) -> None:
        """Replace the source for `key` (its view went stale): the next `take` starts
        another; this one ends once no spare it made is alive."""
        with self._lock:
            slot = self._slots.pop(key, None)
            if slot is None:
                return
            if slot.timer is not None:
                slot.timer.cancel()
            slot.retired = True
        if slot.setup is not None:
            slot.setup.join(_WAIT_SECONDS)
        with self._lock:
            busy = any(spare.alive for spare in slot.spawned)
        if not busy:
            self._end(slot)

    def close(self) -> None:
        """End every source, waiting for those being set up."""
        with self._lock:
            self._closed = True
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            if slot.setup is not None:
                slot.setup.join(_WAIT_SECONDS)
            self._end(slot)

    def _forget(self, slot: _Slot, spare: Namespace) -> None:
        with self._lock:
            slot.spawned.discard(spare)
            done = slot.retired and not any(other.alive for other in slot.spawned)
        if done:
            self._end(slot)

    def _finish(self, key: Hashable, slot: _Slot, launched: Namespace) -> None:
        try:
            self._starter.finish(launched)
            namespace: Namespace | None = launched
        except (SandboxError, OSError) as error:
            logger.debug("sandbox: a source of spare namespaces could not start: %s", error)
            slot.error = str(error)
            namespace = None
        with self._lock:
            slot.namespace = namespace
            wanted = self._slots.get(key) is slot
            if namespace is None and wanted:
                del self._slots[key]  # the next `fill` tries again
            elif wanted:
                self._restart_timer(key, slot)
                self._make_next(slot)
            closed = self._closed
        slot.done.set()
        if closed:
            self._end(slot)

    def _restart_timer(self, key: Hashable, slot: _Slot) -> None:
        """(Re)start the source's idle time; called with the lock held."""
        if slot.timer is not None:
            slot.timer.cancel()
        slot.timer = call_later(self._idle_seconds, self._expire, key, slot)

    def _expire(self, key: Hashable, slot: _Slot) -> None:
        with self._lock:
            if self._slots.get(key) is not slot:
                return
            if any(spare.alive for spare in slot.spawned):
                self._restart_timer(key, slot)  # it would take their namespaces along
                return
            del self._slots[key]
        self._end(slot)

    def _end(self, slot: _Slot) -> None:
        """End the source (the spares it made end with it: their namespaces are in its)."""
        with self._lock:
            namespace, slot.namespace = slot.namespace, None
            if slot.timer is not None:
                slot.timer.cancel()
            upcoming, slot.next = slot.next, None
            ahead = upcoming.namespace if upcoming is not None else None
            if upcoming is not None:
                upcoming.namespace = None
        if ahead is not None:
            ahead.close(grace=0.0)
        if namespace is not None:
            namespace.close()
