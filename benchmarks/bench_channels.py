"""Benchmark: what one more state channel costs a run, by kind.

    python -m benchmarks.bench_channels [--runs N] [--warmup N] [--keys N]
                                        [--saver none|memory ...] [--chain]

LangGraph does some work for every channel of a graph on every run and step,
whether or not anything writes it: it makes each channel from the checkpoint
when a run starts, copies all of them for every conditional edge it evaluates
(a "fresh" read), reads them for the nodes' input and the run's output, offers
each an empty update at every step and hands each to the checkpoint. This
benchmark runs the demo's two turns (`bench_fusion`'s scenario, with a `bash`
that starts no process, so only the graph's work is timed) on LangChain's
`create_agent` compiled by Antler's compiler, each variant with one middleware
that declares `--keys` extra state keys of one kind and a `before_model` hook:

- `last, idle` / `last, written`: plain keys (LangGraph's `LastValue`), never
  written, or written by the hook at every model call;
- `reducer, idle` / `reducer, written`: keys with a reducer
  (`BinaryOperatorAggregate`, a dict merged on write), idle or written;
- `untracked, written`: `UntrackedValue` keys (never checkpointed), written;
- `default chain's keys`: the default lead chain's own extra keys (its plugins'
  state schemas, reducers included), idle;
- rows marked `lean`: the same graph with its reducer channels made lean
  (`antler.compiler.leanchannels.lean_channels`, what `antler.agent.create_agent`
  builds).

The baseline is the same agent with the middleware declaring no key (and a
lean baseline for the lean rows: `messages` is a reducer channel too). Reported
per saver (`none`, LangGraph's `InMemorySaver`): the median CPU milliseconds
of a run (the process's threads; `time.process_time`) of interleaved runs,
the difference from its baseline, and that difference per key.

`--chain` measures the change on the chain users get instead: the default
lead chain as `bench_fusion` runs it (fused, local sandbox, subagent
included) as built, the same chain with LangGraph's own reducer channels put
back (lead and subagent graphs), and the bare agent, interleaved, on
`benchmarks.clock`'s CPU time, with the ratio's 90% bootstrap interval.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NotRequired

from benchmarks.bench_fusion import AntlerRunner, _scripts, _turn_one, _turn_two, scripted

KINDS = ("last, idle", "last, written", "reducer, idle", "reducer, written",
         "untracked, written")
LEAN = "lean"
BASELINE = "baseline (no key)"


def _merge(current: Any, new: Any) -> Any:
    """The reducer of the benchmark's reducer keys: a shallow dict merge."""
    return {**(current or {}), **(new or {})}


def _annotation(kind: str) -> Any:
    from langchain.agents.middleware.types import PrivateStateAttr
    from langgraph.channels import UntrackedValue

    if kind.startswith("last"):
        return NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr]]
    if kind.startswith("reducer"):
        return NotRequired[Annotated[dict[str, Any], PrivateStateAttr, _merge]]
    return NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr,
                                 UntrackedValue(dict)]]


def keyed_middleware(kind: str, keys: int) -> Any:
    """A middleware declaring `keys` state keys of `kind` (any kind with `keys=0`), with a
    `before_model` hook that writes them all when the kind says `written`."""
    from langchain.agents.middleware import AgentMiddleware, AgentState

    annotations = {f"bench_key_{i}": _annotation(kind) for i in range(keys)}
    schema = type(f"Keys{keys}State", (AgentState,),
                  {"__annotations__": annotations, "__module__": __name__})
    written = kind.endswith("written")

    class Keys(AgentMiddleware):  # type: ignore[type-arg]
        state_schema = schema

        def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            if not written:
                return None
            step = len(state["messages"])
            return {key: {"step": step} for key in annotations}

    return Keys()


@functools.cache
def default_chain_schema() -> type[Any]:
    """The default lead chain's extra state keys, as its plugins declare them (types,
    reducers and attributes), in one schema."""
    from langchain.agents.middleware import AgentState

    from antler.compiler.steps import schema_hints

    with tempfile.TemporaryDirectory(prefix="antler-bench-") as scratch:
        runner = AntlerRunner("default", "fused", None, Path(scratch), 1)
        middlewares = runner.agent.chain.middlewares
        runner.close()
    annotations: dict[str, Any] = {}
    base = set(schema_hints(AgentState))
    for middleware in middlewares:
        for key, hint in schema_hints(middleware.state_schema).items():
            if key not in base:
                annotations[key] = hint
    return type("DefaultChainState", (AgentState,),
                {"__annotations__": annotations, "__module__": __name__})


def default_chain_middleware() -> Any:
    """A middleware declaring the default lead chain's extra state keys, writing none."""
    from langchain.agents.middleware import AgentMiddleware

    schema = default_chain_schema()

    class DefaultChainKeys(AgentMiddleware):  # type: ignore[type-arg]
        state_schema = schema

        def before_model(self, state: Any, runtime: Any) -> None:
            return None

    return DefaultChainKeys()


class KeyedAgent:
    """The demo's conversation on an agent carrying `middleware` (compiled, hooks in the
    model node), every run on fresh threads."""

    def __init__(self, middleware: Any, saver: Any, runs: int, lean: bool) -> None:
        from langchain.agents import create_agent
        from langchain_core.tools import tool

        from antler.compiler import create_fused_agent
        from antler.compiler.leanchannels import lean_channels

        scripts = _scripts(runs)
        subagent = create_agent(model=scripted(scripts["sub"]), tools=[])

        @tool
        def bash(command: str) -> str:
            """Run a shell command."""
            return "month,revenue\n2026-01,1200\n"

        @tool
        def task(description: str, prompt: str) -> str:
            """Delegate a task to a subagent."""
            result = subagent.invoke({"messages": [{"role": "user", "content": prompt}]})
            return str(result["messages"][-1].content)

        @tool(return_direct=True)
        def ask_clarification(question: str, mode: str = "",
                              options: list[str] | None = None) -> str:
            """Ask the user a question and stop."""
            return question

        @tool
        def ls(path: str) -> str:
            """List a directory."""
            return ""

        self.graph, _plan = create_fused_agent(
            [middleware], model=scripted(scripts["lead"]), checkpointer=saver,
            tools=[bash, task, ask_clarification, ls])
        if lean:
            lean_channels(self.graph)
        self.persistent = saver is not None
        self.count = 0

    def prepare(self) -> Callable[[], None]:
        self.count += 1
        thread = f"keys-{self.count}"

        def run() -> None:
            self.graph.invoke(_turn_one([]), {"configurable": {"thread_id": thread}})
            second = thread if self.persistent else thread + "-2"
            self.graph.invoke(_turn_two(), {"configurable": {"thread_id": second}})

        return run


def variants(keys: int) -> dict[str, tuple[Callable[[], Any], bool]]:
    """Row name -> (middleware factory, lean reducers)."""
    rows: dict[str, tuple[Callable[[], Any], bool]] = {
        BASELINE: (lambda: keyed_middleware("last, idle", 0), False),
        f"{BASELINE}, {LEAN}": (lambda: keyed_middleware("last, idle", 0), True)}
    for kind in KINDS:
        rows[kind] = (lambda kind=kind: keyed_middleware(kind, keys), False)  # type: ignore[misc]
        if kind.startswith("reducer"):
            rows[f"{kind}, {LEAN}"] = (lambda kind=kind: keyed_middleware(kind, keys), True)  # type: ignore[misc]
    rows["default chain's keys"] = (default_chain_middleware, False)
    rows[f"default chain's keys, {LEAN}"] = (default_chain_middleware, True)
    return rows


def measure(saver_kind: str, runs: int, warmup: int, keys: int) -> dict[str, list[float]]:
    """Per row, the CPU seconds of each timed run."""
    from langgraph.checkpoint.memory import InMemorySaver

    agents = {name: KeyedAgent(make(), InMemorySaver() if saver_kind == "memory" else None,
                               runs + warmup, lean)
              for name, (make, lean) in variants(keys).items()}
    for _ in range(warmup):
        for agent in agents.values():
            agent.prepare()()
    times: dict[str, list[float]] = {name: [] for name in agents}
    for _ in range(runs):
        for name, agent in agents.items():
            run = agent.prepare()
            gc.collect()
            started = time.process_time()
            run()
            times[name].append(time.process_time() - started)
    return times


def key_count(row: str, keys: int) -> int:
    if row.startswith("default chain"):
        return len(default_chain_schema().__annotations__)
    return 0 if row.startswith(BASELINE) else keys


def report(saver_kind: str, times: dict[str, list[float]], keys: int) -> None:
    """A row's difference is taken from the baseline of its own kind (lean or not: the
    baseline's `messages` channel is a reducer too)."""
    plain_base = statistics.median(times[BASELINE])
    lean_base = statistics.median(times[f"{BASELINE}, {LEAN}"])
    print(f"  saver {saver_kind}")
    print(f"    {'row':34s} {'keys':>4s} {'ms/run':>7s} {'+ms':>7s} {'us/key':>7s}")
    for row, samples in times.items():
        median = statistics.median(samples)
        base = lean_base if row.endswith(LEAN) else plain_base
        count = key_count(row, keys)
        per_key = f"{(median - base) / count * 1e6:7.1f}" if count else "      -"
        print(f"    {row:34s} {count:4d} {median * 1e3:7.2f} {(median - base) * 1e3:+7.2f} "
              f"{per_key}")


def plain_again(graph: Any) -> None:
    """Give `graph` LangGraph's own reducer channels back (the code before `lean_channels`)."""
    from langgraph.channels import BinaryOperatorAggregate

    from antler.compiler.leanchannels import lean_aggregate_class

    lean = lean_aggregate_class()
    for key, channel in list(graph.channels.items()):
        if type(channel) is lean:
            plain = BinaryOperatorAggregate(channel.typ, channel.operator)
            plain.key = key
            graph.channels[key] = plain


def measure_chain(saver_kind: str, runs: int, warmup: int) -> dict[str, list[float]]:
    """The default chain as built (lean reducer channels), the same chain with LangGraph's
    own reducer channels (its subagent's too) and the bare agent, interleaved: per row the
    CPU seconds (`benchmarks.clock`, commands included) of each timed run."""
    from antler.runtime.agent import AntlerAgent
    from benchmarks.bench_fusion import BareRunner, counting_saver
    from benchmarks.clock import clock

    cpu = clock("cpu")
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as scratch:
        root = Path(scratch)
        total = runs + warmup + 1
        runners: dict[str, Any] = {
            "bare": BareRunner(counting_saver(saver_kind, root)[0], total, root / "bare"),
            "default, lean (as built)": AntlerRunner(
                "default", "fused", counting_saver(saver_kind, root)[0], root / "lean", total),
            "default, plain reducers": AntlerRunner(
                "default", "fused", counting_saver(saver_kind, root)[0], root / "plain", total),
        }
        plain = runners["default, plain reducers"]
        known = {id(o) for o in gc.get_objects() if isinstance(o, AntlerAgent)}
        plain.prepare()()  # builds its subagent
        for agent in gc.get_objects():
            if isinstance(agent, AntlerAgent) and (id(agent) not in known
                                                   or agent is plain.agent):
                plain_again(agent.graph)
        for _ in range(warmup):
            for runner in runners.values():
                runner.prepare()()
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(runs):
            for name, runner in runners.items():
                run = runner.prepare()
                gc.collect()
                started = cpu()
                run()
                times[name].append(cpu() - started)
        for runner in runners.values():
            runner.close()
    return times


def report_chain(saver_kind: str, times: dict[str, list[float]]) -> None:
    from benchmarks.interval import median_ratio_interval

    bare = statistics.median(times["bare"])
    print(f"  saver {saver_kind}")
    for row, samples in times.items():
        median = statistics.median(samples)
        interval = median_ratio_interval(samples, times["bare"]) if row != "bare" else None
        shown = f"  90% {interval[0]:.2f}-{interval[1]:.2f}x" if interval else ""
        print(f"    {row:28s} {median * 1e3:7.2f} ms  {median / bare:5.2f}x bare{shown}")
    lean = statistics.median(times["default, lean (as built)"])
    plain = statistics.median(times["default, plain reducers"])
    print(f"    lean - plain: {(lean - plain) * 1e3:+.2f} ms per run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--saver", nargs="+", choices=("none", "memory"),
                        default=["none", "memory"])
    parser.add_argument("--chain", action="store_true",
                        help="instead: the default chain with lean against plain reducer "
                             "channels, beside the bare agent")
    args = parser.parse_args(argv)
    if args.chain:
        print(f"The default chain's reducer channels, lean against plain: median of "
              f"{args.runs} interleaved runs (CPU, commands included); load average "
              f"{os.getloadavg()[0]:.1f} at the start")
        for saver_kind in args.saver:
            report_chain(saver_kind, measure_chain(saver_kind, args.runs, args.warmup))
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
        return 0
    print(f"Extra state channels on the demo scenario: median of {args.runs} interleaved runs "
          f"per row, {args.keys} keys per kind row; load average {os.getloadavg()[0]:.1f} "
          "at the start")
    for saver_kind in args.saver:
        report(saver_kind, measure(saver_kind, args.runs, args.warmup, args.keys), args.keys)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
