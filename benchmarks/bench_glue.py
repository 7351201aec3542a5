"""Benchmark: the compiler's own glue around the fused hooks, per run of the demo.

    python -m benchmarks.bench_glue [--runs N] [--chain default|all-optional] [--instructions]

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
interleaved). A step is timed from `_invoke` on, or, for a hook `run_steps`
calls itself (`Step.direct`), from the hook's call on: the member's config and
state copy then count as glue. What the wrappers timing the steps do outside
their timer reads counts as glue: about 0.5 us per step, 32 us per run of the
demo (each thread keeps its own times, so no lock is taken; with one, it was
1.3 us per step). The fused nodes' whole time (steps included) is reported
too: it compares two versions of the glue without depending on where a step's
timer starts.

`--instructions` counts instead what the load on a shared machine does not
move: the chain's runs and bare's (`--runs`, 5 is plenty), each in a process of
its own under valgrind's callgrind, counted around the runs only (after three
warm-up runs; worker threads included, the commands the sandbox starts not).
Two counts of the same code differ by about 1%, so a change of a tenth of a
millisecond per run shows where time medians at load 3 cannot resolve 4%.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import AntlerRunner, BareRunner, counting_saver
from benchmarks.clock import clock as clock_of


class _ThreadTimes:
    """One thread's CPU time in the fused nodes' runs and in their steps, and how deep it is
    in them: each thread adds to its own, so timing a step takes no lock."""

    __slots__ = ("depth", "in_step", "runner", "steps")

    def __init__(self) -> None:
        self.depth = 0
        self.in_step = False
        self.runner = 0.0
        self.steps = 0.0


class GlueClock:
    """Thread CPU time inside the fused nodes' runs, and inside their steps.

    Each wrapper does as little as it can outside its two timer reads: what it
    does there (the call into the wrapper, finding its thread's times) counts
    as glue.
    """

    def __init__(self) -> None:
        self._threads: list[_ThreadTimes] = []
        self._lock = threading.Lock()
        self._local = threading.local()

    def _times(self) -> _ThreadTimes:
        """This thread's times (made on its first use)."""
        try:
            times: _ThreadTimes = self._local.times
        except AttributeError:
            times = self._local.times = _ThreadTimes()
            with self._lock:
                self._threads.append(times)
        return times

    def around_runner(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """`method` (a node's `run`) timed when it is the outermost on its thread."""
        local, clock = self._local, time.thread_time

        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            times = local.times if hasattr(local, "times") else self._times()
            depth = times.depth
            times.depth = depth + 1
            if depth:  # inside a node's run (`ModelHooks.run` calls `StepRunner.run`)
                try:
                    return method(*args, **kwargs)
                finally:
                    times.depth = depth
            in_step, times.in_step = times.in_step, False  # its steps are timed again
            started = clock()
            try:
                return method(*args, **kwargs)
            finally:
                times.runner += clock() - started
                times.depth = depth
                times.in_step = in_step
        return timed

    def around_step(self, invoke: Callable[..., Any]) -> Callable[..., Any]:
        local, clock = self._local, time.thread_time

        @functools.wraps(invoke)
        def timed(*args: Any, **kwargs: Any) -> Any:
            times = local.times if hasattr(local, "times") else self._times()
            if times.in_step:  # a hook `_invoke` calls: timed with it already
                return invoke(*args, **kwargs)
            depth = times.depth
            times.depth = 0  # a node run inside a step (a subagent's) counts on its own
            times.in_step = True
            started = clock()
            try:
                return invoke(*args, **kwargs)
            finally:
                times.steps += clock() - started
                times.depth = depth
                times.in_step = False
        return timed

    def install(self) -> None:
        """Time the fused nodes' runs, `_invoke` (a step run through its runnable) and
        each hook `run_steps` calls itself (`Step.direct`, timed from the hook's call on:
        the member's config and the context variable count as glue)."""
        import antler.compiler as compiler
        from antler.compiler import model_node, start_node, steps

        steps._invoke = self.around_step(steps._invoke)
        make_step = steps.make_step

        def timed_step(*args: Any, **kwargs: Any) -> Any:
            step = make_step(*args, **kwargs)
            if step.direct is None:
                return step
            return dataclasses.replace(step, direct=self.around_step(step.direct))

        steps.make_step = compiler.make_step = timed_step  # type: ignore[attr-defined]
        for cls in (steps.StepRunner, start_node.AgentStart, model_node.ModelHooks):
            cls.run = self.around_runner(cls.run)  # type: ignore[method-assign]

    @property
    def glue(self) -> float:
        with self._lock:
            threads = list(self._threads)
        return sum(times.runner - times.steps for times in threads)

    @property
    def nodes(self) -> float:
        """Thread CPU time in the fused nodes' runs, steps included."""
        with self._lock:
            threads = list(self._threads)
        return sum(times.runner for times in threads)


def count_instructions(runs: int, chain: str) -> int:
    """Print the chain's and bare's instructions for `runs` runs of the demo, per saver."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("--instructions needs valgrind (callgrind_control) on the PATH")
        return 2
    counts: dict[tuple[str, str], int] = {}
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as scratch:
        for saver in ("memory", "none"):
            for kind in ("chain", "bare"):
                out = Path(scratch) / f"{kind}-{saver}.out"
                done = subprocess.run(
                    ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                     f"--callgrind-out-file={out}", sys.executable, "-m", "benchmarks.bench_glue",
                     "--chain", chain, "--count", kind, saver, str(runs)],
                    capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
                    check=False)
                found = re.search(r"Collected : (\d+)", done.stderr)
                if done.returncode or found is None:
                    print(f"callgrind failed for {kind} ({saver}):\n{done.stderr[-2000:]}")
                    return 1
                counts[kind, saver] = int(found.group(1))
    print(f"Instructions for {runs} runs of the demo (callgrind, whole process, counted around the "
          f"runs only, after 3 warm-up runs; PYTHONHASHSEED=0), {chain} chain (fused) and bare:")
    for saver in ("memory", "none"):
        mine, bare = counts["chain", saver], counts["bare", saver]
        print(f"  {saver:<7} chain {mine / 1e6:8.1f}M  bare {bare / 1e6:8.1f}M  "
              f"x bare {mine / bare:.3f}  excess {(mine - bare) / runs / 1e6:.2f}M per run")
    return 0


def _counted(kind: str, saver: str, runs: int, chain_name: str) -> int:
    """The runs `count_instructions` counts, in this process (run under callgrind)."""
    from langgraph.checkpoint.memory import InMemorySaver

    with tempfile.TemporaryDirectory(prefix="antler-bench-") as scratch:
        checkpointer = InMemorySaver() if saver == "memory" else None
        runner: Any = (AntlerRunner(chain_name, "fused", checkpointer, Path(scratch), runs + 3)
                       if kind == "chain" else BareRunner(checkpointer, runs + 3, Path(scratch)))
        for _ in range(3):
            runner.prepare()()
        prepared = [runner.prepare() for _ in range(runs)]
        gc.collect()
        toggle = ["callgrind_control", "-i"]
        subprocess.run([*toggle, "on", str(os.getpid())], capture_output=True, check=False)
        for run in prepared:
            run()
        subprocess.run([*toggle, "off", str(os.getpid())], capture_output=True, check=False)
        runner.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chain", choices=("default", "all-optional"), default="default")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions under callgrind instead (--runs 5 is plenty)")
    parser.add_argument("--count", nargs=3, metavar=("KIND", "SAVER", "RUNS"),
                        help=argparse.SUPPRESS)  # the runs --instructions counts
    args = parser.parse_args(argv)
    if args.count:
        kind, saver, runs = args.count
        return _counted(kind, saver, int(runs), args.chain)
    if args.instructions:
        return count_instructions(args.runs, args.chain)
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
        nodes: list[float] = []
        bare_ms: list[float] = []
        gc.collect()
        for _ in range(args.runs):
            run = chain.prepare()
            before, nodes_before = watch.glue, watch.nodes
            run()
            glue.append((watch.glue - before) * 1000)
            nodes.append((watch.nodes - nodes_before) * 1000)
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
    median_nodes = statistics.median(nodes)
    print(f"  fused nodes, steps included, {median_nodes:.3f} ms per run = "
          f"{median_nodes / median_bare:.3f}x a bare run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
