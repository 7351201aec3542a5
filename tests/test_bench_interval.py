"""The bootstrap interval `bench_fusion` prints beside each target verdict."""

from __future__ import annotations

import random

from benchmarks.bench_fusion import Cell, ratio_interval


def _cell(samples: list[float]) -> Cell:
    return Cell("default", "fused", "memory", sorted(samples)[len(samples) // 2], 0.0,
                samples=tuple(samples))


def test_interval_brackets_the_ratio_and_ignores_load_shared_by_both() -> None:
    rng = random.Random(1)
    load = [rng.uniform(0.8, 1.6) for _ in range(40)]  # the machine's load, round by round
    base = _cell([20.0 * f for f in load])
    cell = _cell([30.0 * f * rng.uniform(0.97, 1.03) for f in load])
    low, high = ratio_interval(cell, base) or (0.0, 0.0)
    assert low <= 1.5 <= high
    assert high - low < 0.25  # rounds are resampled whole: the shared load cancels


def test_interval_separates_a_clear_miss_from_the_target() -> None:
    base = _cell([20.0 + i % 3 for i in range(30)])
    cell = _cell([36.0 + i % 3 for i in range(30)])
    low, _high = ratio_interval(cell, base) or (0.0, 0.0)
    assert low > 1.6


def test_too_few_runs_give_no_interval() -> None:
    assert ratio_interval(_cell([1.0, 2.0]), _cell([1.0, 2.0])) is None
