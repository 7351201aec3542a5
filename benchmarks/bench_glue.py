"""Benchmark: the compiler's own glue around the fused hooks, per run of the demo.

    python -m benchmarks.bench_glue [--runs N] [--chain default|all-optional]

The compiled chain runs the hooks of a fused node one after another on a view
of the state (`antler.compiler.nodes`): the input step with the
`before_agent` hooks (`AgentStart`), the model node with the `before_model`
and `after_model` hooks around LangChain's model node (`ModelHooks`), and any
other fused node. The glue is what those nodes do besides the steps
themselves: copying the view for each member, applying each member's writes
to it as the channels would, the member's config, the node's writes. It is
measured as the thread CPU time of each fused node's run minus the time inside
its steps (each hook, and the model call with its wrap layers), summed over
the lead's and the subagent's nodes, and reported per run beside a bare
`create_agent`'s whole run (bare's run time, CPU of the process, measured
interleaved). The two timer reads around each step add about a microsecond
per step to the glue figure.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import AntlerRunner, BareRunner, counting_saver
from benchmarks.clock import clock as clock_of


class GlueClock:
    """Thread CPU time inside the fused nodes' runs, and inside their steps."""

    def __init__(self) -> None:
        self.runner = 0.0
        self.steps = 0.0
        self._depth = threading.local()
        self._lock = threading.Lock()

    def _add(self, which: str, seconds: float) -> None:
        with self._lock:
            setattr(self, which, getattr(self, which) + seconds)

    def around_runner(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """`method` (a node's `run`) timed when it is the outermost on its thread."""
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "value", 0)
            self._depth.value = depth + 1
            started = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth.value = depth
                if depth == 0:
                    self._add("runner", time.thread_time() - started)
        return timed

    def around_step(self, invoke: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(invoke)
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "value", 0)
            self._depth.value = 0  # a node run inside a step (a subagent's) counts on its own
            started = time.thread_time()
            try:
                return invoke(*args, **kwargs)
            finally:
                self._depth.value = depth
                self._add("steps", time.thread_time() - started)
        return timed

    def install(self) -> None:
        from antler.compiler import model_node, start_node, steps

        steps._invoke = self.around_step(steps._invoke)
        for cls in (steps.StepRunner, start_node.AgentStart, model_node.ModelHooks):
            cls.run = self.around_runner(cls.run)  # type: ignore[method-assign]

    @property
    def glue(self) -> float:
        return self.runner - self.steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chain", choices=("default", "all-optional"), default="default")
    args = parser.parse_args(argv)
    watch = GlueClock()
    watch.install()
    process = clock_of("cpu")
    load_before = os.getloadavg()[0]
    total = args.runs + args.warmup
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as scratch:
        base = Path(scratch)
        saver, _c, close = counting_saver("memory", base)
        bare_saver, _b, close_bare = counting_saver("memory", base / "bare")
        (base / "bare").mkdir()
        chain = AntlerRunner(args.chain, "fused", saver, base / "home", total)
        bare = BareRunner(bare_saver, total, base / "bare")
        for _ in range(args.warmup):
            chain.prepare()()
            bare.prepare()()
        glue: list[float] = []
        bare_ms: list[float] = []
        gc.collect()
        for _ in range(args.runs):
            run = chain.prepare()
            before = watch.glue
            run()
            glue.append((watch.glue - before) * 1000)
            run = bare.prepare()
            started = process()
            run()
            bare_ms.append((process() - started) * 1000)
        chain.close()
        close()
        close_bare()
    median_glue, median_bare = statistics.median(glue), statistics.median(bare_ms)
    print(f"Compiler glue in the {args.chain} chain's fused nodes, median of {args.runs} runs "
          f"of the demo (in-memory saver), thread CPU; load average {load_before:.1f} at the "
          f"start, {os.getloadavg()[0]:.1f} at the end")
    print(f"  glue {median_glue:.3f} ms per run = {median_glue / median_bare:.3f}x a bare "
          f"run ({median_bare:.2f} ms CPU, interleaved)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
