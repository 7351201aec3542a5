"""Applying one queued update: extract facts with a model, merge them into the store."""

from __future__ import annotations

import os
from typing import Any

from .extract import FactExtractor
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


def create_memory_queue(model: Any, base: str | os.PathLike[str], *,
                        debounce_seconds: float = 30.0,
                        max_facts: int = DEFAULT_MAX_FACTS) -> MemoryUpdateQueue:
    """The embedded memory service: a debounced queue feeding a file store under `base`."""
    updater = MemoryUpdater(MemoryStore(base, max_facts=max_facts), FactExtractor(model))
    return MemoryUpdateQueue(updater, debounce_seconds=debounce_seconds)
