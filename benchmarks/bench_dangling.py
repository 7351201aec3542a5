"""How the dangling-tool-call repair scales: 1k, 10k and 100k messages.

Run from the repository root: `python -m benchmarks.bench_dangling`.

Times `repair_messages` (best of N) on synthetic histories of exchanges
(human, assistant with one tool call, its result, assistant reply), a third of
whose tool calls never got a result, and reports it as a ratio to a plain
`list(history)` copy of the same history timed the same way in the same
process, so figures from different machines compare. A linear repair keeps
that ratio roughly flat as the history grows 10x and 100x; a quadratic one
would multiply it by ~10 per step. Also reported: the cost per message and the
pass-through case (a history with nothing to repair), which allocates nothing.

Then, per model call, the middleware on a thread whose history holds one
interrupted call near its start (`--kept` lengths): it keeps the one-pass repair
per thread and continues it with the messages each call adds, against the same
repair made from scratch on every call (`repair_messages` with the thread's scan
and its `Reuse`, what each call did before the repair was kept), interleaved in this process.
Each of `--runs` runs adds six model calls of two messages each (a tool call
and its result) to the same message objects, as the calls of one run see them;
the first call of a run after a checkpoint reload (new objects) still makes one
full pass, which this leaves out.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from antler.plugins.dangling_tool_call.middleware import (
    CLEAN,
    DanglingToolCallMiddleware,
    Reuse,
    _scan,
    repair_messages,
)
from benchmarks.clock import best_of

SIZES = (1_000, 10_000, 100_000)


def history(size: int, dangling_every: int = 3) -> list[BaseMessage]:
    """About ``size`` messages; every ``dangling_every``-th tool call has no result."""
    messages: list[BaseMessage] = []
    turn = 0
    while len(messages) < size:
        call_id = f"c{turn}"
        messages.append(HumanMessage(f"question {turn}"))
        messages.append(AIMessage(content="", tool_calls=[
            {"name": "bash", "args": {"command": "ls"}, "id": call_id, "type": "tool_call"}]))
        if dangling_every == 0 or turn % dangling_every:
            messages.append(ToolMessage("ok", tool_call_id=call_id, name="bash"))
        messages.append(AIMessage(f"answer {turn}"))
        turn += 1
    return messages[:size]


def interrupted_thread(size: int) -> list[BaseMessage]:
    """About ``size`` answered calls after one call that never got its result."""
    messages: list[BaseMessage] = [
        HumanMessage("list the files", id="h0"),
        AIMessage("", id="a0", tool_calls=[{"name": "ls", "args": {}, "id": "lost",
                                            "type": "tool_call"}]),
        HumanMessage("are you there?", id="h1")]
    turn = 1
    while len(messages) < size:
        messages += [AIMessage("", id=f"a{turn}", tool_calls=[
            {"name": "ls", "args": {}, "id": f"c{turn}", "type": "tool_call"}]),
            ToolMessage("ok", tool_call_id=f"c{turn}", id=f"t{turn}")]
        turn += 1
    return messages


def kept_per_call(size: int, runs: int, calls: int = 6) -> tuple[float, float]:
    """Median microseconds per model call: (the middleware's kept repair, from scratch)."""
    from langchain.agents.middleware.types import ModelRequest

    from antler.plugin_api import HistoryFold, RunContext

    class Runtime:
        context = RunContext(thread_id="bench")

    middleware = DanglingToolCallMiddleware()
    scans: HistoryFold[Any] = HistoryFold(CLEAN, _scan)
    reuse = Reuse()
    start = interrupted_thread(size)
    kept: list[float] = []
    scratch: list[float] = []
    for run in range(runs):
        messages = list(start)
        for call in range(calls):
            call_id = f"r{run}-{call}"
            messages = [*messages, AIMessage("", id=f"a-{call_id}", tool_calls=[
                {"name": "ls", "args": {}, "id": call_id, "type": "tool_call"}]),
                ToolMessage("ok", tool_call_id=call_id, id=f"t-{call_id}")]
            request = ModelRequest(model=None, messages=messages, system_message=None,
                                   tools=[], state={"messages": messages}, runtime=Runtime())
            began = time.thread_time()
            sent = middleware.wrap_model_call(request, lambda r: r).messages
            kept.append(time.thread_time() - began)
            began = time.thread_time()
            again = repair_messages(messages, scans("bench", messages), reuse=reuse)
            scratch.append(time.thread_time() - began)
            if again is None or [m.__dict__ for m in sent] != [m.__dict__ for m in again]:
                raise AssertionError("the kept repair and the one from scratch differ")
    return statistics.median(kept) * 1e6, statistics.median(scratch) * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=7, help="timed runs per case")
    parser.add_argument("--kept", default="20,200,2000",
                        help="history lengths of the kept-repair table (comma-separated)")
    args = parser.parse_args(argv)

    print(f"{'messages':>9} {'copy ms':>9} {'repair ms':>10} {'ratio':>7} {'ns/msg':>8} "
          f"{'clean ms':>9} {'clean ratio':>11}")
    ratios = []
    for size in SIZES:
        messages = history(size)
        clean = history(size, dangling_every=0)
        assert repair_messages(messages) is not None and repair_messages(clean) is None
        copy = best_of(args.runs, lambda m=messages: list(m))
        repair = best_of(args.runs, lambda m=messages: repair_messages(m))
        passthrough = best_of(args.runs, lambda m=clean: repair_messages(m))
        ratios.append(repair / copy)
        print(f"{size:>9,} {copy * 1e3:>9.3f} {repair * 1e3:>10.2f} {repair / copy:>7.0f} "
              f"{repair / size * 1e9:>8.0f} {passthrough * 1e3:>9.2f} "
              f"{passthrough / copy:>11.0f}")
    growth = ratios[-1] / ratios[0]
    print(f"\nratio growth from {SIZES[0]:,} to {SIZES[-1]:,} messages: {growth:.2f}x "
          f"(linear: ~1x; quadratic: ~{SIZES[-1] // SIZES[0]}x)")

    print(f"\nper model call, one interrupted call in the history (median of {args.runs} runs "
          "of 6 calls):")
    print(f"{'messages':>9} {'kept us':>9} {'scratch us':>11} {'ratio':>7}")
    for size in (int(part) for part in args.kept.split(",") if part):
        kept, scratch = kept_per_call(size, args.runs)
        print(f"{size:>9,} {kept:>9.0f} {scratch:>11.0f} {kept / scratch:>6.2f}x")


if __name__ == "__main__":
    main()
