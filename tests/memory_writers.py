"""What the processes of the multi-process memory tests run.

A spawned process imports the module of the function it runs. These functions live
here, beside nothing but the memory stores they write, so each process imports the
stores (about half a CPU-second) and not a test module's agent, LangChain and
LangGraph (two more CPU-seconds apiece).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from antler.plugins._lib.memory import MemoryFile, MemoryStore
from antler.runtime.storage import open_store

BARRIER_GUARD = 600
"""Twenty interpreters starting at once on two busy cores take minutes to all arrive."""


def memory_of(kind: str, base: str) -> tuple[Any, Any]:
    """(facts, closer) of the JSON files (`json`) or the shared SQLite store under `base`."""
    if kind == "json":
        return MemoryFile(base, max_facts=1000), None
    store = open_store("sqlite", Path(base))
    return MemoryStore(store, max_facts=1000), store.close


def write_fifty_facts(kind: str, base: str, worker: int) -> None:
    """Add fifty facts of this worker's, one at a time, to user `u`'s memory."""
    memory, close = memory_of(kind, base)
    for n in range(50):
        memory.add_facts("u", [f"fact {worker}-{n}"])
    if close is not None:
        close()


def first_use(base: str, worker: int, barrier: Any) -> None:
    """Meet the others, then open the fresh shared store and write one fact."""
    barrier.wait(BARRIER_GUARD)
    store = open_store("sqlite", Path(base))
    try:
        MemoryStore(store, max_facts=1000).add_facts("u", [f"fact of worker {worker}"])
    finally:
        store.close()
