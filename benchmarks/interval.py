"""How sure a benchmark's figures are: a bootstrap interval of one median over another, and
the medians of samples taken in pairs."""

from __future__ import annotations

import random
import statistics
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

__all__ = ["median_ratio_interval", "paired_medians"]

Key = TypeVar("Key", bound=Hashable)


def median_ratio_interval(cell: Sequence[float], base: Sequence[float], rounds: int = 2000,
                          seed: int = 0) -> tuple[float, float] | None:
    """A 90% bootstrap interval of `cell`'s median over `base`'s.

    The samples are paired by index (one round: a run of `cell` with the run of
    `base` beside it) and rounds are resampled whole, so load that moved both alike
    does not widen the interval. None with fewer than five rounds.
    """
    pairs = list(zip(cell, base, strict=False))
    if len(pairs) < 5:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        drawn = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        ratios.append(statistics.median(a for a, _ in drawn)
                      / statistics.median(b for _, b in drawn))
    ratios.sort()
    return ratios[int(0.05 * rounds)], ratios[int(0.95 * rounds) - 1]


def paired_medians(samples: Mapping[Key, Mapping[str, Sequence[float]]], slower: str,
                   faster: str) -> dict[Key, dict[str, float]]:
    """Per key, the median of each variant's samples, and under ``"difference"`` the
    median of `slower` less `faster` taken round by round (the samples are paired by
    index: one round ran each variant once, interleaved)."""
    return {key: {which: statistics.median(values) for which, values in found.items()}
            | {"difference": statistics.median(
                a - b for a, b in zip(found[slower], found[faster], strict=True))}
            for key, found in samples.items()}
