"""The in-memory backend's run locks are not kept for threads whose runs have ended.

A long-lived server runs thousands of threads in one process: a lock table that
kept an entry per thread ever run would grow without bound.
"""

from __future__ import annotations

import threading

import pytest

from antler.plugin_api.context import RuntimeOptions
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage import ProcessThreadLocks, ThreadBusyError

THREADS = 40


def test_runs_on_many_threads_leave_no_lock_behind(tmp_path):
    model = ScriptedChatModel(["done"] * (2 * THREADS))
    with create_agent(model=model, checkpointer="memory", base_dir=tmp_path,
                      runtime=RuntimeOptions(user_id="u")) as agent:
        locks = agent.storage.locks
        assert isinstance(locks, ProcessThreadLocks)
        for index in range(THREADS):
            agent.invoke("hello", thread_id=f"thread-{index}", user_id="u")
            assert len(locks) == 0
        # A second turn on an earlier thread still finds its history and runs.
        state = agent.invoke("again", thread_id="thread-0", user_id="u")
        assert [m.content for m in state["messages"] if m.type == "human"] == [
            "hello", "again"]
        assert len(locks) == 0


def test_a_held_thread_stays_locked_while_its_run_lasts():
    locks = ProcessThreadLocks()
    with locks.hold("t"):
        assert len(locks) == 1
        with pytest.raises(ThreadBusyError), locks.hold("t"):
            pass
        with locks.hold("other"):
            assert len(locks) == 2
    assert len(locks) == 0


def test_a_waiting_run_gets_the_same_lock_the_holder_releases():
    locks = ProcessThreadLocks()
    order: list[str] = []
    entered = threading.Event()

    def second() -> None:
        entered.set()
        with locks.hold("t", wait=True):
            order.append("second")

    with locks.hold("t"):
        worker = threading.Thread(target=second)
        worker.start()
        entered.wait(5)
        worker.join(0.2)
        assert worker.is_alive()  # it waits on the lock the first run holds
        order.append("first")
    worker.join(5)
    assert order == ["first", "second"]
    assert len(locks) == 0
