"""Benchmark: a delegated task (the subagent chain) against a bare subagent.

    python -m benchmarks.bench_subagent [--runs N] [--warmup N]
                                        [--scenario alone|demo|layers] [--no-gc]

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
  stand-in of `bench_fusion`;
- `tool call`: the same delegation through the tool's `invoke` with a tool call,
  as the tools node calls it (LangChain's tool run around the function: its
  callback run, the input's validation, the injected runtime), the `task` tool
  as the agent gives it to the tools node (`with_resolved_signatures`) against
  the bare stand-in made a LangChain tool as `bench_fusion` makes it.

`--scenario demo` runs the demo's two turns as `bench_fusion` does (default
chain, fused, in-memory saver, against the bare agent with stand-in tools) and
times only the `task` tool call inside each run, on the tool's thread: the
delegation as the lead's tools node runs it (the parent run's config and
callbacks included).

`--scenario layers` runs the `alone` graphs and says where the difference
goes: the thread CPU of each layer of one run (the compiled graph's input step
with the `before_agent` hooks, its model node, LangChain's model node inside
it, the fused `wrap_model_call` chain, the chat model's `invoke`; the rest is
LangGraph's loop) and each plugin hook's own time (`bench_hooks`'s timing,
which adds about a microsecond per hook call).

Reported: the median microseconds of each row, its difference from the bare
row and their ratio; interleaving makes load on the machine affect both alike,
and CPU time moves less with it than wall time. `--no-gc` pauses the cyclic
garbage collector during the timed runs, which tells the code's own cost from
the collections its allocations trigger. Repeat a figure before trusting it
on a shared machine.
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
COLLECT = [True]
"""Whether the garbage collector runs during the timed runs (`--no-gc` clears it)."""


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


class Subagents:
    """The default chain's subagent and a bare `create_agent` one (no middleware, no
    tools), each run as the `task` tool runs its subagent (`graph`) and through a whole
    delegation (`task`)."""

    def __init__(self, base: Path, runs: int) -> None:
        from langchain.agents import create_agent
        from langchain_core.tools import tool

        from antler.compat import CONFIG_KEY_DURABILITY
        from antler.plugin_api.toolargs import with_resolved_signatures
        from antler.runtime.delegation import make_task_tool
        from antler.runtime.demo import SUBAGENT_SCRIPT

        self.sub = build_subagent(base, runs)
        self.bare = create_agent(model=scripted(SUBAGENT_SCRIPT * runs), tools=[])
        self.config = {"recursion_limit": self.sub.recursion_limit,
                       "configurable": {CONFIG_KEY_DURABILITY: "async"}}
        self.antler_tool = with_resolved_signatures([make_task_tool(lambda: self.sub)])[0]
        self.antler_task = self.antler_tool.func
        self.bare_task = _bare_task(self.bare)
        self.bare_tool = tool("task", description="Delegate a task to a subagent.")(
            self.bare_task)

    def antler_graph(self) -> None:
        from langchain_core.messages import HumanMessage

        from antler.contracts.runcontext import RunContext

        context = RunContext(thread_id="bench", user_id="bench", run_id=uuid.uuid4().hex)
        self.sub.graph.invoke({"messages": [HumanMessage(content=PROMPT)]}, context=context,
                              config=self.config)

    def bare_graph(self) -> None:
        self.bare.invoke({"messages": [{"role": "user", "content": PROMPT}]})

    def antler_delegation(self) -> None:
        self.antler_task(description="Summarise notes", prompt=PROMPT, runtime=_runtime())

    def bare_delegation(self) -> None:
        self.bare_task(description="Summarise notes", prompt=PROMPT)

    def antler_tool_call(self) -> None:
        self.antler_tool.invoke({"name": "task", "id": "call-task", "type": "tool_call",
                                 "args": {"description": "Summarise notes", "prompt": PROMPT,
                                          "runtime": _runtime()}})

    def bare_tool_call(self) -> None:
        self.bare_tool.invoke({"name": "task", "id": "call-task", "type": "tool_call",
                               "args": {"description": "Summarise notes", "prompt": PROMPT}})

    def close(self) -> None:
        self.sub.close()


def _runtime() -> Any:
    """The `ToolRuntime` the lead's tools node would inject into a `task` call."""
    from langchain.tools import ToolRuntime

    from antler.contracts.runcontext import RunContext

    parent = RunContext(thread_id="bench", user_id="bench", run_id="lead-run")
    return ToolRuntime(state={"messages": []}, context=parent, config={},
                       stream_writer=lambda _chunk: None, tool_call_id="call-task", store=None)


def _bare_task(subagent: Any) -> Callable[..., str]:
    """`bench_fusion`'s bare `task` stand-in (its function, without the tool wrapper)."""
    def task(description: str, prompt: str) -> str:
        result = subagent.invoke({"messages": [{"role": "user", "content": prompt}]})
        return str(result["messages"][-1].content)

    return task


def alone(runs: int, warmup: int) -> dict[str, list[float]]:
    """Per row, the CPU seconds of each timed run (the `alone` scenario)."""
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as base:
        pair = Subagents(Path(base), 3 * (runs + warmup))  # a graph, task and tool call a round
        try:
            rows = {"bare graph": pair.bare_graph, "antler graph": pair.antler_graph,
                    "bare task": pair.bare_delegation, "antler task": pair.antler_delegation,
                    "bare tool call": pair.bare_tool_call,
                    "antler tool call": pair.antler_tool_call}
            for _ in range(warmup):
                for run in rows.values():
                    run()
            times: dict[str, list[float]] = {name: [] for name in rows}
            with _collecting():
                for _ in range(runs):
                    for name, run in rows.items():
                        started = time.thread_time()
                        run()
                        times[name].append(time.thread_time() - started)
        finally:
            pair.close()
    return times


@contextlib.contextmanager
def _collecting() -> Iterator[None]:
    """The timed runs: from a collected heap, with the collector paused under `--no-gc`."""
    gc.collect()
    if COLLECT[0]:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def demo(runs: int, warmup: int) -> dict[str, list[float]]:
    """Per row, the thread CPU seconds of each `task` call in the timed demo runs.

    `antler graph` is the part of `antler task` spent in the subagent's graph.
    """
    total = runs + warmup
    rows = ("bare task", "antler graph", "antler task")
    sinks: dict[str, list[float]] = {name: [] for name in rows}
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as base:
        root = Path(base)
        bare_saver, _, _ = counting_saver("memory", root)
        antler_saver, _, _ = counting_saver("memory", root)
        bare = BareRunner(bare_saver, total, root / "bare")
        task = bare.graph.nodes["tools"].bound._tools_by_name["task"]
        task.func = _timed(task.func, sinks["bare task"].append)
        with _timing_task_tools(sinks["antler task"], sinks["antler graph"]):
            antler = AntlerRunner("default", "fused", antler_saver, root / "home", total)
        runners: dict[str, Any] = {"bare": bare, "antler": antler}
        try:
            for _ in range(warmup):
                for runner in runners.values():
                    runner.prepare()()
            with _collecting():
                for _ in range(runs):
                    for runner in runners.values():
                        runner.prepare()()
        finally:
            for runner in runners.values():
                runner.close()
    return {name: sinks[name][-runs:] for name in rows}  # one `task` call per demo run


@contextlib.contextmanager
def _timing_task_tools(task_sink: list[float], graph_sink: list[float]) -> Iterator[None]:
    """The `task` tool of an Antler agent built in the block records its calls' times in
    `task_sink`, its subagent's graph runs in `graph_sink`."""
    from antler.runtime import agent

    make = agent.make_task_tool

    def timed_make(build_subagent: Callable[[], Any]) -> Any:
        def build() -> Any:
            sub = build_subagent()
            sub.graph.invoke = _timed(sub.graph.invoke, graph_sink.append)
            return sub

        tool = make(build)
        tool.func = _timed(tool.func, task_sink.append)
        return tool

    agent.make_task_tool = timed_make
    try:
        yield
    finally:
        agent.make_task_tool = make


LAYERS = (("antler.compiler.start_node", "AgentStart", "run", "input step"),
          ("antler.compiler.model_node", "ModelHooks", "run", "model node"),
          ("antler.compiler.model_node", "_ModelCall", "invoke", "LangChain's model node"),
          ("antler.compiler.wraps", "FusedWraps", "_call", "wrap_model_call chain"),
          ("langchain_core.language_models.chat_models", "BaseChatModel", "invoke",
           "chat model invoke"))
"""(module, class, method, row): the layers of a run that `--scenario layers` times."""


def layers(runs: int, warmup: int) -> dict[str, list[float]]:
    """Per row, the thread CPU seconds of each timed run of the `alone` graphs (layers
    and hooks included)."""
    import collections
    import importlib

    from benchmarks.bench_hooks import instrument

    hooks = instrument()  # before any agent is built: it times the middleware classes
    spent: collections.Counter[str] = collections.Counter()

    def timing(row: str) -> Callable[[float], None]:
        return lambda seconds: spent.update({row: seconds})

    for module, cls, method, row in LAYERS:
        owner = getattr(importlib.import_module(module), cls)
        setattr(owner, method, _timed(getattr(owner, method), timing(row)))
    times: dict[str, list[float]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as base:
        pair = Subagents(Path(base), runs + warmup)
        node = pair.bare.nodes["model"].bound
        node.func = _timed(node.func, timing("LangChain's model node"))
        try:
            for _ in range(warmup):
                pair.bare_graph()
                pair.antler_graph()
            with _collecting():
                for _ in range(runs):
                    for name, run in (("bare", pair.bare_graph), ("antler", pair.antler_graph)):
                        spent.clear()
                        hooks.clear()
                        started = time.thread_time()
                        run()
                        times[f"{name} run"].append(time.thread_time() - started)
                        for row, seconds in spent.items():
                            times[f"{name} {row}"].append(seconds)
                    times["antler hooks (own time)"].append(sum(hooks.seconds.values()))
                    for (cls, hook), seconds in hooks.seconds.items():
                        times[f"antler . {cls}.{hook}"].append(seconds)
        finally:
            pair.close()
    return times


def _timed(function: Callable[..., Any], record: Callable[[float], Any]) -> Callable[..., Any]:
    """`function`, handing the thread CPU seconds of every call to `record`."""
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            record(time.thread_time() - started)

    return timed


def report(times: dict[str, list[float]]) -> str:
    medians = {name: statistics.median(values) * 1e6 for name, values in times.items()}
    width = max(len(name) for name in times) + 2
    lines = [f"  {'row':<{width}} {'median us':>10} {'p25':>9} {'p75':>9}"]
    for name, values in times.items():
        q = statistics.quantiles([v * 1e6 for v in values], n=4)
        lines.append(f"  {name:<{width}} {medians[name]:>10.0f} {q[0]:>9.0f} {q[2]:>9.0f}")
    for kind in ("graph", "task", "tool call", "run"):
        bare, antler = medians.get(f"bare {kind}"), medians.get(f"antler {kind}")
        if bare and antler:
            lines.append(f"  {kind}: antler - bare = {antler - bare:.0f} us, "
                         f"antler / bare = {antler / bare:.2f}x")
    return "\n".join(lines)


SCENARIOS = {"alone": alone, "demo": demo, "layers": layers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="timed runs per row")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs per row first")
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), default="alone")
    parser.add_argument("--no-gc", action="store_true",
                        help="pause the garbage collector during the timed runs")
    args = parser.parse_args(argv)
    COLLECT[0] = not args.no_gc
    times = SCENARIOS[args.scenario](args.runs, args.warmup)
    print(f"Delegated task, scenario {args.scenario}: thread CPU time, median of {args.runs} "
          f"interleaved runs per row (after {args.warmup} warm-up runs"
          f"{'; collector paused' if args.no_gc else ''}); load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(report(times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
