"""The memory queue without a thread: pending updates as store items (`StoreMemoryQueue`).

Under LangGraph Server a process keeps no thread of its own between runs, and
the run that submitted an update may be served by another replica than the
next. So each submission is written to the shared store (namespace
`("antler", "memory_pending")`, one item per user and thread, replacing the
previous one: that is the debounce), with the time it falls due. Every run's
`after_agent` then processes the updates that are due, whoever submitted
them, and `flush()` processes them all. An update is claimed by deleting its
item after checking it is still the one read, so a newer submission made
meanwhile is never lost; two replicas that still meet on one update extract
the same facts, which the memory store's keys make harmless.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from antler.plugin_api import PENDING_NAMESPACE

from .queue import MemoryUpdate, Processor, QueueClosedError, apply_update
from .store import search_all

__all__ = ["PENDING_NAMESPACE", "StoreMemoryQueue"]



def _record(update: MemoryUpdate, due: float) -> dict[str, Any]:
    from langchain_core.messages import messages_to_dict

    return {"thread_id": update.thread_id, "user_id": update.user_id,
            "messages": messages_to_dict(list(update.messages)),
            "agent_name": update.agent_name, "title": update.title,
            "submitted_at": update.submitted_at, "due": due}


def _update(value: dict[str, Any]) -> MemoryUpdate:
    from langchain_core.messages import messages_from_dict

    return MemoryUpdate(thread_id=value["thread_id"], user_id=value["user_id"],
                        messages=tuple(messages_from_dict(value.get("messages") or [])),
                        agent_name=value.get("agent_name"), title=value.get("title"),
                        submitted_at=value.get("submitted_at") or 0.0)


class StoreMemoryQueue:
    """Debounces memory updates in the store; due ones are processed on the next submission.

    The same `add`/`flush`/`close` interface as `MemoryUpdateQueue`, plus
    `aadd` for async hooks (the store calls and the processor run off the loop).
    """

    def __init__(self, processor: Processor, store: Any, *, debounce_seconds: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        if debounce_seconds < 0:
            raise ValueError(f"debounce_seconds must be >= 0, got {debounce_seconds!r}")
        self.processor = processor
        self.store = store
        self.debounce_seconds = float(debounce_seconds)
        self._clock = clock
        self._closed = False
        self.submitted = 0
        self.processed = 0
        self.failed = 0

    @staticmethod
    def _key(update: MemoryUpdate) -> str:
        return f"{update.user_id}/{update.thread_id}"

    def add(self, *, thread_id: str, user_id: str, messages: Sequence[Any],
            agent_name: str | None = None, title: str | None = None) -> MemoryUpdate:
        """Record the update (replacing the thread's pending one), then process what is due."""
        if self._closed:
            raise QueueClosedError(
                "the memory queue is closed; build a new agent to queue more updates")
        update = MemoryUpdate(thread_id=thread_id, user_id=user_id, messages=tuple(messages),
                              agent_name=agent_name, title=title)
        self.store.put(PENDING_NAMESPACE, self._key(update),
                       _record(update, self._clock() + self.debounce_seconds), index=False)
        self.submitted += 1
        self.process_due()
        return update

    async def aadd(self, **kwargs: Any) -> MemoryUpdate:
        """`add` off the event loop: store writes and extraction calls block."""
        return await asyncio.to_thread(lambda: self.add(**kwargs))

    @property
    def pending(self) -> list[MemoryUpdate]:
        """The waiting updates, soonest due first."""
        return [_update(item.value) for item in self._items()]

    def __len__(self) -> int:
        return len(self._items())

    def _items(self) -> list[Any]:
        return sorted(search_all(self.store, PENDING_NAMESPACE),
                      key=lambda item: item.value.get("due", 0.0))

    def process_due(self) -> int:
        """Process the updates whose debounce has passed; return how many were processed."""
        now = self._clock()
        return self._process([item for item in self._items()
                              if item.value.get("due", 0.0) <= now])

    def flush(self) -> int:
        """Process every pending update now, due or not."""
        return self._process(self._items())

    def close(self, *, flush: bool = True, timeout: float = 5.0) -> None:
        """Refuse later submissions; process what is pending unless `flush=False` (then
        it stays in the store for another process)."""
        self._closed = True
        if flush:
            self.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def _claim(self, item: Any) -> bool:
        current = self.store.get(PENDING_NAMESPACE, item.key)
        if current is None or current.value != item.value:
            return False  # processed elsewhere, or replaced by a newer submission
        self.store.delete(PENDING_NAMESPACE, item.key)
        return True

    def _process(self, items: list[Any]) -> int:
        return sum(apply_update(self, _update(item.value)) for item in items
                   if self._claim(item))
