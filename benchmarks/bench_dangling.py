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
"""

from __future__ import annotations

import argparse

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from antler.plugins.dangling_tool_call.middleware import repair_messages
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=7, help="timed runs per case")
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


if __name__ == "__main__":
    main()
