"""Regression check: the default chain's ratio to a bare agent against the committed baseline.

    python -m benchmarks.bench_regression [--runs N] [--attempts N] [--update]
                                          [--slowdown FRACTION]

CI runs this (`.ci/run`). It measures what `bench_fusion` measures for the
default chain compiled, in memory (the issue's headline figure), on CPU time:
the default chain with its commands in the local provider, and, where
bubblewrap works, with the provider users get (`default-auto`), each
interleaved run by run with a bare `create_agent` on the same conversation. It
compares each median ratio with the one recorded in `benchmarks/baseline.json`
and fails (exit status 1) on a regression of more than `TOLERANCE` (20%).

Made to stand the noise of a shared machine:

- interleaved runs, medians, CPU time (`bench_fusion.measure`);
- a cell regressed only when its median ratio is above the baseline's times
  1.2 *and* the 90% bootstrap interval of the ratio lies wholly above the
  baseline itself (`benchmarks.interval`), so a load spike that widens the
  interval does not fail the run;
- a cell that fails is measured again (`--attempts`, with the samples of every
  attempt pooled): a regression has to show every time, a spike does not.

`--update` writes the measured ratios, every attempt's runs pooled, as the new
baseline (after a change that makes the chain cheaper, or dearer on purpose;
commit the file with the figures in the message; `--attempts 3` or more, so
the baseline is not one lucky reading). `--slowdown 0.3` makes every Antler run spin 30% of
the bare run's time longer: the check must then fail, which is how it was
checked that it catches a regression.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.bench_fusion import AUTO_CHAIN, Cell, measure, ratio_interval

BASELINE = Path(__file__).with_name("baseline.json")
TOLERANCE = 0.20
"""A ratio more than this fraction above the baseline's is a regression."""
SAVER = "memory"
CLOCK = "cpu"


@dataclass(frozen=True)
class Verdict:
    """One chain's measured ratio against its baseline."""

    chain: str
    ratio: float
    interval: tuple[float, float] | None
    baseline: float | None
    runs: int

    @property
    def limit(self) -> float | None:
        return None if self.baseline is None else self.baseline * (1 + TOLERANCE)

    @property
    def regressed(self) -> bool:
        """Above the limit, and surely above the baseline (the interval's low end)."""
        if self.limit is None:
            return False
        low = self.interval[0] if self.interval else self.ratio
        return self.ratio > self.limit and low > self.baseline  # type: ignore[operator]

    def line(self) -> str:
        spread = (f" (90% interval {self.interval[0]:.2f}-{self.interval[1]:.2f}x)"
                  if self.interval else "")
        if self.baseline is None:
            return f"{self.chain}: {self.ratio:.2f}x bare{spread}; no baseline recorded"
        verdict = "REGRESSED" if self.regressed else "ok"
        return (f"{self.chain}: {self.ratio:.2f}x bare{spread} over {self.runs} runs; "
                f"baseline {self.baseline:.2f}x, limit {self.limit:.2f}x: {verdict}")


def judge(cell: Cell, bare: Cell, baseline: float | None) -> Verdict:
    """The verdict on `cell` against `bare` (runs paired by index) and the baseline ratio."""
    return Verdict(cell.chain, cell.ms / bare.ms, ratio_interval(cell, bare), baseline,
                   len(cell.samples))


def pooled(cells: list[Cell], more: list[Cell]) -> list[Cell]:
    """`cells` with the samples of `more` (the same cells, measured again) added."""
    out = []
    for cell in cells:
        extra = next(m for m in more if (m.chain, m.variant) == (cell.chain, cell.variant))
        samples = cell.samples + extra.samples
        out.append(Cell(cell.chain, cell.variant, cell.saver, statistics.median(samples),
                        cell.checkpoints, cell.hook_nodes, cell.other_ms, samples))
    return out


def chains_here() -> tuple[str, ...]:
    """The default chain, and `default-auto` where bubblewrap works."""
    from antler.runtime.sandbox.bwrap import bwrap_status

    return ("default", AUTO_CHAIN) if bwrap_status().usable else ("default",)


def read_baseline() -> dict[str, float]:
    if not BASELINE.exists():
        return {}
    data = json.loads(BASELINE.read_text(encoding="utf-8"))
    return {chain: float(entry["ratio"]) for chain, entry in data["ratios"].items()}


def write_baseline(verdicts: list[Verdict], load: float) -> None:
    data = {
        "about": "bench_fusion's compiled default chain over bare, in memory, CPU time; "
                 "written by `python -m benchmarks.bench_regression --update`",
        "measured": datetime.now(UTC).strftime("%Y-%m-%d"),
        "load_average": round(load, 1),
        "ratios": {v.chain: {"ratio": round(v.ratio, 3), "runs": v.runs,
                             "interval": [round(x, 3) for x in v.interval or ()]}
                   for v in verdicts},
    }
    BASELINE.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs per cell and attempt")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--attempts", type=int, default=2,
                        help="measurements before a regression is reported (samples pooled)")
    parser.add_argument("--update", action="store_true",
                        help="record the measured ratios as the baseline")
    parser.add_argument("--slowdown", type=float, default=0.0,
                        help="spin every Antler run this fraction of bare's time longer "
                             "(to see the check fail)")
    args = parser.parse_args(argv)
    chains = chains_here()
    baseline = read_baseline()
    load_before = os.getloadavg()[0]
    cells: list[Cell] = []
    verdicts: list[Verdict] = []
    for attempt in range(max(1, args.attempts)):
        measured = measure(SAVER, chains, args.runs, args.warmup, clock=CLOCK,
                           variants=("fused",), slowdown=args.slowdown)
        cells = pooled(cells, measured) if cells else measured
        bare = next(c for c in cells if c.variant == "bare")
        verdicts = [judge(c, bare, baseline.get(c.chain)) for c in cells if c is not bare]
        if args.update:
            continue  # a baseline pools every attempt
        if not any(v.regressed for v in verdicts):
            break
        if attempt + 1 < args.attempts:
            print(f"attempt {attempt + 1}: "
                  + "; ".join(v.line() for v in verdicts if v.regressed)
                  + " - measuring again", flush=True)
    load = os.getloadavg()[0]
    print(f"default chain compiled vs bare, {SAVER} saver, {CLOCK} time, medians of "
          f"interleaved runs; load average {load_before:.1f} at the start, {load:.1f} at "
          f"the end")
    for verdict in verdicts:
        print("  " + verdict.line())
    if args.update:
        write_baseline(verdicts, load)
        print(f"baseline written to {BASELINE.name}")
        return 0
    return 1 if any(v.regressed for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
