"""What durable_context costs per model call as a thread grows: 1k, 10k and 100k messages.

Run from the repository root: `python -m benchmarks.bench_durable`.

A thread of earlier runs (each a user message, a `task` call, its result and
a reply) ends with the current run: its user message, a `task` call and its
result. One model step captures twice (`before_model` sees the result,
`after_model` the reply) and projects once. Timed (best of N): that step
with the cursor the previous capture left, a capture that ignores the
cursor and reads back to the run's start instead, and the projection; each
as a ratio to `list(history)` timed the same way in the same process. A
capture that follows only the new messages keeps its time flat while the
thread grows 100x, so its ratio to the copy falls ~10x per step.
"""

from __future__ import annotations

import argparse
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from antler.contracts.durable import merge_delegations
from antler.contracts.runcontext import RunContext
from antler.plugins.durable_context.middleware import CURSOR_KEY, DurableContextMiddleware
from benchmarks.clock import best_of

SIZES = (1_000, 10_000, 100_000)


class Runtime:
    context = RunContext(thread_id="t", run_id="current")


def _task(turn: int) -> tuple[AIMessage, ToolMessage]:
    call_id = f"c{turn}"
    call = AIMessage("", id=f"a{turn}", tool_calls=[
        {"name": "task", "args": {"description": f"part {turn}", "prompt": "p"},
         "id": call_id, "type": "tool_call"}])
    result = ToolMessage(f"done {turn}", id=f"r{turn}", tool_call_id=call_id, name="task",
                         additional_kwargs={"subagent_status": "completed",
                                            "subagent_result_brief": f"done {turn}"})
    return call, result


def thread(size: int) -> list[BaseMessage]:
    """About `size` messages of earlier runs, then the current run's call and result."""
    messages: list[BaseMessage] = []
    turn = 0
    while len(messages) < size - 3:
        messages += [HumanMessage(f"q{turn}", id=f"h{turn}"), *_task(turn),
                     AIMessage(f"a{turn}", id=f"x{turn}")]
        turn += 1
    return [*messages, HumanMessage("now", id="now"), *_task(turn)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=7, help="timed runs per case")
    args = parser.parse_args(argv)
    middleware = DurableContextMiddleware()
    runtime = Runtime()

    print(f"{'messages':>9} {'copy ms':>9} {'step us':>9} {'ratio':>7} "
          f"{'no cursor us':>13} {'project us':>11}")
    steps = []
    for size in SIZES:
        messages = thread(size)
        ledger = merge_delegations([], [{"id": f"c{i}", "status": "completed", "run_id": "old",
                                         "description": f"part {i}"} for i in range(60)])
        call = messages[-2]
        state: dict[str, Any] = {"messages": messages, "delegations": ledger,
                                 CURSOR_KEY: {"run_id": "current", "message_id": call.id,
                                              "skill_reads": {}}}
        reply = [*messages, AIMessage("final", id="final")]

        def step(state: dict[str, Any] = state, reply: list[Any] = reply) -> None:
            update = middleware._capture(state, runtime) or {}
            after = {**state, "messages": reply,
                     "delegations": merge_delegations(state["delegations"],
                                                      update.get("delegations")),
                     CURSOR_KEY: update.get(CURSOR_KEY, state[CURSOR_KEY])}
            middleware._capture(after, runtime)

        uncursored = {**state, CURSOR_KEY: None}
        copy = best_of(args.runs, lambda m=messages: list(m))
        timed = best_of(args.runs, step)
        fresh = best_of(args.runs, lambda s=uncursored: middleware._capture(s, runtime))
        project = best_of(args.runs, lambda s=state: middleware._projected(_Request(s)))
        steps.append(timed)
        print(f"{size:>9,} {copy * 1e3:>9.3f} {timed * 1e6:>9.1f} {timed / copy:>7.3f} "
              f"{fresh * 1e6:>13.1f} {project * 1e6:>11.1f}")
    print(f"\nstep time growth from {SIZES[0]:,} to {SIZES[-1]:,} messages: "
          f"{steps[-1] / steps[0]:.2f}x (following new messages only: ~1x; "
          f"reading the history: ~{SIZES[-1] // SIZES[0]}x)")


class _Request:
    """The part of a model request the projection reads and rewrites."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.messages = state["messages"]
        self.runtime = None  # no run: the record shows no delegation as this run's

    def override(self, **changes: Any) -> _Request:
        return self


if __name__ == "__main__":
    main()
