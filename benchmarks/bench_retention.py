"""Benchmark: what a run leaves alive in the process, default chain against bare.

    python -m benchmarks.bench_retention [--warmup N] [--runs N] [--saver none|memory ...]
                                         [--sites N]

A long-lived server (`antler serve`, LangGraph Server) runs thousands of
threads in one process: whatever a run keeps after it ends, per thread, is
memory the process holds and objects the collector walks. Each run here is
bench_fusion's: the demo's two turns on a new thread, the default chain
compiled (`fused`) with the local sandbox provider, and the bare agent as the
baseline, with no saver or LangGraph's `InMemorySaver` (whose checkpoints are
the history a thread must keep, so they are counted too).

After `--warmup` runs (imports, first-call caches) the process is collected
and measured, `--runs` runs on new threads follow, and it is collected and
measured again. Reported per run: the growth of `gc.get_objects()` (objects the
collector tracks), of the bytes tracemalloc sees, and the young (generation 0)
and middle collections the runs triggered; `--sites` lists the allocation
sites whose retained bytes grew most (the innermost project frames).

The scripted models record every request for tests to read; that record is
the test model's, not the chain's, so it is kept to one request here. Bounded
caches (`MessageMemo`, `HistoryFold`, input_sanitization's ledgers, the
thread-paths cache) grow until they reach their bounds, so a short run shows
them filling: what remains once they are full is the true per-thread leak.
"""

from __future__ import annotations

import argparse
import collections
import gc
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import AntlerRunner, BareRunner, counting_saver

PROJECT_DIRS = ("/core/", "/plugins/", "/contrib/")


def _record_one_request() -> None:
    """Keep the scripted models' request record to its last entry (see the module doc)."""
    from antler.runtime.models import scripted

    original = scripted._ReplayState.__init__
    if getattr(original, "_one_request", False):
        return

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.requests = collections.deque(maxlen=1)

    init._one_request = True  # type: ignore[attr-defined]
    scripted._ReplayState.__init__ = init  # type: ignore[method-assign]


def measure(kind: str, saver_kind: str, warmup: int, runs: int, sites: int,
            ) -> dict[str, Any]:
    """Retention per run of one runner (`default` or `bare`) with one saver."""
    base = Path(tempfile.mkdtemp(prefix="bench-retention-"))
    saver, _counter, close = counting_saver(saver_kind, base)
    total = warmup + runs
    runner: Any = (BareRunner(saver, total, base) if kind == "bare"
                   else AntlerRunner("default", "fused", saver, base, total))
    try:
        for _ in range(warmup):
            runner.prepare()()
        gc.collect()
        tracemalloc.start(12)
        before = tracemalloc.take_snapshot()
        objects = len(gc.get_objects())
        collections_before = [stat["collections"] for stat in gc.get_stats()]
        for _ in range(runs):
            runner.prepare()()
        collections_after = [stat["collections"] for stat in gc.get_stats()]
        gc.collect()
        grown = len(gc.get_objects()) - objects
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
    finally:
        runner.close()
        close()
    stats = after.compare_to(before, "traceback")
    by_site: collections.Counter[str] = collections.Counter()
    for stat in stats:
        frames = [frame for frame in stat.traceback
                  if any(part in frame.filename for part in PROJECT_DIRS)]
        site = " <- ".join(f"{_short(frame.filename)}:{frame.lineno}"
                           for frame in reversed(frames[-2:])) or "(outside the project)"
        by_site[site] += stat.size_diff
    return {
        "objects": grown / runs,
        "bytes": sum(stat.size_diff for stat in stats) / runs,
        "young": (collections_after[0] - collections_before[0]) / runs,
        "middle": (collections_after[1] - collections_before[1]) / runs,
        "sites": [(site, size / runs) for site, size in by_site.most_common(sites)],
    }


def _short(filename: str) -> str:
    for part in PROJECT_DIRS:
        if part in filename:
            return part.strip("/") + "/" + filename.rsplit(part, 1)[1]
    return filename


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--saver", nargs="+", default=["none", "memory"],
                        choices=["none", "memory"])
    parser.add_argument("--sites", type=int, default=8)
    args = parser.parse_args(argv)
    _record_one_request()
    print(f"{'saver':7s} {'chain':8s} {'objects/run':>12s} {'KB/run':>8s} "
          f"{'young gc/run':>13s} {'gen1 gc/run':>12s}")
    for saver_kind in args.saver:
        for kind in ("bare", "default"):
            row = measure(kind, saver_kind, args.warmup, args.runs, args.sites)
            print(f"{saver_kind:7s} {kind:8s} {row['objects']:12.1f} "
                  f"{row['bytes'] / 1024:8.1f} {row['young']:13.2f} {row['middle']:12.2f}",
                  flush=True)
            if kind == "default":
                for site, size in row["sites"]:
                    print(f"    {size / 1024:7.2f} KB/run  {site}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
