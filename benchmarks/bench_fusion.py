"""Benchmark: fused vs unfused hook nodes vs a bare `create_agent`, on the demo scenario.

    python -m benchmarks.bench_fusion [--runs N] [--warmup N]

Two chains, each built by `antler.agent.create_agent` exactly as `antler run`
builds them: the default lead chain (subagents on, as in the demo) and the
chain with every optional plugin enabled (summarization on; plan mode, a
vision model and subagents, so todo, view_image and subagent_limit join).
Each runs unfused (`fuse=False`) and fused (`fuse=True`), and a bare LangChain
`create_agent` with no middleware runs the same conversation as the baseline,
each with no checkpointer, LangGraph's `InMemorySaver` and a `SqliteSaver` on a
temporary file.

One run is the demo's two turns on a fresh thread (`antler.demo`): turn one
carries an earlier exchange whose tool call never returned, two uploaded
files, a `bash` call and a delegated `task` (a subagent run) in parallel, then
the final answer (and the title); turn two asks for clarification. The bare
agent gets stand-in tools of the same names (its `task` runs a bare subagent,
its `ask_clarification` returns directly) so every variant makes the same
model calls. Scripted models; no network. The memory queue is a no-op stand-in
so background extraction does not disturb the timing.

Reported per cell: the median milliseconds per run and its ratio to bare, and
checkpoints written per run (every `put`, subagent checkpoints included) and
their ratio to bare. The targets (fused within 1.5x of bare run time and within
2x of bare checkpoints) are checked for every chain and saver.
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIME_TARGET = 1.5
CHECKPOINT_TARGET = 2.0
SAVERS = ("none", "memory", "sqlite")


@dataclass
class Cell:
    chain: str
    variant: str
    saver: str
    ms: float
    checkpoints: float
    hook_nodes: int | None = None


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
    from antler.demo import LEAD_SCRIPT, MEMORY_SCRIPT, SUBAGENT_SCRIPT, TITLE_SCRIPT

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
    """(operator config, runtime options) of the `default` or `all-optional` chain."""
    from antler.config import OperatorConfig, parse_config
    from antler.context import RuntimeOptions
    from antler.registry import discover

    if name == "default":
        return OperatorConfig(), RuntimeOptions(subagents_enabled=True, user_id="bench")
    registry = discover()
    sections = sorted({spec.section for spec in registry.specs.values()
                       if spec.enabled == "off" and "lead" in spec.chains})
    text = "".join(f"{section}: {{enabled: true}}\n" for section in sections)
    config = parse_config(text, registry) if text else OperatorConfig()
    return config, RuntimeOptions(subagents_enabled=True, plan_mode=True, supports_vision=True,
                                  user_id="bench")


class AntlerRunner:
    """One Antler agent (fused or not) and the demo scenario on fresh threads."""

    def __init__(self, chain: str, fuse: bool, saver: Any, base: Path, runs: int) -> None:
        from antler.agent import create_agent
        from antler.context import MEMORY_MODEL, MEMORY_QUEUE, TITLE_MODEL
        from antler.models import ScriptedChatModel

        config, runtime = chain_config(chain)
        scripts = _scripts(runs)
        services = {TITLE_MODEL: ScriptedChatModel(scripts["title"]),
                    MEMORY_MODEL: ScriptedChatModel(scripts["memory"]),
                    MEMORY_QUEUE: NullQueue()}
        self.agent = create_agent(
            config, model=ScriptedChatModel(scripts["lead"]),
            subagent_model=ScriptedChatModel(scripts["sub"]), runtime=runtime,
            services=services, base_dir=base, checkpointer=saver, fuse=fuse)
        self.persistent = saver is not None
        self.count = 0

    @property
    def hook_nodes(self) -> int:
        nodes = self.agent.graph.get_graph().nodes
        return sum(1 for n in nodes if n.rsplit(".", 1)[-1] in (
            "before_agent", "before_model", "after_model", "after_agent"))

    def prepare(self) -> Callable[[], None]:
        from antler.uploads import stage_upload

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

        def run() -> None:
            context = agent.context(thread, "bench")
            agent.graph.invoke(_turn_one(files), config=config, context=context)
            second = agent.run_config(thread if self.persistent else thread + "-2")
            agent.graph.invoke(_turn_two(), config=second, context=context)

        return run

    def close(self) -> None:
        self.agent.close()


class BareRunner:
    """LangChain's `create_agent` with no middleware and stand-in tools of the same names."""

    def __init__(self, saver: Any, runs: int) -> None:
        from langchain.agents import create_agent
        from langchain_core.tools import tool

        from antler.models import ScriptedChatModel

        scripts = _scripts(runs)
        subagent = create_agent(model=ScriptedChatModel(scripts["sub"]), tools=[])

        @tool
        def bash(command: str) -> str:
            """Run a shell command."""
            return "4 /mnt/user-data/uploads/sales.csv"

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

        self.graph = create_agent(model=ScriptedChatModel(scripts["lead"]),
                                  tools=[bash, task, ask_clarification, ls], checkpointer=saver)
        self.persistent = saver is not None
        self.count = 0
        self.hook_nodes = 0

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


def measure(chain: str, variant: str, saver_kind: str, runs: int, warmup: int) -> Cell:
    with tempfile.TemporaryDirectory(prefix="antler-bench-") as scratch:
        base = Path(scratch)
        saver, counter, close_saver = counting_saver(saver_kind, base)
        total = runs + warmup
        runner: AntlerRunner | BareRunner
        if variant == "bare":
            runner = BareRunner(saver, total)
        else:
            runner = AntlerRunner(chain, variant == "fused", saver, base / "home", total)
        try:
            for _ in range(warmup):
                runner.prepare()()
            counter[0] = 0
            timings = []
            gc.collect()
            for _ in range(runs):
                run = runner.prepare()
                started = time.perf_counter()
                run()
                timings.append((time.perf_counter() - started) * 1000)
            return Cell(chain, variant, saver_kind, statistics.median(timings),
                        counter[0] / runs, runner.hook_nodes)
        finally:
            runner.close()
            close_saver()


def report(cells: list[Cell]) -> tuple[str, bool]:
    """The table and whether every target was met."""
    lines = []
    ok = True
    bare = {c.saver: c for c in cells if c.variant == "bare"}
    for chain in ("default", "all-optional"):
        rows = [c for c in cells if c.chain == chain]
        if not rows:
            continue
        lines.append(f"\n{chain} chain")
        lines.append(f"  {'saver':<7} {'variant':<8} {'hook nodes':>10} {'ms/run':>9} "
                     f"{'x bare':>7} {'ckpt/run':>9} {'x bare':>7}")
        for saver in SAVERS:
            base = bare.get(saver)
            for variant in ("bare", "unfused", "fused"):
                cell = next((c for c in rows + ([base] if base else [])
                             if c.saver == saver and c.variant == variant), None)
                if cell is None or base is None:
                    continue
                time_ratio = cell.ms / base.ms
                ckpt_ratio = cell.checkpoints / base.checkpoints if base.checkpoints else 0.0
                lines.append(f"  {saver:<7} {variant:<8} {cell.hook_nodes or 0:>10} "
                             f"{cell.ms:>9.1f} {time_ratio:>6.2f}x {cell.checkpoints:>9.1f} "
                             f"{ckpt_ratio:>6.2f}x")
                if variant == "fused":
                    met = time_ratio <= TIME_TARGET and (
                        not base.checkpoints or ckpt_ratio <= CHECKPOINT_TARGET)
                    ok = ok and met
                    lines.append(f"  {'':<7} {'':<8} target ({TIME_TARGET}x time, "
                                 f"{CHECKPOINT_TARGET}x checkpoints): "
                                 f"{'met' if met else 'MISSED'}")
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per cell")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per cell first")
    parser.add_argument("--chain", choices=("default", "all-optional", "both"), default="both")
    args = parser.parse_args(argv)
    chains = ("default", "all-optional") if args.chain == "both" else (args.chain,)
    cells = []
    for saver in SAVERS:
        cells.append(measure("-", "bare", saver, args.runs, args.warmup))
        for chain in chains:
            for variant in ("unfused", "fused"):
                cells.append(measure(chain, variant, saver, args.runs, args.warmup))
    table, ok = report(cells)
    print(f"Hook-node fusion on the demo scenario: median of {args.runs} runs per cell "
          f"(after {args.warmup} warm-up runs); one run = the demo's two turns")
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
