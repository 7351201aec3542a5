"""The file run lock at its edges: a thread deleted under a waiting run, and two storages
of one process on one directory.

Deleting a thread removes its lock file. A run of another process that opened the
file just before, and locks it just after, must not hold the thread while a later
run locks the new file at the path: one run at a time, even then. Each step of the
race is forced in order by hooking the lock call or the unlink (no sleeps); a
lock service with lines of its own stands in for another process. A run's hold is
checked to be the thread's lock by trying the file at the path from outside.

Two storages of one process on one lock directory (two agents on one home) line
their waiting runs up together: they take the thread in the order they came, woken
by the run before them, with no poll between them.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from antler.runtime.storage import FileThreadLocks, ThreadBusyError, open_storage
from antler.runtime.storage.admin import ThreadAdmin
from tests.runtime.storage.test_thread_lock_order import until

THREAD = "t1"
USER = "u"
GUARD = 20
"""Seconds a step may take before the test counts it as hung (a guard, not a speed check)."""


def another_process(directory: Path) -> FileThreadLocks:
    """File locks on `directory` whose runs line up apart from this process's, as the
    runs of another process do."""
    locks = FileThreadLocks(directory)
    locks.scope = ("another process", object())
    return locks


def lock_file(home: Path) -> Path:
    return home / "locks" / f"{THREAD}.lock"


def assert_the_file_at_the_path_is_held(path: Path) -> None:
    """The file now at `path` is locked, so the run holding the thread holds the file
    every later run will try (not one removed from under it)."""
    probe = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(probe)


@pytest.fixture
def admin(tmp_path) -> Iterator[ThreadAdmin]:
    """`antler threads delete` on a thread of the home `tmp_path`."""
    with ThreadAdmin(tmp_path) as opened:
        opened.owners.claim(THREAD, USER)
        yield opened


def test_a_run_that_opened_the_lock_file_before_the_thread_was_deleted_locks_the_new_one(
        tmp_path, admin, monkeypatch):
    second, third = another_process(tmp_path / "locks"), another_process(tmp_path / "locks")
    with second.hold(THREAD):  # the thread's lock file exists, as after any run
        pass
    flock = fcntl.flock
    tries: list[int] = []

    def delete_before_the_first_try(fd: int, operation: int) -> None:
        if not tries:  # the second run opened the file and is about to lock it
            tries.append(fd)
            admin.delete(THREAD)
        elif fd != tries[0]:
            tries.append(fd)
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", delete_before_the_first_try)
    with second.hold(THREAD):
        monkeypatch.setattr(fcntl, "flock", flock)
        assert len(tries) == 2  # it locked the removed file, let it go, locked the new one
        with pytest.raises(ThreadBusyError, match="is busy"), third.hold(THREAD):
            pass  # two runs would hold the thread at once
        assert_the_file_at_the_path_is_held(lock_file(tmp_path))
    with third.hold(THREAD):
        assert_the_file_at_the_path_is_held(lock_file(tmp_path))


def test_the_lock_file_is_removed_while_the_deleter_holds_the_thread(
        tmp_path, admin, monkeypatch):
    # A run of another process tries the thread at the moment the file is removed: it
    # must find the thread busy, not lock the file about to go.
    second, third = another_process(tmp_path / "locks"), another_process(tmp_path / "locks")
    with second.hold(THREAD):
        pass
    path = lock_file(tmp_path)
    unlink = os.unlink
    held = contextlib.ExitStack()
    outcomes: list[str] = []

    def try_the_thread_as_it_goes(target: str | os.PathLike[str], *args, **kwargs) -> None:
        if os.fspath(target) == str(path) and not outcomes:
            try:
                held.enter_context(second.hold(THREAD))
                outcomes.append("held")
            except ThreadBusyError:
                outcomes.append("busy")
        unlink(target, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", try_the_thread_as_it_goes)
    with held:
        admin.delete(THREAD)
        monkeypatch.setattr(os, "unlink", unlink)
        if outcomes == ["held"]:  # it holds the removed file: nobody may take the thread
            with pytest.raises(ThreadBusyError, match="is busy"), third.hold(THREAD):
                pass
    assert outcomes == ["busy"]
    assert not path.exists()
    with second.hold(THREAD):
        with pytest.raises(ThreadBusyError, match="is busy"), third.hold(THREAD):
            pass
        assert_the_file_at_the_path_is_held(path)


def test_the_lock_file_is_only_removed_by_the_holder(tmp_path):
    locks = FileThreadLocks(tmp_path)
    with locks.hold(THREAD):
        pass
    with pytest.raises(RuntimeError, match="only be removed while this process holds"):
        locks.forget(THREAD)
    assert (tmp_path / f"{THREAD}.lock").exists()


def test_the_lock_file_is_removed_by_another_storage_of_the_holding_process(tmp_path):
    # The deleter holds the thread through one storage (an agent's) and removes the lock
    # file through another on the same directory: the thread is held by this process on
    # the directory, whichever storage took it. Refused before, as if nothing held it.
    agent, admin = FileThreadLocks(tmp_path), FileThreadLocks(tmp_path)
    with agent.hold(THREAD):
        admin.forget(THREAD)
        assert not (tmp_path / f"{THREAD}.lock").exists()
    # The next run (another process's) locks a new file: a holder this process cannot
    # vouch for.
    with another_process(tmp_path).hold(THREAD), pytest.raises(
            RuntimeError, match=r"only be removed while this process holds"):
        admin.forget(THREAD)
    assert (tmp_path / f"{THREAD}.lock").exists()


HOLDS = 150
"""Holds of the thread per child process, each removing the lock file before it lets go."""


def _hold_and_delete(directory: str, inside: object, most: object, held: object,
                     start: object) -> None:
    """Take the thread `HOLDS` times as fast as it comes free, and remove its lock file
    on every hold (runs in a child process)."""
    locks = FileThreadLocks(Path(directory))
    flock = fcntl.flock

    def descheduled_before_locking(fd: int, operation: int) -> None:
        os.sched_yield()  # the widest gap between opening the file and locking it
        flock(fd, operation)

    fcntl.flock = descheduled_before_locking  # this child's own module
    start.wait(GUARD)  # type: ignore[attr-defined]
    deadline = time.monotonic() + GUARD
    count = 0
    while count < HOLDS and time.monotonic() < deadline:
        try:
            with locks.hold(THREAD):
                with inside.get_lock():  # type: ignore[attr-defined]
                    inside.value += 1  # type: ignore[attr-defined]
                    most.value = max(most.value, inside.value)  # type: ignore[attr-defined]
                os.sched_yield()
                locks.forget(THREAD)
                with inside.get_lock():  # type: ignore[attr-defined]
                    inside.value -= 1  # type: ignore[attr-defined]
            count += 1
        except ThreadBusyError:
            os.sched_yield()
    with held.get_lock():  # type: ignore[attr-defined]
        held.value += count  # type: ignore[attr-defined]


def test_two_processes_deleting_the_lock_file_as_they_go_never_hold_the_thread_together(
        tmp_path):
    context = multiprocessing.get_context("fork")  # the children need no imports of their own
    inside, most, held = context.Value("i", 0), context.Value("i", 0), context.Value("i", 0)
    start = context.Event()
    children = [context.Process(target=_hold_and_delete,
                                args=(str(tmp_path), inside, most, held, start))
                for _ in range(2)]
    for child in children:
        child.start()
    start.set()
    for child in children:
        child.join(GUARD + 5)
        if child.is_alive():
            child.kill()
            child.join()
        assert child.exitcode == 0, f"a child failed or hung (exit code {child.exitcode})"
    assert most.value == 1  # never two holders at once
    assert held.value == 2 * HOLDS


# -- two storages of one process on one directory -----------------------------------------


def test_runs_of_two_storages_on_one_directory_take_the_thread_in_arrival_order(
        tmp_path, polls):
    one = open_storage("sqlite", tmp_path, store=None)
    (tmp_path / "same-home").symlink_to(tmp_path)  # one directory, named another way
    two = open_storage("sqlite", tmp_path / "same-home", store=None)
    took: list[str] = []
    workers: list[threading.Thread] = []

    def run(storage, name: str) -> None:
        with storage.run(THREAD, USER, wait=True):
            took.append(name)

    names = [f"run-{index}" for index in range(6)]
    try:
        with one.run(THREAD, USER):
            for index, name in enumerate(names):
                storage = (one, two)[index % 2]
                worker = threading.Thread(target=run, args=(storage, name), daemon=True)
                worker.start()
                workers.append(worker)
                until(lambda index=index: one.locks.in_line(THREAD) == index + 2,
                      f"{name} queued in the directory's line")
            assert two.locks.in_line(THREAD) == len(names) + 1
        for worker in workers:
            worker.join(GUARD)
            assert not worker.is_alive()
        assert took == names  # in arrival order, whichever storage each came through
        assert polls == []  # each was woken by the run before it
        assert one.locks.threads() == two.locks.threads() == []  # the line is gone
    finally:
        one.close()
        two.close()


def test_storages_on_different_directories_keep_their_own_lines(tmp_path):
    one = open_storage("sqlite", tmp_path / "a", store=None)
    two = open_storage("sqlite", tmp_path / "b", store=None)
    try:
        with one.run(THREAD, USER), two.run(THREAD, USER):
            assert one.locks.in_line(THREAD) == two.locks.in_line(THREAD) == 1
            with pytest.raises(ThreadBusyError, match="is busy"), two.run(THREAD, USER):
                pass
    finally:
        one.close()
        two.close()
