"""Applying one queued update: extract facts with a model, merge them into the store."""

from __future__ import annotations

from typing import Any

from .extract import FactExtractor
from .pending import StoreMemoryQueue
from .queue import MemoryUpdate, MemoryUpdateQueue
from .store import DEFAULT_MAX_FACTS, MemoryFact, MemoryStore

__all__ = ["MemoryUpdater", "create_memory_queue"]


class MemoryUpdater:
    """The queue's processor: `extractor` reads the conversation, `store` keeps the facts."""

    def __init__(self, store: MemoryStore, extractor: FactExtractor) -> None:
        self.store = store
        self.extractor = extractor

    def __call__(self, update: MemoryUpdate) -> list[MemoryFact]:
        """Store the new facts of `update` under its user; return the ones that were new."""
        known = [fact.content for fact in self.store.facts(update.user_id)]
        facts = self.extractor.extract(list(update.messages), known_facts=known,
                                       title=update.title)
        if not facts:
            return []
        return self.store.add_facts(update.user_id, facts, source_thread=update.thread_id,
                                    agent_name=update.agent_name)


def create_memory_queue(model: Any, store: Any, *, debounce_seconds: float = 30.0,
                        max_facts: int = DEFAULT_MAX_FACTS,
                        mode: str = "thread") -> MemoryUpdateQueue | StoreMemoryQueue:
    """The memory service: a debounced queue feeding the facts of `store` (a `BaseStore`).

    `mode` 'thread' debounces in this process with a timer thread; 'store'
    keeps pending updates in the store and processes due ones on the next
    submission, with no thread (for LangGraph Server and other multi-replica
    deployments).
    """
    updater = MemoryUpdater(MemoryStore(store, max_facts=max_facts), FactExtractor(model))
    if mode == "store":
        return StoreMemoryQueue(updater, store, debounce_seconds=debounce_seconds)
    return MemoryUpdateQueue(updater, debounce_seconds=debounce_seconds)
