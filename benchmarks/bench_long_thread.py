"""Benchmark: one turn's cost on a thread that already holds H messages.

    python -m benchmarks.bench_long_thread [--turns N] [--history 0,200,2000]
                                           [--chain NAME] [--saver NAME] [--mode NAME]
                                           [--clock cpu|wall]

One turn is a user message, one `ls` call and the answer. Before it is timed,
the thread is seeded with H earlier messages (questions and answers, about 300
characters each) through `update_state`, and one untimed turn lets every plugin
see them once (input_sanitization records its provenance, memory filters).
Then `--turns` turns are timed on that thread.

Chains: a bare LangChain `create_agent` (stand-in `ls` tool), Antler's default
lead chain and the chain with every optional plugin on (summarization's
trigger set out of reach, so its hooks run but do not rewrite the history),
both built by `antler.agent.create_agent` as `antler run` builds them (loop
detection's thresholds, too, set out of reach: every turn repeats one call). Every
agent, bare included, runs with the same checkpoint durability (`--durability`,
default Antler's `sync`). Savers:
LangGraph's `InMemorySaver` and a `SqliteSaver` on a temporary file. Channel
modes: `full` (every checkpoint stores the message list) and `delta`
(`storage.messages_channel: delta`; the bare agent gets the same channel
through `antler.runtime.storage.deltas.use_delta_channels`).

Reported per cell: the median ms per turn on both clocks (`benchmarks.clock`:
`cpu` is the CPU time of the process, its threads and its child processes,
`wall` elapsed time) with the ratio to bare (same saver, same mode),
checkpoints written per turn (`put` calls) and, for SQLite, bytes written per
turn (checkpoint and write rows). Per chain, saver and mode: the growth of the
turn time on `--clock` (default `cpu`, which a shared machine's load moves
least) per 1,000 earlier messages (from the smallest to the largest H) and its
ratio to bare's. The targets checked at the end:

- the default chain's growth is within 1.2x of bare's (full mode, each saver);
- its ratio to bare at the largest H is no worse than at H=0 (+5% noise margin);
- delta bytes per turn at the largest H are at most a tenth of bare's full-mode
  bytes (SQLite).

The default run (3 timed turns per cell) takes about three minutes on two cores;
`--turns 10` gives steadier figures. Cells of one H are interleaved turn by
turn, so load on the machine affects them alike.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import os
import sqlite3
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import NullQueue, chain_config, scripted
from benchmarks.clock import CLOCKS
from benchmarks.clock import clock as clock_of

CHAINS = ("bare", "default", "all-optional")
SAVERS = ("memory", "sqlite")
MODES = ("full", "delta")
HISTORY = (0, 200, 2000)
SLOPE_TARGET = 1.2
BYTES_TARGET = 0.1
NOISE = 1.05
TEXT = "lorem ipsum dolor sit amet " * 11


@dataclass
class Cell:
    chain: str
    saver: str
    mode: str
    history: int
    ms: float
    """Median ms per turn on the clock the growth is computed on."""
    checkpoints: float
    bytes: float | None
    other_ms: float = 0.0
    """Median ms per turn on the other clock."""


def _turn_script(turns: int) -> list[Any]:
    one = [{"content": "", "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data"}}]},
           "Done: nothing there yet. " + TEXT]
    return one * turns


def _history(size: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    return [HumanMessage(f"question {i}: {TEXT}", id=f"seed-{i}") if i % 2 == 0
            else AIMessage(f"answer {i}: {TEXT}", id=f"seed-{i}") for i in range(size)]


class Saver:
    """A saver of one kind with its `put` calls counted and its written bytes measurable."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.puts = 0
        self.connection: sqlite3.Connection | None = None
        if kind == "memory":
            from langgraph.checkpoint.memory import InMemorySaver

            self.saver: Any = InMemorySaver()
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.connection = sqlite3.connect(str(directory / "bench.sqlite"),
                                              check_same_thread=False)
            self.saver = SqliteSaver(self.connection)
        put = self.saver.put

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.puts += 1
            return put(*args, **kwargs)

        self.saver.put = counted

    def written(self) -> int | None:
        """Bytes of every checkpoint and write row so far (SQLite only)."""
        if self.connection is None:
            return None
        total = 0
        for query in ("select coalesce(sum(length(checkpoint) + length(metadata)), 0) "
                      "from checkpoints", "select coalesce(sum(length(value)), 0) from writes"):
            total += self.connection.execute(query).fetchone()[0]
        return total

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


class Runner:
    """One agent of one chain on one thread seeded with `history` messages."""

    def __init__(self, chain: str, saver: Saver, mode: str, history: int, turns: int,
                 home: Path, durability: str) -> None:
        self.chain, self.saver, self.mode = chain, saver, mode
        self.durability = durability
        script = _turn_script(turns + 1)
        if chain == "bare":
            self.graph = self._bare(script, saver.saver, mode)
        else:
            self.graph = self._antler(chain, script, saver.saver, mode, home)
        self.config = {"configurable": {"thread_id": "long"}, "recursion_limit": 100}
        self.count = 0
        if history:
            self.graph.update_state(self.config, {"messages": _history(history)},
                                    as_node="model")
        self.turn()  # every plugin sees the seeded history once

    def _bare(self, script: list[Any], saver: Any, mode: str) -> Any:
        from langchain.agents import create_agent
        from langchain_core.tools import tool

        from antler.runtime.storage.deltas import use_delta_channels

        @tool
        def ls(path: str) -> str:
            """List a directory."""
            return "(empty)"

        graph = create_agent(model=scripted(script), tools=[ls], checkpointer=saver)
        if mode == "delta":
            use_delta_channels(graph, ["messages"], 100)
        self.context = None
        return graph

    def _antler(self, chain: str, script: list[Any], saver: Any, mode: str, home: Path) -> Any:
        from antler.plugin_api.context import MEMORY_MODEL, MEMORY_QUEUE, TITLE_MODEL
        from antler.plugins.loop_detection.config import LoopDetectionConfig
        from antler.plugins.summarization.config import ContextSize
        from antler.runtime.agent import create_agent

        config, runtime = chain_config(chain)
        sections = {**config.sections,
                    "storage": config.storage.model_copy(update={"messages_channel": mode})}
        summarization = sections.get("summarization")
        if summarization is not None:
            # Its hooks run on every call, but the history is not rewritten under the timer.
            sections["summarization"] = summarization.model_copy(update={"trigger": [
                ContextSize(type="messages", value=10**9)]})
        # Every turn repeats the same `ls` call: with its defaults, loop detection would
        # strip it from the fourth turn on, and later turns would do less than bare's.
        loops = sections.get("loop_detection") or LoopDetectionConfig()
        sections["loop_detection"] = loops.model_copy(update={
            "warn_threshold": 10**6, "hard_limit": 10**6, "window_size": 10**6,
            "tool_freq_warn": 10**6, "tool_freq_hard_limit": 10**6})
        config = dataclasses.replace(config, sections=sections)
        runtime = runtime.model_copy(update={"subagents_enabled": False})
        services = {TITLE_MODEL: scripted(["A title"] * 4), MEMORY_MODEL: scripted(["[]"]),
                    MEMORY_QUEUE: NullQueue()}
        self.agent = create_agent(config, model=scripted(script), runtime=runtime,
                                  services=services, base_dir=home, checkpointer=saver,
                                  durability=self.durability)
        self.context = self.agent.context("long", "bench")
        return self.agent.graph

    def turn(self) -> None:
        from langchain_core.messages import HumanMessage

        self.count += 1
        message = HumanMessage(f"turn {self.count}: what is in the user data folder?")
        kwargs: dict[str, Any] = {"durability": self.durability}
        if self.context is not None:
            kwargs["context"] = self.context
        self.graph.invoke({"messages": [message]}, config=self.config, **kwargs)

    def close(self) -> None:
        agent = getattr(self, "agent", None)
        if agent is not None:
            agent.close()


def measure(history: int, chains: tuple[str, ...], savers: tuple[str, ...],
            modes: tuple[str, ...], turns: int, durability: str = "sync",
            clock: str = "cpu") -> list[Cell]:
    """Every cell of one history length, turns interleaved across cells."""
    with contextlib.ExitStack() as stack:
        runners = []
        for saver_kind in savers:
            for mode in modes:
                for chain in chains:
                    base = Path(stack.enter_context(tempfile.TemporaryDirectory(
                        prefix="antler-long-")))
                    saver = Saver(saver_kind, base)
                    stack.callback(saver.close)
                    runner = Runner(chain, saver, mode, history, turns, base / "home",
                                    durability)
                    stack.callback(runner.close)
                    runners.append(runner)
        marks = [(r.saver.puts, r.saver.written()) for r in runners]
        times: list[list[float]] = [[] for _ in runners]
        others: list[list[float]] = [[] for _ in runners]
        main, other = clock_of(clock), clock_of("wall" if clock == "cpu" else "cpu")
        gc.collect()
        for _ in range(turns):
            for index, runner in enumerate(runners):
                started, started_other = main(), other()
                runner.turn()
                times[index].append((main() - started) * 1000)
                others[index].append((other() - started_other) * 1000)
        cells = []
        for runner, (puts, written), spent, spent_other in zip(runners, marks, times, others,
                                                               strict=True):
            now = runner.saver.written()
            cells.append(Cell(runner.chain, runner.saver.kind, runner.mode, history,
                              statistics.median(spent), (runner.saver.puts - puts) / turns,
                              None if now is None or written is None
                              else (now - written) / turns, statistics.median(spent_other)))
        return cells


def _find(cells: list[Cell], chain: str, saver: str, mode: str, history: int) -> Cell | None:
    return next((c for c in cells if (c.chain, c.saver, c.mode, c.history)
                 == (chain, saver, mode, history)), None)


def slope(cells: list[Cell], chain: str, saver: str, mode: str, low: int, high: int,
          ) -> float | None:
    """Turn time growth in ms per 1,000 earlier messages, from `low` to `high`."""
    a, b = _find(cells, chain, saver, mode, low), _find(cells, chain, saver, mode, high)
    if a is None or b is None or high == low:
        return None
    return (b.ms - a.ms) * 1000 / (high - low)


def report(cells: list[Cell], histories: tuple[int, ...], clock: str = "cpu",
           ) -> tuple[str, list[str]]:
    """The table, the growth lines and the target lines (growth on `clock`)."""
    low, high = min(histories), max(histories)
    other = "wall" if clock == "cpu" else "cpu"
    lines = [f"  {'chain':<13} {'saver':<7} {'mode':<6} {'H':>5} {clock + ' ms':>9} {'x bare':>7} "
             f"{other + ' ms':>9} {'x bare':>7} {'ckpt/turn':>9} {'KB/turn':>9}"]
    for saver in sorted({c.saver for c in cells}, key=SAVERS.index):
        for mode in sorted({c.mode for c in cells}, key=MODES.index):
            for chain in sorted({c.chain for c in cells}, key=CHAINS.index):
                for history in histories:
                    cell = _find(cells, chain, saver, mode, history)
                    if cell is None:
                        continue
                    bare = _find(cells, "bare", saver, mode, history)
                    ratio = f"{cell.ms / bare.ms:>6.2f}x" if bare else f"{'-':>7}"
                    other_ratio = (f"{cell.other_ms / bare.other_ms:>6.2f}x"
                                   if bare and bare.other_ms else f"{'-':>7}")
                    size = "-" if cell.bytes is None else f"{cell.bytes / 1024:.0f}"
                    lines.append(f"  {chain:<13} {saver:<7} {mode:<6} {history:>5} "
                                 f"{cell.ms:>9.1f} {ratio} {cell.other_ms:>9.1f} {other_ratio} "
                                 f"{cell.checkpoints:>9.1f} {size:>9}")
    lines.append(f"\ngrowth of {clock} time per 1,000 earlier messages (H={low} to H={high})")
    for saver in sorted({c.saver for c in cells}, key=SAVERS.index):
        for mode in sorted({c.mode for c in cells}, key=MODES.index):
            bare = slope(cells, "bare", saver, mode, low, high)
            for chain in sorted({c.chain for c in cells}, key=CHAINS.index):
                grow = slope(cells, chain, saver, mode, low, high)
                if grow is None:
                    continue
                ratio = f"{grow / bare:.2f}x bare" if bare and bare > 0 else "-"
                lines.append(f"  {chain:<13} {saver:<7} {mode:<6} {grow:>8.1f} ms  {ratio}")
    return "\n".join(lines), targets(cells, low, high)


def targets(cells: list[Cell], low: int, high: int) -> list[str]:
    found = []
    for saver in SAVERS:
        bare = slope(cells, "bare", saver, "full", low, high)
        grow = slope(cells, "default", saver, "full", low, high)
        if bare and grow is not None:
            met = grow <= SLOPE_TARGET * max(bare, 0.0)
            found.append(f"default growth within {SLOPE_TARGET}x of bare's ({saver}): "
                         f"{grow / bare:.2f}x, {'met' if met else 'MISSED'}")
        pairs = [(_find(cells, "default", saver, "full", h), _find(cells, "bare", saver, "full",
                                                                   h)) for h in (low, high)]
        if all(a and b for a, b in pairs) and low != high:
            (a0, b0), (a1, b1) = pairs
            assert a0 and b0 and a1 and b1
            r0, r1 = a0.ms / b0.ms, a1.ms / b1.ms
            found.append(f"default ratio to bare at H={high} no worse than at H={low} "
                         f"({saver}): {r1:.2f}x vs {r0:.2f}x, "
                         f"{'met' if r1 <= r0 * NOISE else 'MISSED'}")
    bare_full = _find(cells, "bare", "sqlite", "full", high)
    for chain in ("bare", "default", "all-optional"):
        delta = _find(cells, chain, "sqlite", "delta", high)
        if bare_full and bare_full.bytes and delta and delta.bytes is not None:
            share = delta.bytes / bare_full.bytes
            found.append(f"{chain} delta bytes/turn at H={high}: {share:.3f} of bare full, "
                         f"{'met' if share <= BYTES_TARGET else 'MISSED'}")
    return found


def _choices(value: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if value == "all":
        return allowed
    chosen = tuple(v.strip() for v in value.split(","))
    unknown = [v for v in chosen if v not in allowed]
    if unknown:
        raise SystemExit(f"unknown choice(s) {unknown}; pick from {', '.join(allowed)} or all")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=3, help="timed turns per cell")
    parser.add_argument("--history", default=",".join(map(str, HISTORY)),
                        help="comma-separated history lengths")
    parser.add_argument("--chain", default="all", help=f"{', '.join(CHAINS)} or all")
    parser.add_argument("--saver", default="all", help=f"{', '.join(SAVERS)} or all")
    parser.add_argument("--mode", default="all", help=f"{', '.join(MODES)} or all")
    parser.add_argument("--clock", choices=CLOCKS, default="cpu",
                        help="the clock growth and targets are computed on (both are "
                             "reported)")
    parser.add_argument("--durability", choices=("sync", "async", "exit"), default="sync",
                        help="checkpoint durability of every agent, bare included "
                             "(default: Antler's, sync)")
    args = parser.parse_args(argv)
    try:
        histories = tuple(sorted({int(h) for h in args.history.split(",")}))
    except ValueError:
        raise SystemExit(f"--history takes whole numbers, comma-separated: "
                         f"{args.history!r}") from None
    chains = _choices(args.chain, CHAINS)
    if "bare" not in chains:
        chains = ("bare", *chains)  # every ratio needs its baseline
    savers, modes = _choices(args.saver, SAVERS), _choices(args.mode, MODES)
    cells = []
    for history in histories:
        cells.extend(measure(history, chains, savers, modes, args.turns, args.durability,
                             args.clock))
    table, found = report(cells, histories, args.clock)
    print(f"One turn (message, one ls call, answer) on a thread of H earlier messages: "
          f"median of {args.turns} interleaved turns per cell, {args.durability} durability; "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(table)
    if found:
        print("\ntargets\n  " + "\n  ".join(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
