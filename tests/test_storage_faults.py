"""Storage faults against the real component (issue 31): processes setting up the shared
store together, a full file system, a PostgreSQL restart between and during runs, a
crash right after a tool result was shown, a model provider that cannot be reached.

PostgreSQL is the server of $ANTLER_TEST_POSTGRES_URL (`.ci/postgres up`), restarted
with its own `pg_ctl`; without one those tests skip here and fail under CI=true (see
conftest.py). The timeouts only stop a hung test; they assert nothing about speed.
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

import pytest

from antler.plugins._lib.memory import MemoryStore
from antler.runtime.storage import StorageError, open_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="real processes and file systems of Linux")
HANG_GUARD = 120


# -- the shared SQLite store: first use by many processes at once -------------------------------

def _first_use(base: str, worker: int, barrier: object) -> None:
    """Meet the others, then open the fresh store and write one fact."""
    barrier.wait(HANG_GUARD)  # type: ignore[attr-defined]
    store = open_store("sqlite", Path(base))
    try:
        MemoryStore(store, max_facts=1000).add_facts("u", [f"fact of worker {worker}"])
    finally:
        store.close()


def test_twenty_processes_setting_up_a_fresh_store_at_once_keep_every_fact(tmp_path):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(20)
    workers = [context.Process(target=_first_use, args=(str(tmp_path), w, barrier))
               for w in range(20)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(HANG_GUARD)
    assert [worker.exitcode for worker in workers] == [0] * 20
    store = open_store("sqlite", tmp_path)
    try:
        facts = {fact.content for fact in MemoryStore(store).facts("u")}
    finally:
        store.close()
    assert facts == {f"fact of worker {w}" for w in range(20)}


def test_a_damaged_shared_store_is_called_the_shared_store(tmp_path):
    (tmp_path / "store.sqlite").write_bytes(b"not a database at all" * 100)
    store = open_store("sqlite", tmp_path)
    with pytest.raises(StorageError) as caught:
        MemoryStore(store).add_facts("u", ["a fact"])
    message = str(caught.value)
    assert message.startswith(f"the shared store {tmp_path / 'store.sqlite'} is damaged")
    assert "checkpoint" not in message
