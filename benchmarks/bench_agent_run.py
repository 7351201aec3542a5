"""Benchmark: a run through `AntlerAgent.invoke` against the same run on `agent.graph.invoke`.

    python -m benchmarks.bench_agent_run [--runs N] [--warmup N] [--history 0,200]
                                         [--saver memory sqlite] [--clock cpu|wall] [--async]

`antler run` (through `AntlerAgent.stream`) and programs built on
`antler.agent.create_agent` run a turn through `AntlerAgent`, whose `invoke`,
`stream`, `ainvoke` and `astream` do work of their own around the graph: each
checks the input (and, for a message that carries an id, whether the thread's
history already has that id), takes the thread's owner record and run lock,
and settles what a stopped run left behind before the graph reads the
thread's checkpoint itself. The other benchmarks time `agent.graph.invoke`;
this one measures what `invoke` adds.

Both variants are the default lead chain (subagents off, commands in the
local sandbox provider, loop detection's thresholds out of reach so that
repeating one call stays a normal turn), built by `create_agent` with
`checkpointer="memory"` or `"sqlite"` exactly as `antler run` builds them:

- `graph`: `agent.graph.invoke({"messages": [message]}, config, context)`;
- `agent`: `agent.invoke(message, thread_id=..., user_id=...)`.

With `--async` the same pair runs on an event loop: `graph.ainvoke` against
`agent.ainvoke` (each run in its own `asyncio.run`, alike for both).

One run is one turn: a user message, one `ls` call and the answer (scripted
models; no network). Threads: `fresh` (each run a new thread) or a thread
seeded with H earlier messages (`--history`, default 200) that every run adds
its turn to. Inputs: `text` (a string, as `antler run` sends) and `id` (a
`HumanMessage` with an id of its own, as API clients send, which makes
`invoke` check the id against the thread's history).

Reported per cell: the median ms per run on both clocks (`benchmarks.clock`:
`cpu` is the CPU time of the process, its threads and child processes), the
ratio of `agent` to `graph` with a 90% bootstrap interval (`benchmarks.interval`)
and the ms `invoke` adds. Runs of all cells are interleaved, so load on the
machine moves them alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import os
import statistics
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import NullQueue, chain_config, local_provider, scripted
from benchmarks.bench_long_thread import TEXT, _history
from benchmarks.clock import CLOCKS
from benchmarks.clock import clock as clock_of
from benchmarks.interval import median_ratio_interval

SAVERS = ("memory", "sqlite")
VARIANTS = ("graph", "agent")
INPUTS = ("text", "id")
USER = "bench"


@dataclass
class Cell:
    saver: str
    history: int | None
    """Earlier messages on the thread; None: a fresh thread per run."""
    message: str
    variant: str
    samples: list[float] = dataclasses.field(default_factory=list)
    other: list[float] = dataclasses.field(default_factory=list)

    @property
    def thread(self) -> str:
        return "fresh" if self.history is None else f"H={self.history}"


def _script(turns: int) -> list[Any]:
    one = [{"content": "", "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data"}}]},
           "Done: nothing there yet. " + TEXT]
    return one * turns


def _config() -> tuple[Any, Any]:
    from antler.plugins.loop_detection.config import LoopDetectionConfig

    config, runtime = chain_config("default")
    loops = config.sections.get("loop_detection") or LoopDetectionConfig()
    sections = {**config.sections, "loop_detection": loops.model_copy(update={
        "warn_threshold": 10**6, "hard_limit": 10**6, "window_size": 10**6,
        "tool_freq_warn": 10**6, "tool_freq_hard_limit": 10**6})}
    return (dataclasses.replace(config, sections=sections),
            runtime.model_copy(update={"subagents_enabled": False}))


class Runner:
    """One default-chain agent and its threads, run one way (`graph` or `agent`)."""

    def __init__(self, cell: Cell, home: Path, turns: int, use_async: bool = False) -> None:
        from antler.plugin_api.context import (
            MEMORY_MODEL,
            MEMORY_QUEUE,
            SANDBOX_PROVIDER,
            TITLE_MODEL,
        )
        from antler.runtime.agent import create_agent

        self.cell = cell
        self.use_async = use_async
        config, runtime = _config()
        services = {TITLE_MODEL: scripted(["A title"] * (turns + 2)),
                    MEMORY_MODEL: scripted(["[]"]), MEMORY_QUEUE: NullQueue(),
                    SANDBOX_PROVIDER: local_provider()}
        self.agent = create_agent(config, model=scripted(_script(turns + 1)), runtime=runtime,
                                  services=services, base_dir=home, checkpointer=cell.saver)
        self.count = 0
        self.long_thread = "long"
        if cell.history is not None:
            if cell.history:
                self.agent.graph.update_state(self.agent.run_config(self.long_thread),
                                              {"messages": _history(cell.history)},
                                              as_node="model")
            self.prepare()()  # claims the thread; every plugin sees the history once

    def prepare(self) -> Callable[[], None]:
        from langchain_core.messages import HumanMessage

        self.count += 1
        thread = f"fresh-{self.count}" if self.cell.history is None else self.long_thread
        text = f"turn {self.count}: what is in the user data folder?"
        message: Any = text if self.cell.message == "text" \
            else HumanMessage(text, id=str(uuid.uuid4()))
        agent = self.agent
        payload = {"messages": [HumanMessage(text) if isinstance(message, str) else message]}
        config = agent.run_config(thread)
        if self.use_async:
            if self.cell.variant == "agent":
                return lambda: asyncio.run(agent.ainvoke(message, thread_id=thread,
                                                         user_id=USER))
            return lambda: asyncio.run(agent.graph.ainvoke(
                payload, config=config, context=agent.context(thread, USER)))
        if self.cell.variant == "agent":
            return lambda: agent.invoke(message, thread_id=thread, user_id=USER)
        return lambda: agent.graph.invoke(payload, config=config,
                                          context=agent.context(thread, USER))

    def close(self) -> None:
        self.agent.close()


def measure(savers: tuple[str, ...], histories: tuple[int | None, ...], runs: int,
            warmup: int, clock: str = "cpu", use_async: bool = False) -> list[Cell]:
    """Every cell, one run of each in turn per round."""
    cells = [Cell(saver, history, message, variant) for saver in savers
             for history in histories for message in INPUTS for variant in VARIANTS]
    main, other = clock_of(clock), clock_of("wall" if clock == "cpu" else "cpu")
    with contextlib.ExitStack() as stack:
        runners = []
        for cell in cells:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="antler-run-")))
            runner = Runner(cell, home, runs + warmup + 1, use_async)
            stack.callback(runner.close)
            runners.append(runner)
        for _ in range(warmup):
            for runner in runners:
                runner.prepare()()
        gc.collect()
        for _ in range(runs):
            for runner in runners:
                run = runner.prepare()
                started, started_other = main(), other()
                run()
                runner.cell.samples.append((main() - started) * 1000)
                runner.cell.other.append((other() - started_other) * 1000)
    return cells


def report(cells: list[Cell], clock: str = "cpu") -> str:
    other = "wall" if clock == "cpu" else "cpu"
    lines = [f"  {'saver':<7} {'thread':<7} {'input':<5} {'graph ' + clock:>11} "
             f"{'agent ' + clock:>11} {'x graph':>8} {'90% interval':>13} {'+ms':>6} "
             f"{'x graph ' + other:>13}"]
    for graph, agent in zip(cells[::2], cells[1::2], strict=True):
        base, ms = statistics.median(graph.samples), statistics.median(agent.samples)
        interval = median_ratio_interval(agent.samples, graph.samples)
        spread = f"{interval[0]:.2f}-{interval[1]:.2f}x" if interval else "-"
        other_ratio = statistics.median(agent.other) / statistics.median(graph.other)
        lines.append(f"  {graph.saver:<7} {graph.thread:<7} {graph.message:<5} {base:>11.1f} "
                     f"{ms:>11.1f} {ms / base:>7.2f}x {spread:>13} {ms - base:>6.1f} "
                     f"{other_ratio:>12.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per cell")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per cell first")
    parser.add_argument("--history", default="200",
                        help="comma-separated earlier-message counts of the long thread "
                             "(a fresh thread per run is always measured)")
    parser.add_argument("--saver", choices=SAVERS, nargs="+", default=list(SAVERS))
    parser.add_argument("--clock", choices=CLOCKS, default="cpu",
                        help="the clock of the ratios (both are reported)")
    parser.add_argument("--async", dest="use_async", action="store_true",
                        help="ainvoke against graph.ainvoke instead")
    args = parser.parse_args(argv)
    histories: tuple[int | None, ...] = (None, *(int(h) for h in args.history.split(",")
                                                 if h.strip()))
    load_before = os.getloadavg()[0]
    cells = measure(tuple(args.saver), histories, args.runs, args.warmup, args.clock,
                    args.use_async)
    call = "ainvoke" if args.use_async else "invoke"
    print(f"AntlerAgent.{call} against agent.graph.{call}, default chain: median of "
          f"{args.runs} interleaved runs per cell (after {args.warmup} warm-up runs); one run "
          f"= one turn with one tool call; load average {load_before:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(report(cells, args.clock))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
