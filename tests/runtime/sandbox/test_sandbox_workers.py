"""The sandbox's background jobs: run by threads that wait for the next, never held up."""

from __future__ import annotations

import threading
import time

from antler.runtime.sandbox import workers


def _run(function: object, pool: workers._Workers = workers._workers) -> None:
    done = threading.Event()

    def job() -> None:
        try:
            function()  # type: ignore[operator]
        finally:
            done.set()

    pool.submit(job)
    assert done.wait(10), "the job did not run"


def test_jobs_one_after_another_reuse_the_waiting_thread() -> None:
    # A thread per job costs its start and its end (about 70 us of CPU); a thread that
    # waits for the next job takes it. A pool of its own: the shared one may hold
    # threads other tests left waiting, any of which may take a job.
    pool = workers._Workers()
    seen: list[int] = []
    for _ in range(10):
        _run(lambda: seen.append(threading.get_native_id()), pool)
        deadline = time.monotonic() + 10
        while not pool._waiting:  # the thread goes back to waiting
            assert time.monotonic() < deadline, "the thread did not wait for the next job"
            time.sleep(0.001)
    assert len(seen) == 10
    assert len(set(seen)) <= 3, f"{len(set(seen))} threads for 10 jobs in a row"


def test_a_job_waiting_for_a_later_one_does_not_hold_it_up() -> None:
    # The spare pool's take waits for the spare being made ahead, itself a job: with one
    # thread for every job, the later job would wait behind the first until it gave up.
    later_ran = threading.Event()
    first_saw: list[bool] = []
    first_done = threading.Event()

    def first() -> None:
        first_saw.append(later_ran.wait(5))
        first_done.set()

    workers.submit(first)
    workers.submit(later_ran.set)
    assert first_done.wait(10)
    assert first_saw == [True]


def test_a_failing_job_is_logged_and_the_thread_goes_on(caplog: object) -> None:
    import logging

    import pytest

    assert isinstance(caplog, pytest.LogCaptureFixture)
    with caplog.at_level(logging.ERROR, logger="antler.runtime.sandbox.workers"):
        def boom() -> None:
            raise RuntimeError("boom")

        workers.submit(boom)
        ran: list[int] = []
        _run(lambda: ran.append(1))
        for _ in range(200):
            if any("background job failed" in record.message for record in caplog.records):
                break
            time.sleep(0.01)
    assert ran == [1]
    assert any("background job failed" in record.message for record in caplog.records)
