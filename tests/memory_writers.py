"""What the processes of the multi-process memory tests run, and how they start.

The processes start from a fork server that imported this module once (`writers`): each
is a process of its own, opening the store itself, but none imports the stores again
(about half a CPU-second apiece). These functions live here, beside nothing but the
memory stores they write, so the server imports the stores and not a test module's
agent, LangChain and LangGraph (two more CPU-seconds).
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from antler.plugins._lib.memory import MemoryFile, MemoryStore
from antler.runtime.storage import open_store

BARRIER_GUARD = 600
"""Twenty interpreters starting at once on two busy cores take minutes to all arrive."""


def writers() -> BaseContext:
    """The multiprocessing context the tests start their writers with: forked from a
    server process that imported this module, once per test process."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


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
