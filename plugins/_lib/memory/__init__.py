"""Long-term memory: durable facts about a user, learned from finished conversations.

The memory plugin submits each finished run's conversation to a memory queue
(the `memory_queue` service). After a per-thread debounce, a `MemoryUpdater`
asks a model for durable facts (`FactExtractor`) and merges them into the
user's facts in a `MemoryStore`, which keeps them in the shared store (the
`store` service, LangGraph's `BaseStore`). The queue debounces with a timer
thread in the process (`MemoryUpdateQueue`) or, with no thread, in the store
itself (`StoreMemoryQueue`, for servers). Applications may provide their own
queue; anything with `add(...)`, `flush()` and `close()` will do. The JSON files
of earlier versions (`MemoryFile`) are read by `antler memory import`.
"""

from .extract import FactExtractor, conversation_text, parse_facts
from .jsonfile import MEMORY_FILENAME, MemoryFile
from .pending import StoreMemoryQueue
from .queue import MemoryUpdate, MemoryUpdateQueue, QueueClosedError
from .service import memory_store
from .store import MemoryFact, MemoryStore, normalize_fact
from .updater import MemoryUpdater, create_memory_queue

__all__ = [
    "MEMORY_FILENAME",
    "FactExtractor",
    "MemoryFact",
    "MemoryFile",
    "MemoryStore",
    "MemoryUpdate",
    "MemoryUpdateQueue",
    "MemoryUpdater",
    "QueueClosedError",
    "StoreMemoryQueue",
    "conversation_text",
    "create_memory_queue",
    "memory_store",
    "normalize_fact",
    "parse_facts",
]
