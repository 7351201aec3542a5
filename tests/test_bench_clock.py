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
