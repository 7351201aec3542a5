"""Benchmark: fused vs unfused hook nodes vs a bare `create_agent`, on the demo scenario.

    python -m benchmarks.bench_fusion [--runs N] [--warmup N] [--chain NAME ...]
                                      [--clock cpu|wall|cgroup] [--check]

Five chains. Four are built by `antler.agent.create_agent` exactly as `antler run`
builds them: the default lead chain (subagents on, as in the demo) with its
commands in the local provider (`default`) and in the provider users get,
`sandbox: {provider: auto}`, which is bwrap where bubblewrap works
(`default-auto`); the chain with every optional plugin enabled (summarization
on; plan mode, a vision model and subagents, so todo, view_image and
subagent_limit join: `all-optional`), and the same without the plugins that
make model calls of their own (the LLM tool selector: `all-optional-lean`).
`default` and `all-optional` run in three variants, the other two compiled
only: `unfused` (`fuse=False`, LangChain's graph), `nodes` (node fusion only,
`fuse_into_model=False`) and `fused` (the default compile: hook nodes fused,
model-call hooks inside the model node). A bare LangChain `create_agent` with
no middleware runs the same conversation as the baseline. Every variant runs
with no checkpointer, LangGraph's `InMemorySaver` and a `SqliteSaver` on a
temporary file.

One run is the demo's two turns on a fresh thread (`antler.runtime.demo`): turn one
carries an earlier exchange whose tool call never returned, two uploaded
files, a `bash` call and a delegated `task` (a subagent run) in parallel, then
the final answer (and the title); turn two asks for clarification. The bare
agent gets stand-in tools of the same names (its `task` runs a bare subagent,
its `ask_clarification` returns directly) so every variant makes the same
model calls. Scripted models; no network. The memory queue is a no-op stand-in
so background extraction does not disturb the timing.

Reported per cell: the median milliseconds per run on both clocks with their
ratios to bare, and checkpoints written per run (every `put`, subagent
checkpoints included) and their ratio to bare. `cpu` is the CPU time of the
process, its threads and the processes it started (`benchmarks.clock`: shell
commands, the audit's parser worker, bubblewrap and its namespace); `wall` is
elapsed time. On a shared machine wall time includes waiting for a core, so
each compiled cell with a target (`TARGETS`) is checked on `--clock` (default
`cpu`); `--check` makes a miss the exit status. The fifth chain, 35 do-nothing
middlewares with `before_model` and `after_model` on the bare agent, isolates
the graph's own cost from the work the built-in plugins do (sandbox commands,
the title model, the subagent's chain). Runs of the variants are interleaved
so that load on the machine affects them alike.

The Antler chains but `default-auto` run their commands in the local sandbox
provider, pinned (`local_provider`): the bare agent's `bash` is a plain
subprocess, and those targets measure the chain's overhead, not the price of
isolation. `default-auto` pays that price as users do (every run is a new
thread, so each adopts a new namespace, and the spare made ahead for the next
thread is waited for before the run's clock stops, so that its CPU is not
counted in the next cell's run), and one command per provider against a plain
subprocess closes the report (`bench_sandbox`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sqlite3
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.clock import CLOCKS
from benchmarks.clock import clock as clock_of
from benchmarks.interval import median_ratio_interval

SAVERS = ("none", "memory", "sqlite")
VARIANTS = ("unfused", "nodes", "fused")
"""LangChain's graph; node fusion only (`fuse_into_model=False`); the default compile."""
NOOP_CHAIN = "35-noop"
AUTO_CHAIN = "default-auto"
"""The default chain with the sandbox users get: provider `auto` (bwrap where it works)."""
LEAN_CHAIN = "all-optional-lean"
"""The all-optional chain without the plugins that make extra model calls (the LLM tool
selector)."""
CHAINS = ("default", AUTO_CHAIN, "all-optional", LEAN_CHAIN, NOOP_CHAIN)
EXTRA_MODEL_CALLS = ("llm_tool_selector",)
"""Optional plugins that call a model of their own on every turn, off in `LEAN_CHAIN`."""
FUSED_ONLY = (AUTO_CHAIN, LEAN_CHAIN)
"""Chains measured compiled only (their unfused figures add nothing to the others')."""


@dataclass(frozen=True)
class Target:
    """The most a compiled cell may cost against bare: time per saver, and checkpoints."""

    time: dict[str, float]
    checkpoints: float | None


TARGETS = {
    # Local provider: the chain's own overhead (its commands start as bare's do).
    "default": Target({"none": 1.5, "memory": 1.5, "sqlite": 1.5}, 1.3),
    # As users get it: bwrap's namespace and commands included.
    AUTO_CHAIN: Target({"none": 1.4, "memory": 1.3}, 1.0),
    "all-optional": Target({"none": 1.5, "memory": 1.5, "sqlite": 1.5}, 1.3),
    LEAN_CHAIN: Target({"memory": 1.8}, 1.3),
    NOOP_CHAIN: Target({"none": 1.5, "memory": 1.5, "sqlite": 1.5}, 1.3),
}
"""The targets, checked on the `--clock` for every compiled cell that has one."""


@dataclass
class Cell:
    chain: str
    variant: str
    saver: str
    ms: float
    """Median ms per run on the clock the targets are checked on."""
    checkpoints: float
    hook_nodes: int | None = None
    other_ms: float = 0.0
    """Median ms per run on the other clock."""
    samples: tuple[float, ...] = ()
    """Every timed run's ms on the main clock, in round order (runs of one round are
    interleaved across cells, so equal indices ran side by side)."""


def ratio_interval(cell: Cell, base: Cell, rounds: int = 2000, seed: int = 0,
                   ) -> tuple[float, float] | None:
    """A 90% bootstrap interval of `cell`'s median time over `base`'s.

    Rounds are resampled whole (a run of `cell` with the run of `base` beside it),
    so load that moved both alike does not widen the interval. None with fewer
    than five runs.
    """
    return median_ratio_interval(cell.samples, base.samples, rounds, seed)


def scripted(turns: list[Any], **kwargs: Any) -> Any:
    """A scripted chat model whose repr stays short.

    LangChain serializes the model (through its repr) on every call for its
    callbacks; with a script repeated for every run that repr would grow with
    the run count and dominate the timing.
    """
    from antler.runtime.models import ScriptedChatModel

    class BenchModel(ScriptedChatModel):
        def __repr__(self) -> str:
            return "BenchModel()"

    return BenchModel(turns, **kwargs)


class NullQueue:
    """Stands in for the memory queue: accepts submissions, processes nothing."""

    def add(self, **_: Any) -> None:
        return None

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


def counting_saver(kind: str, directory: Path) -> tuple[Any, list[int], Callable[[], None]]:
    """(saver or None, put counter, closer) with every `put` counted."""
    counter = [0]
    if kind == "none":
        return None, counter, lambda: None
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        saver: Any = InMemorySaver()
        close: Callable[[], None] = lambda: None  # noqa: E731
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        connection = sqlite3.connect(str(directory / "bench.sqlite"), check_same_thread=False)
        saver = SqliteSaver(connection)
        close = connection.close
    put = saver.put

    def counted_put(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return put(*args, **kwargs)

    saver.put = counted_put
    return saver, counter, close


def _scripts(runs: int) -> dict[str, list[Any]]:
    from antler.runtime.demo import LEAD_SCRIPT, MEMORY_SCRIPT, SUBAGENT_SCRIPT, TITLE_SCRIPT

    return {"lead": LEAD_SCRIPT * runs, "sub": SUBAGENT_SCRIPT * runs,
            "title": TITLE_SCRIPT * runs, "memory": MEMORY_SCRIPT * runs}


def _turn_one(files: list[dict[str, Any]]) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    kwargs = {"files": files} if files else {}
    return {"messages": [
        HumanMessage(content="List the files you can see.", id="earlier-question"),
        AIMessage(content="", id="earlier-call", tool_calls=[
            {"name": "ls", "args": {"path": "/mnt/user-data"}, "id": "call_interrupted"}]),
        HumanMessage(content="Analyse the uploaded files, please.", additional_kwargs=kwargs),
    ]}


def _turn_two() -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    return {"messages": [HumanMessage(content="Now draft a revenue forecast.")]}


def chain_config(name: str) -> tuple[Any, Any]:
    """(operator config, runtime options) of a chain: `default` (or `default-auto`),
    `all-optional`, or `all-optional-lean` (without `EXTRA_MODEL_CALLS`)."""
    from antler.chain.config import InputSettings, OperatorConfig
    from antler.plugin_api.context import RuntimeOptions
    from antler.plugin_api.registry import discover
    from antler.runtime.demo import all_optional_config

    # Turn one carries the earlier exchange as input, as the bare agent gets it: the
    # operator lets callers send assistant messages (callers send only human ones by default).
    roles = InputSettings(allow_roles=["human", "ai"])
    if name in ("default", AUTO_CHAIN):
        return (OperatorConfig(sections={"input": roles}),
                RuntimeOptions(subagents_enabled=True, user_id="bench"))
    config = all_optional_config(discover())
    config.sections["input"] = roles
    if name == LEAN_CHAIN:
        for section in EXTRA_MODEL_CALLS:
            config.sections.pop(section, None)
    return config, RuntimeOptions(subagents_enabled=True, plan_mode=True, supports_vision=True,
                                  user_id="bench")


def local_provider() -> Any:
    """The local sandbox provider, pinned whatever `sandbox.provider: auto` would pick.

    The targets compare the chain's own overhead with a bare agent whose `bash`
    is a plain subprocess. Under bwrap every command would also pay for its
    namespaces, which is isolation, not chain overhead; `bench_sandbox` (also
    printed at the end) reports that cost per tool call.
    """
    from antler.plugin_api.sandbox import load_sandbox_provider

    return load_sandbox_provider("local", max_output_bytes=8 * 1024 * 1024)


class AntlerRunner:
    """One Antler agent (fused or not) and the demo scenario on fresh threads."""

    def __init__(self, chain: str, variant: str, saver: Any, base: Path, runs: int,
                 durability: str | None = None) -> None:
        from antler.plugin_api.context import (
            MEMORY_MODEL,
            MEMORY_QUEUE,
            SANDBOX_PROVIDER,
            TITLE_MODEL,
        )
        from antler.runtime.agent import create_agent

        config, runtime = chain_config(chain)
        scripts = _scripts(runs)
        services = {TITLE_MODEL: scripted(scripts["title"]),
                    MEMORY_MODEL: scripted(scripts["memory"]),
                    MEMORY_QUEUE: NullQueue()}
        if chain != AUTO_CHAIN:  # AUTO_CHAIN: the provider `sandbox: {provider: auto}` picks
            services[SANDBOX_PROVIDER] = local_provider()
        self.agent = create_agent(
            config, model=scripted(scripts["lead"]),
            subagent_model=scripted(scripts["sub"]), runtime=runtime,
            services=services, base_dir=base, checkpointer=saver,
            fuse=variant != "unfused", fuse_into_model=variant == "fused",
            **({"durability": durability} if durability else {}))
        self.persistent = saver is not None
        self.count = 0

    @property
    def hook_nodes(self) -> int:
        return _hook_nodes(self.agent.graph)

    def prepare(self) -> Callable[[], None]:
        from antler.plugin_api.context import SANDBOX_PROVIDER
        from antler.plugin_api.uploads import stage_upload

        self.count += 1
        thread = f"bench-{self.count}"
        paths = self.agent.services.get("paths").thread("bench", thread)
        files = []
        with tempfile.TemporaryDirectory() as scratch:
            for name, text in (("sales.csv", "month,revenue\n2026-01,1200\n"),
                               ("notes.md", "# Notes\nRevenue dipped in March.\n")):
                source = Path(scratch) / name
                source.write_text(text, encoding="utf-8")
                files.append(stage_upload(paths, source))
        agent = self.agent
        config = agent.run_config(thread)

        provider = agent.services.items.get(SANDBOX_PROVIDER)
        settle = getattr(provider, "settle", None)

        def run() -> None:
            context = agent.context(thread, "bench")
            agent.graph.invoke(_turn_one(files), config=config, context=context)
            second = agent.run_config(thread if self.persistent else thread + "-2")
            agent.graph.invoke(_turn_two(), config=second, context=context)
            if settle is not None:
                # What the run started in the background (bwrap: the spare namespace made
                # ahead for the next thread) is its cost, not the next cell's.
                settle()

        return run

    def close(self) -> None:
        self.agent.close()


def bare_bash(workdir: Path) -> Any:
    """The bare agent's `bash`: the command in `workdir` (which gets the demo's upload)
    through a plain `subprocess.run`, virtual upload paths made relative."""
    from langchain_core.tools import tool

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "sales.csv").write_text("month,revenue\n2026-01,1200\n", encoding="utf-8")

    @tool
    def bash(command: str) -> str:
        """Run a shell command."""
        command = command.replace("/mnt/user-data/uploads/", "")
        done = subprocess.run(["bash", "-c", command], cwd=workdir, capture_output=True,
                              text=True, timeout=30, check=False)
        return done.stdout + done.stderr

    return bash


class BareRunner:
    """LangChain's `create_agent` with stand-in tools of the chain's names.

    With `noop` > 0 it carries that many do-nothing middlewares, each with a
    `before_model` and an `after_model` hook (the issue's measurement), fused
    or not; with 0 it is the bare baseline. `bash` really runs the command
    (in a scratch directory), as the sandbox does.
    """

    def __init__(self, saver: Any, runs: int, scratch: Path, noop: int = 0,
                 variant: str = "unfused") -> None:
        from langchain.agents import create_agent
        from langchain_core.tools import tool

        from antler.compiler import create_fused_agent

        scripts = _scripts(runs)
        subagent = create_agent(model=scripted(scripts["sub"]), tools=[])
        bash = bare_bash(scratch / "work")

        @tool
        def task(description: str, prompt: str) -> str:
            """Delegate a task to a subagent."""
            result = subagent.invoke({"messages": [{"role": "user", "content": prompt}]})
            return str(result["messages"][-1].content)

        @tool(return_direct=True)
        def ask_clarification(question: str, mode: str = "", options: list[str] | None = None,
                              ) -> str:
            """Ask the user a question and stop."""
            return question

        @tool
        def ls(path: str) -> str:
            """List a directory."""
            return ""

        middleware: list[Any] = [_noop(i) for i in range(noop)]
        kwargs: dict[str, Any] = {"model": scripted(scripts["lead"]), "checkpointer": saver,
                                  "tools": [bash, task, ask_clarification, ls]}
        if variant != "unfused":
            self.graph, _plan = create_fused_agent(middleware, into_model=variant == "fused",
                                                   **kwargs)
        else:
            self.graph = create_agent(middleware=middleware, **kwargs)
        self.persistent = saver is not None
        self.count = 0
        self.hook_nodes = _hook_nodes(self.graph)

    def prepare(self) -> Callable[[], None]:
        self.count += 1
        thread = f"bare-{self.count}"

        def run() -> None:
            self.graph.invoke(_turn_one([]), {"configurable": {"thread_id": thread}})
            second = thread if self.persistent else thread + "-2"
            self.graph.invoke(_turn_two(), {"configurable": {"thread_id": second}})

        return run

    def close(self) -> None:
        return None


def _noop(index: int) -> Any:
    from langchain.agents.middleware import AgentMiddleware

    class Noop(AgentMiddleware):
        def before_model(self, state: Any, runtime: Any) -> None:
            return None

        def after_model(self, state: Any, runtime: Any) -> None:
            return None

    middleware = Noop()
    middleware.__class__ = type(f"Noop{index}", (Noop,), {})
    return middleware


def _hook_nodes(graph: Any) -> int:
    # The running graph's nodes (hooks compiled into the model node are not nodes).
    return sum(1 for node in graph.nodes
               if node.rsplit(".", 1)[-1] in ("before_agent", "before_model", "after_model",
                                              "after_agent"))


def measure(saver_kind: str, chains: tuple[str, ...], runs: int, warmup: int,
            durability: str | None = None, clock: str = "cpu",
            variants: tuple[str, ...] = VARIANTS, slowdown: float = 0.0) -> list[Cell]:
    """Every variant (of `variants`) of every chain with one kind of saver.

    Runs are interleaved (one run of each variant in turn), so a load change on
    the machine affects every variant alike. `slowdown` (for checking a
    regression check) makes every Antler run spin that fraction of the bare
    run's time longer.
    """
    with contextlib.ExitStack() as stack:
        runners: list[tuple[str, str, Any, list[int]]] = []
        total = runs + warmup
        cells = [("-", "bare")] + [(c, v) for c in chains for v in variants
                                   if v == "fused" or c not in FUSED_ONLY]
        for chain, variant in cells:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="antler-bench-")))
            saver, counter, close_saver = counting_saver(saver_kind, base)
            stack.callback(close_saver)
            runner: AntlerRunner | BareRunner
            if variant == "bare":
                runner = BareRunner(saver, total, base)
            elif chain == NOOP_CHAIN:
                runner = BareRunner(saver, total, base, noop=35, variant=variant)
            else:
                runner = AntlerRunner(chain, variant, saver, base / "home", total, durability)
            stack.callback(runner.close)
            runners.append((chain, variant, runner, counter))
        for _ in range(warmup):
            for _chain, _variant, runner, _counter in runners:
                runner.prepare()()
        timings: list[list[float]] = [[] for _ in runners]
        others: list[list[float]] = [[] for _ in runners]
        main, other = clock_of(clock), clock_of("wall" if clock == "cpu" else "cpu")
        for _chain, _variant, _runner, counter in runners:
            counter[0] = 0
        gc.collect()
        for _ in range(runs):
            bare_ms = 0.0
            for index, (_chain, variant, runner, _counter) in enumerate(runners):
                run = runner.prepare()
                started, started_other = main(), other()
                run()
                if variant == "bare":
                    bare_ms = (main() - started) * 1000
                elif slowdown:
                    _spin(bare_ms * slowdown / 1000, main)
                timings[index].append((main() - started) * 1000)
                others[index].append((other() - started_other) * 1000)
        return [Cell(chain, variant, saver_kind, statistics.median(times), counter[0] / runs,
                     runner.hook_nodes, statistics.median(other_times), tuple(times))
                for (chain, variant, runner, counter), times, other_times
                in zip(runners, timings, others, strict=True)]


def _spin(seconds: float, clock: Callable[[], float]) -> None:
    """Keep the CPU busy for `seconds` on `clock` (a regression made to order)."""
    until = clock() + seconds
    while clock() < until:
        pass


def report(cells: list[Cell], clock: str = "cpu") -> tuple[str, bool]:
    """The table and whether every target was met (times on `clock`)."""
    lines = []
    ok = True
    bare = {c.saver: c for c in cells if c.variant == "bare"}
    for chain in CHAINS:
        rows = [c for c in cells if c.chain == chain]
        if not rows:
            continue
        lines.append(f"\n{chain} chain")
        other = "wall" if clock == "cpu" else "cpu"
        lines.append(f"  {'saver':<7} {'variant':<8} {'hook nodes':>10} {clock + ' ms':>9} "
                     f"{'x bare':>7} {other + ' ms':>9} {'x bare':>7} {'ckpt/run':>9} "
                     f"{'x bare':>7}")
        for saver in SAVERS:
            base = bare.get(saver)
            for variant in ("bare", *VARIANTS):
                cell = next((c for c in rows + ([base] if base else [])
                             if c.saver == saver and c.variant == variant), None)
                if cell is None or base is None:
                    continue
                time_ratio = cell.ms / base.ms
                other_ratio = cell.other_ms / base.other_ms if base.other_ms else 0.0
                ckpt_ratio = cell.checkpoints / base.checkpoints if base.checkpoints else 0.0
                lines.append(f"  {saver:<7} {variant:<8} {cell.hook_nodes or 0:>10} "
                             f"{cell.ms:>9.1f} {time_ratio:>6.2f}x {cell.other_ms:>9.1f} "
                             f"{other_ratio:>6.2f}x {cell.checkpoints:>9.1f} {ckpt_ratio:>6.2f}x")
                target = TARGETS[chain]
                limit = target.time.get(saver)
                if variant != "fused" or limit is None:
                    continue
                checkpoints = target.checkpoints
                met = time_ratio <= limit and (
                    not base.checkpoints or checkpoints is None or ckpt_ratio <= checkpoints)
                ok = ok and met
                interval = ratio_interval(cell, base)
                spread = (f"; {clock} ratio {interval[0]:.2f}-{interval[1]:.2f}x "
                          "(90% bootstrap interval)" if interval else "")
                lines.append(f"  {'':<7} {'':<8} target ({limit}x {clock} time, "
                             f"{checkpoints}x checkpoints): "
                             f"{'met' if met else 'MISSED'}{spread}")
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per cell")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per cell first")
    parser.add_argument("--chain", choices=(*CHAINS, "all"), nargs="+", default=["all"],
                        help="the chains to run beside bare (default: all)")
    parser.add_argument("--durability", choices=("sync", "async", "exit"), default=None,
                        help="checkpoint durability of the Antler agents (default: Antler's, "
                             "sync); bare agents keep LangGraph's")
    parser.add_argument("--clock", choices=CLOCKS, default="cpu",
                        help="the clock the targets are checked on (both are reported): cpu "
                             "(process, threads and child processes) or wall (elapsed)")
    parser.add_argument("--check", action="store_true",
                        help="exit with status 1 when a fused cell misses its target")
    args = parser.parse_args(argv)
    chains = CHAINS if "all" in args.chain else tuple(c for c in CHAINS if c in args.chain)
    load_before = os.getloadavg()[0]
    cells = []
    for saver in SAVERS:
        cells.extend(measure(saver, chains, args.runs, args.warmup, args.durability,
                             args.clock))
    table, ok = report(cells, args.clock)
    print(f"Hook-node fusion on the demo scenario: median of {args.runs} interleaved runs per "
          f"cell (after {args.warmup} warm-up runs); one run = the demo's two turns; "
          f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(table)
    from .bench_sandbox import measure as per_command
    from .bench_sandbox import report as per_command_report

    command_runs = max(30, args.runs)
    print("\nPer tool call (the chains above pin the local provider):")
    print(per_command_report(per_command(command_runs, "echo hello"), "echo hello",
                             command_runs))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
