"""Benchmark: quiet nodes against LangGraph's own, on the demo, in one process.

    python -m benchmarks.bench_quietnodes [--runs N] [--saver memory|none ...]

Builds the default chain twice, as `bench_fusion` builds it (fused, local
provider): once as `antler.agent.create_agent` builds it (every node a
`QuietSeq`, `antler.compiler.quietnodes`) and once with `quiet_nodes` turned off
while the agent and its subagent are built (LangGraph's `RunnableSeq` nodes), and
runs both and a bare `create_agent` interleaved (the order reversed every other
round). Reported per saver: the median CPU milliseconds of the process per run,
each chain's median ratio to the bare run of its round, and the median paired
difference (quiet minus LangGraph's nodes).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import AntlerRunner, BareRunner


@contextlib.contextmanager
def langgraph_nodes() -> Iterator[None]:
    """Agents built inside keep LangGraph's own nodes (no `quiet_nodes`)."""
    import antler.compiler as compiler
    import antler.runtime.agent as agent

    saved = agent.quiet_nodes, compiler.quiet_nodes
    agent.quiet_nodes = compiler.quiet_nodes = lambda graph: []  # type: ignore[assignment]
    try:
        yield
    finally:
        agent.quiet_nodes, compiler.quiet_nodes = saved  # type: ignore[assignment]


def measure(saver: str, runs: int, warmup: int, base: Path) -> str:
    from langgraph.checkpoint.memory import InMemorySaver

    def make() -> Any:
        return InMemorySaver() if saver == "memory" else None

    total = runs + warmup
    quiet = AntlerRunner("default", "fused", make(), base / f"quiet-{saver}", total)
    with langgraph_nodes():
        plain = AntlerRunner("default", "fused", make(), base / f"plain-{saver}", total)
        for _ in range(warmup):  # the subagent is built on the first task
            plain.prepare()()
    bare = BareRunner(make(), total, base / f"bare-{saver}")
    for _ in range(warmup):
        quiet.prepare()()
        bare.prepare()()
    rows: dict[str, list[float]] = {"quiet": [], "langgraph": [], "bare": []}
    runners = {"quiet": quiet, "langgraph": plain, "bare": bare}
    gc.collect()
    for round_ in range(runs):
        order = list(runners) if round_ % 2 == 0 else list(reversed(runners))
        for name in order:
            run = runners[name].prepare()
            started = time.process_time()
            run()
            rows[name].append((time.process_time() - started) * 1000)
    quiet.close()
    plain.close()
    median = {name: statistics.median(times) for name, times in rows.items()}
    ratio = {name: statistics.median(a / b for a, b in zip(rows[name], rows["bare"],
                                                             strict=True))
             for name in ("quiet", "langgraph")}
    paired = statistics.median(a - b for a, b in zip(rows["quiet"], rows["langgraph"],
                                                     strict=True))
    return (f"  {saver:6s} quiet {median['quiet']:6.2f} ms ({ratio['quiet']:.3f}x bare)  "
            f"langgraph's {median['langgraph']:6.2f} ms ({ratio['langgraph']:.3f}x)  "
            f"bare {median['bare']:6.2f} ms  quiet - langgraph's {paired:+.3f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--saver", nargs="+", choices=("memory", "none"),
                        default=["memory", "none"])
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as scratch:
        lines = [measure(saver, args.runs, args.warmup, Path(scratch))
                 for saver in args.saver]
    print(f"Quiet nodes against LangGraph's own, default chain (fused, local provider), "
          f"median of {args.runs} interleaved runs, process CPU; load average {load:.1f} "
          f"at the start, {os.getloadavg()[0]:.1f} at the end")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
