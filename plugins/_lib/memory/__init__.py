"""Long-term memory: durable facts about a user, learned from finished conversations.

The memory plugin submits each finished run's conversation to a
`MemoryUpdateQueue` (the `memory_queue` service). After a per-thread debounce,
a `MemoryUpdater` asks a model for durable facts (`FactExtractor`) and merges
them into the user's file in a `MemoryStore`
(`{base}/users/{user_id}/memory.json`). Applications may provide their own
queue; anything with the queue's `add(...)`, `flush()` and `close()` will do.
"""

from .extract import FactExtractor, conversation_text, parse_facts
from .queue import MemoryUpdate, MemoryUpdateQueue, QueueClosedError
from .store import MEMORY_FILENAME, MemoryFact, MemoryStore, normalize_fact
from .updater import MemoryUpdater, create_memory_queue

__all__ = [
    "MEMORY_FILENAME",
    "FactExtractor",
    "MemoryFact",
    "MemoryStore",
    "MemoryUpdate",
    "MemoryUpdateQueue",
    "MemoryUpdater",
    "QueueClosedError",
    "conversation_text",
    "create_memory_queue",
    "normalize_fact",
    "parse_facts",
]
