"""The in-memory backend's run locks: kept only while a run holds or waits for them,
and holding all the same when no other thread is held.

A long-lived server runs thousands of threads in one process: a lock table that
kept an entry per thread ever run would grow without bound. An empty table must
still lock: a lock service once answered `len()`, so an idle one was false and
`if storage.locks` let every run through unlocked.
"""

from __future__ import annotations

import threading

import pytest

from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage import ProcessThreadLocks, ThreadBusyError

THREADS = 40
USER = "u"


def memory_agent(tmp_path, replies: int):
    return create_agent(model=ScriptedChatModel(["done"] * replies), checkpointer="memory",
                        base_dir=tmp_path, runtime=RuntimeOptions(user_id=USER),
                        services={TITLE_MODEL: ScriptedChatModel(["t"] * replies),
                                  MEMORY_MODEL: ScriptedChatModel(["[]"] * replies)})


def test_runs_on_many_threads_leave_no_lock_behind(tmp_path):
    with memory_agent(tmp_path, 2 * THREADS) as agent:
        locks = agent.storage.locks
        assert isinstance(locks, ProcessThreadLocks)
        for index in range(THREADS):
            agent.invoke("hello", thread_id=f"thread-{index}", user_id=USER)
            assert locks.threads() == []
        # A second turn on an earlier thread still finds its history and runs.
        state = agent.invoke("again", thread_id="thread-0", user_id=USER)
        assert [m.content for m in state["messages"] if m.type == "human"] == [
            "hello", "again"]
        assert locks.threads() == []


def test_a_run_is_refused_on_a_held_thread_when_no_other_thread_is_held(tmp_path):
    # The lock table holds one entry (this thread's): the refusal must not depend on
    # other threads being held too.
    with memory_agent(tmp_path, 2) as agent:
        with agent.hold("t", USER):
            assert agent.storage.locks.threads() == ["t"]
            with pytest.raises(ThreadBusyError, match="is busy"):
                agent.invoke("beside the holder", thread_id="t", user_id=USER)
        state = agent.invoke("after it", thread_id="t", user_id=USER)
        assert [m.content for m in state["messages"] if m.type == "human"] == ["after it"]
        assert agent.storage.locks.threads() == []


def test_a_held_thread_stays_locked_while_its_run_lasts():
    locks = ProcessThreadLocks()
    with locks.hold("t"):
        assert locks.threads() == ["t"]
        with pytest.raises(ThreadBusyError), locks.hold("t"):
            pass
        assert locks.threads() == ["t"]  # the refused run left the holder's entry
        with locks.hold("other"):
            assert locks.threads() == ["other", "t"]
    assert locks.threads() == []


def test_a_waiting_run_keeps_the_lock_the_holder_releases():
    locks = ProcessThreadLocks()
    order: list[str] = []
    seen: list[list[str]] = []
    entered = threading.Event()

    def second() -> None:
        entered.set()
        with locks.hold("t", wait=True):
            order.append("second")
            seen.append(locks.threads())

    with locks.hold("t"):
        worker = threading.Thread(target=second)
        worker.start()
        entered.wait(5)
        worker.join(0.2)
        assert worker.is_alive()  # it waits on the lock the first run holds
        order.append("first")
        assert locks.threads() == ["t"]
    worker.join(5)
    assert order == ["first", "second"]
    assert seen == [["t"]]
    assert locks.threads() == []
