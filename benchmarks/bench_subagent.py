"""Benchmark: a delegated task (the subagent chain) against a bare subagent.

    python -m benchmarks.bench_subagent [--runs N] [--warmup N] [--scenario alone|demo]

`--scenario alone` (default) builds the default chain's subagent exactly as
the lead's `task` tool builds it (`chain="subagent"`, no checkpointer, the
demo's services with the local sandbox provider pinned) and a bare LangChain
`create_agent` with no middleware and no tools, both on the demo's subagent
script, and times four things interleaved, on the calling thread's CPU clock
(`time.thread_time`: a subagent run's steps all run on the calling thread):

- `graph`: the subagent's graph invoked as the `task` tool invokes it (same
  context, config and input), against the bare agent's `invoke`;
- `task`: the whole delegation, the `task` tool's function called with a
  `ToolRuntime` as the tools node passes it (building the context and config,
  running the graph, the result's fields), against the bare agent's `task`
  stand-in of `bench_fusion`.

`--scenario demo` runs the demo's two turns as `bench_fusion` does (default
chain, fused, in-memory saver, against the bare agent with stand-in tools) and
times only the `task` tool call inside each run, on the tool's thread: the
delegation as the lead's tools node runs it (the parent run's config and
callbacks included).

Reported: the median microseconds of each row, its difference from the bare
row and their ratio; interleaving makes load on the machine affect both alike,
and CPU time moves less with it than wall time. Repeat a figure before trusting
it on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import (
    AntlerRunner,
    BareRunner,
    NullQueue,
    chain_config,
    counting_saver,
    local_provider,
    scripted,
)

PROMPT = "Summarise the notes on southern revenue."


def build_subagent(base: Path, runs: int) -> Any:
    """The default chain's subagent, built as the lead's `task` tool builds it."""
    from antler.plugin_api.context import MEMORY_QUEUE, SANDBOX_PROVIDER
    from antler.runtime.agent import create_agent
    from antler.runtime.demo import SUBAGENT_SCRIPT

    config, runtime = chain_config("default")
    services = {MEMORY_QUEUE: NullQueue(), SANDBOX_PROVIDER: local_provider()}
    return create_agent(config, chain="subagent", model=scripted(SUBAGENT_SCRIPT * runs),
                        checkpointer=False, base_dir=base, services=services,
                        runtime=runtime.model_copy(update={"subagents_enabled": False}))


def build_bare(runs: int) -> Any:
    from langchain.agents import create_agent

    from antler.runtime.demo import SUBAGENT_SCRIPT

    return create_agent(model=scripted(SUBAGENT_SCRIPT * runs), tools=[])


def tool_runtime(context: Any, call_id: str) -> Any:
    """A `ToolRuntime` as the lead's tools node hands one to the `task` tool."""
    from langchain.tools import ToolRuntime

    return ToolRuntime(state={"messages": []}, context=context, config={},
                       stream_writer=lambda _chunk: None, tool_call_id=call_id, store=None)


def alone(runs: int, warmup: int) -> dict[str, list[float]]:
    """Per row, the CPU seconds of each timed run (the `alone` scenario)."""
    from langchain_core.messages import HumanMessage

    from antler.compat import CONFIG_KEY_DURABILITY
    from antler.runtime.delegation import make_task_tool
    from antler.runtime.runcontext import RunContext

    total = 2 * (runs + warmup)  # each agent answers a graph run and a task per round
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as base:
        sub = build_subagent(Path(base), total)
        bare = build_bare(total)
        antler_task = make_task_tool(lambda: sub).func
        bare_task = _bare_task(bare)
        parent = RunContext(thread_id="bench", user_id="bench", run_id="lead-run")
        config = {"recursion_limit": sub.recursion_limit,
                  "configurable": {CONFIG_KEY_DURABILITY: "async"}}

        def antler_graph() -> None:
            context = RunContext(thread_id="bench", user_id="bench", run_id=uuid.uuid4().hex)
            sub.graph.invoke({"messages": [HumanMessage(content=PROMPT)]}, context=context,
                             config=config)

        def bare_graph() -> None:
            bare.invoke({"messages": [{"role": "user", "content": PROMPT}]})

        def antler_delegation() -> None:
            antler_task(description="Summarise notes", prompt=PROMPT,
                        runtime=tool_runtime(parent, "call-task"))

        def bare_delegation() -> None:
            bare_task(description="Summarise notes", prompt=PROMPT)

        rows = {"bare graph": bare_graph, "antler graph": antler_graph,
                "bare task": bare_delegation, "antler task": antler_delegation}
        return _interleaved(rows, runs, warmup)


def _bare_task(subagent: Any) -> Callable[..., str]:
    """`bench_fusion`'s bare `task` stand-in (its function, without the tool wrapper)."""
    def task(description: str, prompt: str) -> str:
        result = subagent.invoke({"messages": [{"role": "user", "content": prompt}]})
        return str(result["messages"][-1].content)

    return task


def _interleaved(rows: dict[str, Callable[[], None]], runs: int,
                 warmup: int) -> dict[str, list[float]]:
    for _ in range(warmup):
        for run in rows.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in rows}
    gc.collect()
    for _ in range(runs):
        for name, run in rows.items():
            started = time.thread_time()
            run()
            times[name].append(time.thread_time() - started)
    return times


def demo(runs: int, warmup: int) -> dict[str, list[float]]:
    """Per row, the thread CPU seconds of each `task` call in the timed demo runs.

    `antler graph` is the part of `antler task` spent in the subagent's graph.
    """
    total = runs + warmup
    rows = ("bare task", "antler graph", "antler task")
    times: dict[str, list[float]] = {name: [] for name in rows}
    sinks: dict[str, list[float]] = {name: [] for name in rows}
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as base:
        root = Path(base)
        bare_saver, _, _ = counting_saver("memory", root)
        antler_saver, _, _ = counting_saver("memory", root)
        bare = BareRunner(bare_saver, total, root / "bare")
        task = bare.graph.nodes["tools"].bound._tools_by_name["task"]
        task.func = _timed(task.func, sinks["bare task"])
        with _timing_task_tools(sinks["antler task"], sinks["antler graph"]):
            antler = AntlerRunner("default", "fused", antler_saver, root / "home", total)
        runners: dict[str, Any] = {"bare": bare, "antler": antler}
        try:
            for index in range(total):
                for runner in runners.values():
                    runner.prepare()()
                for name in rows:
                    if index >= warmup:
                        times[name].extend(sinks[name])
                    sinks[name].clear()
        finally:
            for runner in runners.values():
                runner.close()
    return times


@contextlib.contextmanager
def _timing_task_tools(task_sink: list[float], graph_sink: list[float]) -> Iterator[None]:
    """The `task` tool of an Antler agent built in the block records its calls' times in
    `task_sink`, its subagent's graph runs in `graph_sink`."""
    from antler.runtime import agent

    make = agent.make_task_tool

    def timed_make(build_subagent: Callable[[], Any]) -> Any:
        def build() -> Any:
            sub = build_subagent()
            sub.graph.invoke = _timed(sub.graph.invoke, graph_sink)
            return sub

        tool = make(build)
        tool.func = _timed(tool.func, task_sink)
        return tool

    agent.make_task_tool = timed_make
    try:
        yield
    finally:
        agent.make_task_tool = make


def _timed(function: Callable[..., Any], sink: list[float]) -> Callable[..., Any]:
    """`function`, recording the thread CPU time of every call into `sink`."""
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            sink.append(time.thread_time() - started)

    return timed


def report(times: dict[str, list[float]]) -> str:
    medians = {name: statistics.median(values) * 1e6 for name, values in times.items()}
    lines = [f"  {'row':<14} {'median us':>10} {'p25':>9} {'p75':>9}"]
    for name, values in times.items():
        q = statistics.quantiles([v * 1e6 for v in values], n=4)
        lines.append(f"  {name:<14} {medians[name]:>10.0f} {q[0]:>9.0f} {q[2]:>9.0f}")
    for kind in ("graph", "task"):
        bare, antler = medians.get(f"bare {kind}"), medians.get(f"antler {kind}")
        if bare and antler:
            lines.append(f"  {kind}: antler - bare = {antler - bare:.0f} us, "
                         f"antler / bare = {antler / bare:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="timed runs per row")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs per row first")
    parser.add_argument("--scenario", choices=("alone", "demo"), default="alone")
    args = parser.parse_args(argv)
    times = (alone if args.scenario == "alone" else demo)(args.runs, args.warmup)
    print(f"Delegated task, scenario {args.scenario}: thread CPU time, median of {args.runs} "
          f"interleaved runs per row (after {args.warmup} warm-up runs); load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(report(times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
