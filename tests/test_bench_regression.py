"""The CI regression check's verdict (`benchmarks.bench_regression`) on made-up runs."""

from __future__ import annotations

import random

from benchmarks.bench_fusion import Cell
from benchmarks.bench_regression import judge, pooled


def _cell(variant: str, samples: list[float]) -> Cell:
    return Cell("default", variant, "memory", sorted(samples)[len(samples) // 2], 0.0,
                samples=tuple(samples))


def _runs(ratio: float, seed: int, rounds: int = 30) -> tuple[Cell, Cell]:
    """(chain, bare) over `rounds` runs of a machine whose load moves both alike."""
    rng = random.Random(seed)
    load = [rng.uniform(0.8, 1.8) for _ in range(rounds)]
    bare = _cell("bare", [20.0 * f * rng.uniform(0.95, 1.05) for f in load])
    chain = _cell("fused", [20.0 * ratio * f * rng.uniform(0.95, 1.05) for f in load])
    return chain, bare


def test_a_chain_30_percent_dearer_than_its_baseline_is_a_regression() -> None:
    chain, bare = _runs(1.5 * 1.3, seed=1)
    verdict = judge(chain, bare, baseline=1.5)
    assert verdict.regressed
    assert "REGRESSED" in verdict.line()


def test_the_baseline_ratio_under_heavy_shared_load_is_not_a_regression() -> None:
    for seed in range(20):
        chain, bare = _runs(1.5, seed=seed)
        assert not judge(chain, bare, baseline=1.5).regressed, seed


def test_a_spike_that_leaves_the_interval_touching_the_baseline_is_not_a_regression() -> None:
    chain, bare = _runs(1.5, seed=3, rounds=7)
    # Four of seven chain runs hit a spike of their own: the median is high, the interval
    # wide enough to reach the baseline.
    spiked = _cell("fused", [s * (2.0 if i % 2 == 0 else 1.0)
                             for i, s in enumerate(chain.samples)])
    verdict = judge(spiked, bare, baseline=1.5)
    assert verdict.ratio > verdict.limit  # type: ignore[operator]
    assert verdict.interval is not None and verdict.interval[0] <= 1.5
    assert not verdict.regressed


def test_no_baseline_never_fails() -> None:
    chain, bare = _runs(3.0, seed=2)
    assert not judge(chain, bare, baseline=None).regressed


def test_a_second_attempt_pools_the_runs_of_both() -> None:
    chain, bare = _runs(1.5, seed=4, rounds=10)
    again_chain, again_bare = _runs(1.5, seed=5, rounds=10)
    merged = pooled([bare, chain], [again_bare, again_chain])
    assert [len(c.samples) for c in merged] == [20, 20]
    assert merged[1].samples[:10] == chain.samples
