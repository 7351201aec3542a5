"""Benchmark: the CPU a new thread's sandbox costs, bwrap against the local provider.

    python -m benchmarks.bench_sandbox_thread [--runs N] [--clock cgroup|cpu]

What `bench_fusion`'s `default-auto` chain pays per run for its sandbox, without
the chain around it: a run on a new thread, as the sandbox middleware and the
`bash` tool drive the provider. One round, for each provider in turn:

* ``start``: the run's start (`warm`) and the tool's `acquire` (bwrap: the thread
  adopts the spare namespace made ahead, in a background job the command waits for);
* ``command``: the tool's one command, ``wc -l`` of an uploaded file;
* ``end``: the run's end (`release`; bwrap: a spare made ahead for the next thread,
  in the background);
* ``settle``: waiting for that background work (`BwrapSandboxProvider.settle`), so
  that its CPU counts for this round.

Reported: the median CPU milliseconds of each stage and of the whole round per
provider, and the median of bwrap's round less the local provider's in the same
round (interleaved, so that load on the machine hits both alike), with its 90%
bootstrap interval. The clock (`benchmarks.clock`) is ``cgroup`` where it works
(the process and every descendant, to the nanosecond: a bwrap command's own CPU is
reaped by the namespace's init, which the ``cpu`` clock reads in 10 ms ticks),
else ``cpu``. The thread's namespace lives on for its idle time, as in a real run;
its end (closing, the kernel's teardown) is not counted.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.clock import CgroupClockError
from benchmarks.clock import clock as clock_of
from benchmarks.interval import median_ratio_interval

STAGES = ("start", "command", "end", "settle")
COMMAND = "wc -l /mnt/user-data/uploads/sales.csv"


def _round(provider: Any, layout: Any, thread: str, read: Callable[[], float]) -> list[float]:
    """One new thread's stages on `provider`, in CPU ms each."""
    paths = layout.thread("bench", thread)
    paths.ensure_directories()  # what the uploads plugin did before the run
    (paths.uploads / "sales.csv").write_text("month,revenue\n2026-01,1200\n")
    marks = [read()]
    provider.warm(layout)
    sandbox_id = provider.acquire(paths)
    sandbox = provider.get(sandbox_id)
    marks.append(read())
    result = sandbox.execute_command(COMMAND)
    if result.exit_code != 0:
        raise RuntimeError(f"the benchmark's command failed: {result.stderr}")
    marks.append(read())
    provider.release(sandbox_id)
    marks.append(read())
    settle = getattr(provider, "settle", None)
    if settle is not None:
        settle()
    marks.append(read())
    return [(after - before) * 1000 for before, after in itertools.pairwise(marks)]


def measure(runs: int, clock: str) -> dict[str, list[list[float]]]:
    """Each provider's stage times (CPU ms) of `runs` interleaved rounds."""
    from antler.plugin_api.paths import PathLayout
    from antler.plugin_api.sandbox import load_sandbox_provider

    read = clock_of(clock)
    names = itertools.count()
    with tempfile.TemporaryDirectory(prefix="antler-bench-thread-") as scratch:
        layout = PathLayout(Path(scratch))
        providers = {name: load_sandbox_provider(name) for name in ("local", "bwrap")}
        try:
            samples: dict[str, list[list[float]]] = {name: [] for name in providers}
            for _ in range(5):  # warm up: the source namespace, caches, the watchdog
                for provider in providers.values():
                    _round(provider, layout, f"t{next(names)}", read)
            for _ in range(runs):
                for name, provider in providers.items():
                    samples[name].append(_round(provider, layout, f"t{next(names)}", read))
        finally:
            for provider in providers.values():
                provider.shutdown()
    return samples


def report(samples: dict[str, list[list[float]]], clock: str, runs: int) -> str:
    totals = {name: [sum(stages) for stages in rounds] for name, rounds in samples.items()}
    lines = [f"a new thread's sandbox, median {clock} ms of {runs} interleaved rounds "
             f"(load average {os.getloadavg()[0]:.1f}):",
             f"{'provider':<9}" + "".join(f"{stage:>9}" for stage in STAGES) + f"{'total':>9}"]
    for name, rounds in samples.items():
        medians = [statistics.median(column) for column in zip(*rounds, strict=True)]
        lines.append(f"{name:<9}" + "".join(f"{ms:>9.2f}" for ms in medians)
                     + f"{statistics.median(totals[name]):>9.2f}")
    added = [bwrap - local for bwrap, local in zip(totals["bwrap"], totals["local"],
                                                     strict=True)]
    ratio = median_ratio_interval(totals["bwrap"], totals["local"])
    spread = _difference_interval(added)
    lines.append(f"bwrap adds {statistics.median(added):.2f} ms a thread (median of the "
                 f"rounds' differences"
                 + (f"; 90% interval {spread[0]:.2f}-{spread[1]:.2f} ms" if spread else "")
                 + (f"; bwrap/local {ratio[0]:.2f}-{ratio[1]:.2f}x" if ratio else "") + ")")
    return "\n".join(lines)


def _difference_interval(differences: list[float], rounds: int = 2000
                         ) -> tuple[float, float] | None:
    """A 90% bootstrap interval of the median of `differences` (rounds resampled)."""
    if len(differences) < 5:
        return None
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(differences, k=len(differences)))
                     for _ in range(rounds))
    return medians[int(rounds * 0.05)], medians[int(rounds * 0.95) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--clock", choices=("cgroup", "cpu"), default=None,
                        help="cgroup where it works (the default), else cpu")
    args = parser.parse_args(argv)
    from antler.runtime.sandbox.bwrap import bwrap_status

    status = bwrap_status()
    if not status.usable:
        print(f"skipped: bubblewrap is not usable here ({status.reason})")
        return 0
    clock = args.clock
    if clock is None:
        try:
            clock_of("cgroup")
            clock = "cgroup"
        except CgroupClockError as error:
            print(f"(the cpu clock: {error})")
            clock = "cpu"
    print(report(measure(args.runs, clock), clock, args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
