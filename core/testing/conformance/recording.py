"""Recording every hook of every plugin, and injecting faults into them.

When the battery builds an agent, each middleware of the chain is wrapped
(`recorded`) so every hook invocation is written into the `Recording` of the
run in progress: a node hook's update, the request a wrap hook was given and
what it handed on and returned, the CPU time of the hook itself, and whether
it changed the request in place.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from .plain import first_difference, plain
from .rules import ConformanceFault

__all__ = ["ACTIVE_SLOT", "HANDLER", "NODE_HOOKS", "Record", "Recording", "Slot", "recorded"]

NODE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")
HANDLER = "_conformance_handler"
"""The name of the function a recorded wrap hook calls as its handler: blocking
calls below it (in inner plugins, the model, a tool) are not the plugin's."""


# A hook call's record; alike in shape to the resolver's `Constraint` and the CLI's `Edge`
# only because each is a handful of named strings.
@dataclasses.dataclass
class Record:
    """One hook invocation of one plugin, normalized."""

    plugin: str
    hook: str
    is_async: bool
    data: Any
    error: str | None = None
    message: str | None = None
    """The exception's text, when the hook raised."""
    mutated: str | None = None
    """A wrap hook that changed the request it was given: what it was, and what it became."""

    def key(self) -> tuple[str, Any, str | None]:
        return self.hook, self.data, self.error


@dataclasses.dataclass
class Recording:
    """What one run records, and the faults it injects."""

    home: str
    faults: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    records: list[Record] = dataclasses.field(default_factory=list)
    blocking: list[str] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    timed: bool = False
    """Keep only each hook's CPU seconds (`cpu`), no records (the history check)."""
    cpu: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)

    def spent(self, plugin: str, hook: str, seconds: float) -> None:
        if self.timed:
            with self.lock:
                self.cpu[plugin, hook] = self.cpu.get((plugin, hook), 0.0) + seconds

    def add(self, plugin: str, hook: str, is_async: bool, data: Any,
            error: BaseException | None = None, mutated: str | None = None) -> None:
        if self.timed and error is None:
            return
        described = None
        if error is not None:
            described = type(error).__name__
            if type(error).__name__ == "BlockingError":
                self.blocking.append(f"{plugin}.{'a' if is_async else ''}{hook}: {error}")
        record = Record(plugin, hook, is_async, plain(data, self.home), described,
                        None if error is None else str(error), mutated)
        with self.lock:
            self.records.append(record)

    def snapshot(self, request: Any) -> Any:
        """`request` as comparable data, to find a hook changing it in place (not timed)."""
        return None if self.timed else plain(request, self.home)

    def changed(self, before: Any, request: Any) -> str | None:
        """What changed in `request` since `before` (None when nothing did)."""
        if before is None:
            return None
        after = plain(request, self.home)
        return None if after == before else first_difference(before, after)

    def fault(self, plugin: str, hook: str) -> None:
        if hook in self.faults.get(plugin, ()):
            raise ConformanceFault(f"injected into {plugin}.{hook} by the conformance battery")

    def of(self, plugin: str) -> list[Record]:
        return [record for record in self.records if record.plugin == plugin]


class Slot:
    """Where the recorders of one built agent write: the recording of the run in progress.

    One agent serves many runs (sync, async, with faults), one at a time.
    """

    def __init__(self) -> None:
        self.recording = Recording("")
        self.classes: dict[str, type] = {}


ACTIVE_SLOT: contextvars.ContextVar[Slot | None] = contextvars.ContextVar(
    "antler_conformance_slot", default=None)


def recorded(middleware: Any, label: str, slot: Slot) -> Any:
    from antler.runtime.tracing import hook_subclass, reclass

    cls = type(middleware)
    slot.classes[label] = cls
    sub = hook_subclass(cls, middleware.name, cls.__name__,
                        functools.partial(_record_hook, label=label, slot=slot))
    return middleware if sub is None else reclass(middleware, sub)


def _record_hook(original: Callable[..., Any], hook: str, is_async: bool, *, label: str,
                 slot: Slot) -> Callable[..., Any]:
    # Each recorder is written twice on purpose: LangChain calls a hook's sync or async
    # form, and only the sync recorders measure the hook's own CPU time (`spent`); while
    # an async hook awaits, other tasks run on its thread and their time would count.
    if hook in NODE_HOOKS:
        if is_async:
            async def anode(self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
                recording = slot.recording
                recording.fault(label, hook)
                try:
                    update = await original(self, state, *args, **kwargs)
                except BaseException as error:
                    recording.add(label, hook, True, None, error)
                    raise
                recording.add(label, hook, True, update)
                return update
            return anode

        def node(self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
            recording = slot.recording
            recording.fault(label, hook)
            started = time.thread_time()
            try:
                update = original(self, state, *args, **kwargs)
            except BaseException as error:
                recording.add(label, hook, False, None, error)
                raise
            recording.spent(label, hook, time.thread_time() - started)
            recording.add(label, hook, False, update)
            return update
        return node

    # A change to the request is the plugin's when seen before it hands anything on
    # (inner plugins get what it hands on) or, if it hands nothing on, when it returns.
    if is_async:
        async def awrap(self: Any, request: Any, handler: Callable[..., Any],
                        *args: Any, **kwargs: Any) -> Any:
            recording = slot.recording
            recording.fault(label, hook)
            passed: list[Any] = []
            before = recording.snapshot(request)
            mutated: list[str | None] = [None]

            async def _conformance_handler(inner: Any) -> Any:
                if not passed:
                    mutated[0] = recording.changed(before, request)
                passed.append(inner)
                return await handler(inner)
            try:
                result = await original(self, request, _conformance_handler, *args, **kwargs)
            except BaseException as error:
                recording.add(label, hook, True, {"in": request, "out": passed}, error,
                              mutated[0])
                raise
            if not passed:
                mutated[0] = recording.changed(before, request)
            recording.add(label, hook, True, {"in": request, "out": passed, "result": result},
                          mutated=mutated[0])
            return result
        return awrap

    def wrap(self: Any, request: Any, handler: Callable[..., Any], *args: Any,
             **kwargs: Any) -> Any:
        recording = slot.recording
        recording.fault(label, hook)
        passed: list[Any] = []
        below = [0.0]  # CPU seconds in the handler: not the hook's own work
        before = recording.snapshot(request)
        mutated: list[str | None] = [None]

        def _conformance_handler(inner: Any) -> Any:
            if not passed:
                mutated[0] = recording.changed(before, request)
            passed.append(inner)
            entered = time.thread_time()
            try:
                return handler(inner)
            finally:
                below[0] += time.thread_time() - entered
        started = time.thread_time()
        try:
            result = original(self, request, _conformance_handler, *args, **kwargs)
        except BaseException as error:
            recording.add(label, hook, False, {"in": request, "out": passed}, error, mutated[0])
            raise
        recording.spent(label, hook, time.thread_time() - started - below[0])
        if not passed:
            mutated[0] = recording.changed(before, request)
        recording.add(label, hook, False, {"in": request, "out": passed, "result": result},
                      mutated=mutated[0])
        return result
    return wrap
