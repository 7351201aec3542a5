"""Runs of one process that wait for a thread take it in the order they came.

On every backend (the in-memory lock, the SQLite storage's file lock, the Postgres
advisory lock) sync runs (`Storage.run(wait=True)`, each in a thread of its own)
and async runs (`Storage.arun(wait=True)`, on one event loop) queue behind a holder
in a known order: each waiter is seen queued (`locks.queued`) before the next one
starts. When the holder lets go they must get the thread one after the other in
that order, none skipped, each woken by the run before it: no waiter sleeps a poll
interval behind a holder of its own process, counted by `LOCK_POLL_SECONDS` sleeps
and, for the file lock, by the tries of the lock itself. A cancelled waiter leaves
the line, and one cancelled at the moment it is handed the thread gives it on.

The Postgres tests use the server of $ANTLER_TEST_POSTGRES_URL (`.ci/postgres up`);
without one they skip here and fail under CI=true (see conftest.py). Their thread
ids are fresh: the database outlives the test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import functools
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage import Storage, ThreadBusyError, open_storage

USER = "u"
GUARD = 20
"""Seconds a step may take before the test counts it as hung (a guard, not a speed check)."""


@pytest.fixture(params=["memory", "sqlite",
                        pytest.param("postgres", marks=pytest.mark.postgres)])
def storage(request, tmp_path) -> Iterator[Storage]:
    """The storage of each backend: its owners and its run locks, no shared store."""
    kind = request.getfixturevalue("postgres_url") if request.param == "postgres" \
        else request.param
    opened = open_storage(kind, tmp_path, store=None)
    yield opened
    opened.close()


@pytest.fixture
def thread_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for `condition` (a synchronisation point, not a timing check)."""
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.002)


class Loop:
    """An event loop in a thread of its own, whose executor has a single worker: an
    async waiter that parked a worker thread would hang every other run on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coroutine: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def task(self, coroutine: Any) -> asyncio.Task[Any]:
        """Start `coroutine` as a task of the loop and return it."""
        async def start() -> asyncio.Task[Any]:
            return asyncio.ensure_future(coroutine)
        return self.submit(start()).result(GUARD)

    def close(self) -> None:
        self.submit(self.loop.shutdown_default_executor()).result(GUARD)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(GUARD)
        self.loop.close()


@pytest.fixture
def loop() -> Iterator[Loop]:
    running = Loop()
    yield running
    running.close()


class Waiters:
    """Runs that wait for one thread, started one by one, each seen queued before the
    next starts; `took` lists them in the order they got the thread."""

    def __init__(self, storage: Storage, thread_id: str, loop: Loop) -> None:
        self.storage, self.thread_id, self.loop = storage, thread_id, loop
        self.took: list[str] = []
        self.done: dict[str, Any] = {}

    def arrive(self, name: str, kind: str) -> None:
        before = self.storage.locks.in_line(self.thread_id)
        if kind == "sync":
            worker = threading.Thread(target=self._sync, args=(name,), daemon=True)
            worker.start()
            self.done[name] = worker
        else:
            self.done[name] = self.loop.task(self._async(name))
        until(lambda: self.storage.locks.in_line(self.thread_id) == before + 1,
              f"{name} queued behind {before}")

    def _sync(self, name: str) -> None:
        with self.storage.run(self.thread_id, USER, wait=True):
            self.took.append(name)

    async def _async(self, name: str) -> None:
        async with self.storage.arun(self.thread_id, USER, wait=True):
            self.took.append(name)

    def finish(self) -> None:
        for name, done in self.done.items():
            if isinstance(done, threading.Thread):
                done.join(GUARD)
                assert not done.is_alive(), f"{name} still waits"
            else:
                self.loop.submit(asyncio.wait_for(_outcome(done), GUARD)).result(GUARD + 1)


async def _outcome(task: asyncio.Task[Any]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await task


ARRIVALS = {
    "sync": ["sync"] * 4,
    "async": ["async"] * 8,
    "mixed": ["async", "sync", "async", "async", "sync", "sync", "async", "sync"],
}


@pytest.mark.parametrize("kinds", ARRIVALS.values(), ids=ARRIVALS.keys())
def test_waiters_take_the_thread_in_arrival_order_woken_by_the_holder(
        storage, thread_id, loop, polls, kinds):
    waiters = Waiters(storage, thread_id, loop)
    names = [f"{kind}-{index}" for index, kind in enumerate(kinds)]
    with storage.run(thread_id, USER):
        for name, kind in zip(names, kinds, strict=True):
            waiters.arrive(name, kind)
        assert storage.locks.in_line(thread_id) == 1 + len(names)
    waiters.finish()

    assert waiters.took == names  # in arrival order, none skipped, none twice
    assert polls == []  # each was woken by the run before it, none polled
    assert storage.locks.in_line(thread_id) == 0
    with storage.run(thread_id, USER):  # and the thread is free again
        pass


def test_each_file_lock_waiter_tries_the_lock_once(tmp_path, thread_id, loop, monkeypatch):
    # Queued runs do not try the file lock: the run before them hands them the
    # thread, so every run (the holder too) takes the lock at its first try.
    storage = open_storage("sqlite", tmp_path, store=None)
    tries: list[int] = []
    flock = fcntl.flock

    def counted_flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_NB:
            tries.append(fd)
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", counted_flock)
    kinds = ARRIVALS["mixed"]
    waiters = Waiters(storage, thread_id, loop)
    try:
        with storage.run(thread_id, USER):
            for index, kind in enumerate(kinds):
                waiters.arrive(f"{kind}-{index}", kind)
        waiters.finish()
    finally:
        storage.close()
    assert len(waiters.took) == len(kinds)
    assert len(tries) == 1 + len(kinds)


def test_a_run_without_wait_is_refused_at_once_while_others_wait(storage, thread_id, loop):
    waiters = Waiters(storage, thread_id, loop)
    with storage.run(thread_id, USER):
        waiters.arrive("sync-0", "sync")
        waiters.arrive("async-1", "async")
        with pytest.raises(ThreadBusyError, match="is busy"), storage.run(thread_id, USER):
            pass
        with pytest.raises(ThreadBusyError, match="is busy"):
            loop.submit(_enter_async(storage, thread_id)).result(GUARD)
        assert storage.locks.in_line(thread_id) == 3  # the refused runs did not queue
    waiters.finish()
    assert waiters.took == ["sync-0", "async-1"]


async def _enter_async(storage: Storage, thread_id: str) -> None:
    async with storage.arun(thread_id, USER):
        pass


def test_a_cancelled_waiter_leaves_the_line(storage, thread_id, loop):
    waiters = Waiters(storage, thread_id, loop)
    with storage.run(thread_id, USER):
        waiters.arrive("async-0", "async")
        waiters.arrive("async-1", "async")
        waiters.arrive("sync-2", "sync")
        loop.loop.call_soon_threadsafe(waiters.done["async-1"].cancel)
        until(lambda: storage.locks.in_line(thread_id) == 3, "the cancelled run left")
        waiters.arrive("async-3", "async")
    waiters.finish()

    assert waiters.took == ["async-0", "sync-2", "async-3"]
    assert waiters.done["async-1"].cancelled()
    assert storage.locks.in_line(thread_id) == 0
    with storage.run(thread_id, USER):
        pass


@pytest.mark.parametrize("turns_before_cancel", [0, 1],
                         ids=["before-the-wake-up-runs", "after-the-wake-up-ran"])
def test_a_waiter_cancelled_as_it_is_handed_the_thread_gives_it_on(
        storage, thread_id, loop, turns_before_cancel):
    # The holder lets go on the loop and the head waiter is cancelled in the same
    # step (or one loop turn later, once its wake-up ran but before it resumed):
    # the thread must go on to the next waiter, not stay held by nobody.
    waiters = Waiters(storage, thread_id, loop)
    holding = storage.lock(thread_id)
    holding.__enter__()
    waiters.arrive("async-0", "async")
    waiters.arrive("sync-1", "sync")
    waiters.arrive("async-2", "async")
    head = waiters.done["async-0"]

    async def let_go_and_cancel_the_head() -> None:
        holding.__exit__(None, None, None)
        for _ in range(turns_before_cancel):
            await asyncio.sleep(0)
        head.cancel()

    loop.submit(let_go_and_cancel_the_head()).result(GUARD)
    waiters.finish()

    assert waiters.took == ["sync-1", "async-2"]
    assert head.cancelled()
    assert storage.locks.in_line(thread_id) == 0
    with storage.run(thread_id, USER):  # nobody was left holding it
        pass


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def elsewhere(request, tmp_path) -> Iterator[tuple[Storage, Callable[[str], Any]]]:
    """A storage, and a way to hold its threads as another process would: for the file
    lock an `flock` of its own on the thread's lock file (storages of one process on one
    directory share their lines), for Postgres a second pool's advisory lock."""
    kind = request.getfixturevalue("postgres_url") if request.param == "postgres" \
        else request.param
    one = open_storage(kind, tmp_path, store=None)
    if kind == "sqlite":
        yield one, functools.partial(_flock_held, tmp_path / "locks")
    else:
        two = open_storage(kind, tmp_path, store=None)
        two.locks.scope = ("another process", object())  # not the lines of `one`'s database
        yield one, lambda thread_id: two.run(thread_id, USER)
        two.close()
    one.close()


@contextlib.contextmanager
def _flock_held(directory: Path, thread_id: str) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / f"{thread_id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def test_waiters_behind_another_process_keep_their_order(elsewhere, thread_id, loop):
    # A holder the line cannot see (another process): the head of the line polls
    # it, the others wait their turn behind the head.
    storage, hold_elsewhere = elsewhere
    waiters = Waiters(storage, thread_id, loop)
    with hold_elsewhere(thread_id):
        waiters.arrive("async-0", "async")  # has the turn, finds the lock busy, polls
        waiters.arrive("sync-1", "sync")
        waiters.arrive("async-2", "async")
        waiters.arrive("sync-3", "sync")
        assert storage.locks.in_line(thread_id) == 4
    waiters.finish()
    assert waiters.took == ["async-0", "sync-1", "async-2", "sync-3"]


@pytest.mark.postgres
def test_runs_of_two_storages_on_one_database_take_the_thread_in_arrival_order(
        postgres_url, tmp_path, thread_id, polls):
    # Two storages of one process on one database (two agents on one URL, here named with
    # an option of its own): their runs line up together, each woken by the run before
    # it. Apart, each storage's waiters polled the database behind the other's holder and
    # the runs of the holder's own storage overtook them.
    one = open_storage(postgres_url, tmp_path / "a", store=None)
    other_url = postgres_url + ("&" if "?" in postgres_url else "?") + "application_name=two"
    two = open_storage(other_url, tmp_path / "b", store=None)
    took: list[str] = []
    workers: list[threading.Thread] = []

    def run(storage: Storage, name: str) -> None:
        with storage.run(thread_id, USER, wait=True):
            took.append(name)

    names = [f"run-{index}" for index in range(4)]
    try:
        with one.run(thread_id, USER):
            for index, name in enumerate(names):
                worker = threading.Thread(target=run, args=((two, one)[index % 2], name),
                                          daemon=True)
                worker.start()
                workers.append(worker)
                until(lambda index=index: two.locks.in_line(thread_id) == index + 2,
                      f"{name} queued in the database's line")
            assert two.locks.holding(thread_id) is not None  # held through `one`
            with pytest.raises(ThreadBusyError, match="is busy"), two.run(thread_id, USER):
                pass
        for worker in workers:
            worker.join(GUARD)
            assert not worker.is_alive()
        assert took == names  # in arrival order, whichever storage each came through
        assert polls == []  # none asked the database again behind a run of this process
        assert one.locks.threads() == two.locks.threads() == []  # the line is gone
    finally:
        one.close()
        two.close()


def test_the_turns_of_agent_runs_follow_their_arrival(tmp_path):
    # Through the real agent: sync and async runs queued behind a held thread each
    # add their turn to the history in the order they came.
    replies = 4
    agent = create_agent(model=ScriptedChatModel(["done"] * replies), checkpointer="memory",
                         base_dir=tmp_path, runtime=RuntimeOptions(user_id=USER),
                         services={TITLE_MODEL: ScriptedChatModel(["t"] * replies),
                                   MEMORY_MODEL: ScriptedChatModel(["[]"] * replies)})
    running = Loop()
    kinds = ["async", "sync", "sync", "async"]
    names = [f"{kind}-{index}" for index, kind in enumerate(kinds)]
    started: list[Any] = []
    try:
        with agent.hold("t", USER):
            for name, kind in zip(names, kinds, strict=True):
                before = agent.storage.locks.in_line("t")
                if kind == "sync":
                    worker = threading.Thread(target=agent.invoke, args=(name,), daemon=True,
                                              kwargs={"thread_id": "t", "user_id": USER,
                                                      "wait": True})
                    worker.start()
                    started.append(worker)
                else:
                    started.append(running.submit(
                        agent.ainvoke(name, thread_id="t", user_id=USER, wait=True)))
                until(lambda before=before: agent.storage.locks.in_line("t") == before + 1,
                      f"{name} queued")
        for done in started:
            if isinstance(done, threading.Thread):
                done.join(GUARD)
            else:
                done.result(GUARD)
        messages = agent.graph.get_state(agent.run_config("t")).values["messages"]
    finally:
        running.close()
        agent.close()
    assert [m.content for m in messages if m.type == "human"] == names
