"""How sure a benchmark's ratio is: a bootstrap interval of one median over another."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

__all__ = ["median_ratio_interval"]


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
