"""The benchmarks' CPU clock counts the code measured, not the clock's own reading."""

from __future__ import annotations

import sys
import time

import pytest

from benchmarks import clock

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_the_cpu_clock_leaves_out_what_reading_the_live_children_costs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A walk over /proc that costs 20 ms of CPU, as it does with ~200 live children: two
    # readings with nothing between them must not differ by it.
    def costly_walk() -> float:
        until = time.thread_time() + 0.02
        while time.thread_time() < until:
            pass
        return 0.0

    monkeypatch.setattr(clock, "_live_descendants_cpu", costly_walk)
    first = clock.cpu_seconds()
    second = clock.cpu_seconds()
    assert second - first < 0.01
    # Work between the readings still counts, whole.
    until = time.thread_time() + 0.03
    while time.thread_time() < until:
        pass
    assert clock.cpu_seconds() - second >= 0.029



def test_the_cgroup_clock_counts_what_a_live_child_reaped() -> None:
    # A sandbox namespace's init reaps the commands it starts and lives on: /proc reports
    # what it reaped in 10 ms ticks only, and the cgroup clock counts it whole.
    import subprocess

    try:
        read = clock.clock("cgroup")
    except clock.CgroupClockError as error:
        pytest.skip(str(error))
    burn = ("import time\nuntil = time.thread_time() + 0.005\n"
            "while time.thread_time() < until:\n    pass\n")
    # The child starts its grandchild when told, reaps it, says what it used (getrusage:
    # to the nanosecond), and lives on.
    parent = ("import resource, subprocess, sys, time\nsys.stdin.readline()\n"
              f"subprocess.run([sys.executable, '-S', '-c', {burn!r}])\n"
              "used = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
              "print(used.ru_utime + used.ru_stime, flush=True)\ntime.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", parent], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    try:
        before = read()
        child.stdin.write(b"go\n")
        child.stdin.flush()
        grandchild = float(child.stdout.readline())
        after = read()
    finally:
        child.kill()
        child.wait()
    assert grandchild >= 0.005
    assert after - before >= grandchild
