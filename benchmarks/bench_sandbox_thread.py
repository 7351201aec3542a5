"""Benchmark: the CPU a new thread's sandbox costs, bwrap against the local provider.

    python -m benchmarks.bench_sandbox_thread [--runs N] [--clock cgroup|cpu]
        [--init-against FILE]

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
round (interleaved, so that load on the machine hits both alike; the order turns by
one each round, so that none pays for its place in the round), with its 90%
bootstrap interval. The clock (`benchmarks.clock`) is ``cgroup`` where it works
(the process and every descendant, to the nanosecond: a bwrap command's own CPU is
reaped by the namespace's init, which the ``cpu`` clock reads in 10 ms ticks),
else ``cpu``. The thread's namespace lives on for its idle time, as in a real run;
its end (closing, the kernel's teardown) is not counted.

``--init-against FILE`` adds a third provider to each round, ``bwrap-other``: bwrap
whose namespaces run the init in FILE (another version of
`antler.runtime.sandbox.nsinit`, say the one of an earlier commit: ``git show
REV:core/runtime/sandbox/nsinit.py > FILE``), and reports the median of its rounds
less bwrap's, with that median's 90% bootstrap interval: a change to the init,
measured in one process, interleaved, where a change of a tenth of a millisecond is
lost between two processes on a loaded machine.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import statistics
import tempfile
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def _init_from(path: Path | None) -> Iterator[None]:
    """Namespaces started meanwhile run the init in `path` (None: this tree's)."""
    from antler.runtime.sandbox import namespace

    if path is None:
        yield
        return
    own, namespace._INIT_SOURCE = namespace._INIT_SOURCE, path
    try:
        yield
    finally:
        namespace._INIT_SOURCE = own


def measure(runs: int, clock: str, init_against: Path | None = None
            ) -> dict[str, list[list[float]]]:
    """Each provider's stage times (CPU ms) of `runs` interleaved rounds."""
    from antler.plugin_api.paths import PathLayout
    from antler.plugin_api.sandbox import load_sandbox_provider

    read = clock_of(clock)
    names = itertools.count()
    inits = {"local": None, "bwrap": None, "bwrap-other": init_against}
    with tempfile.TemporaryDirectory(prefix="antler-bench-thread-") as scratch:
        layout = PathLayout(Path(scratch))  # each provider has sources of its own
        providers = {name: load_sandbox_provider(name.split("-")[0]) for name in inits
                     if name != "bwrap-other" or init_against is not None}
        try:
            samples: dict[str, list[list[float]]] = {name: [] for name in providers}
            order = list(providers.items())
            for index in range(5 + runs):  # 5 to warm up: sources, caches, the watchdog
                # The order turns by one each round: a provider's place in the round, and
                # which provider ran before it, cost it (caches, the other's background
                # work; some 0.2 ms), which would otherwise count as its own.
                turn = index % len(order)
                for name, provider in order[turn:] + order[:turn]:
                    with _init_from(inits[name]):
                        stages = _round(provider, layout, f"t{next(names)}", read)
                    if index >= 5:
                        samples[name].append(stages)
        finally:
            for provider in providers.values():
                provider.shutdown()
    return samples


def report(samples: dict[str, list[list[float]]], clock: str, runs: int) -> str:
    totals = {name: [sum(stages) for stages in rounds] for name, rounds in samples.items()}
    lines = [f"a new thread's sandbox, median {clock} ms of {runs} interleaved rounds "
             f"(load average {os.getloadavg()[0]:.1f}):",
             f"{'provider':<12}" + "".join(f"{stage:>9}" for stage in STAGES) + f"{'total':>9}"]
    for name, rounds in samples.items():
        medians = [statistics.median(column) for column in zip(*rounds, strict=True)]
        lines.append(f"{name:<12}" + "".join(f"{ms:>9.2f}" for ms in medians)
                     + f"{statistics.median(totals[name]):>9.2f}")
    added = [bwrap - local for bwrap, local in zip(totals["bwrap"], totals["local"],
                                                     strict=True)]
    ratio = median_ratio_interval(totals["bwrap"], totals["local"])
    spread = _difference_interval(added)
    lines.append(f"bwrap adds {statistics.median(added):.2f} ms a thread (median of the "
                 f"rounds' differences"
                 + (f"; 90% interval {spread[0]:.2f}-{spread[1]:.2f} ms" if spread else "")
                 + (f"; bwrap/local {ratio[0]:.2f}-{ratio[1]:.2f}x" if ratio else "") + ")")
    if "bwrap-other" in totals:
        other = [theirs - ours for theirs, ours in zip(totals["bwrap-other"], totals["bwrap"],
                                                       strict=True)]
        spread = _difference_interval(other)
        lines.append(f"the other init costs {statistics.median(other):+.2f} ms a thread "
                     "against this tree's (median of the rounds' differences"
                     + (f"; 90% interval {spread[0]:+.2f} to {spread[1]:+.2f} ms" if spread
                        else "") + ")")
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
    parser.add_argument("--init-against", type=Path, default=None, metavar="FILE",
                        help="also measure bwrap with the namespace init in FILE, against "
                             "this tree's (see the module docstring)")
    args = parser.parse_args(argv)
    if args.init_against is not None and not args.init_against.is_file():
        parser.error(f"--init-against: no file {args.init_against}; write one with "
                     "git show REV:core/runtime/sandbox/nsinit.py > FILE")
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
    print(report(measure(args.runs, clock, args.init_against), clock, args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
