"""Benchmark: one turn run sync, async, and as LangGraph Server runs it, on one chain.

    python -m benchmarks.bench_async [--runs N] [--warmup N] [--chain default|full]

The turn: the model runs a shell command and delegates a task in parallel,
then answers (title and memory submission at the end), on a fresh thread each
time, with LangGraph's `InMemorySaver`. Three variants of one agent, runs
interleaved so load on the machine affects them alike:

* `sync`: `AntlerAgent.invoke`;
* `async`: `AntlerAgent.ainvoke` (async hooks, sandbox and file work in worker
  threads, the thread held from a worker thread);
* `served`: the graph invoked as LangGraph Server invokes it, with an
  authenticated user in `configurable` and a client context, so every
  `run_context` call resolves the identity from the auth user.

Reported: the median milliseconds per run and the ratio to `sync`. Scripted
models; no network.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from antler.contracts.runcontext import AUTH_USER_KEY
from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.demo import all_optional_config
from antler.runtime.models import ScriptedChatModel

TURN: list[Any] = [
    {"content": "", "tool_calls": [
        {"name": "bash", "args": {"command": "echo hi"}},
        {"name": "task", "args": {"description": "note", "prompt": "Say done."}}]},
    "All done.",
]
VARIANTS = ("sync", "async", "served")


class NoQueue:
    """A memory queue that keeps nothing: extraction must not disturb the timing."""

    def add(self, **_: Any) -> None:
        return None

    def flush(self) -> int:
        return 0

    def close(self, **_: Any) -> None:
        return None


def build(home: Path, chain: str, turns: int) -> Any:
    registry = discover()
    config = all_optional_config(registry) if chain == "full" else None
    return create_agent(
        config, model=ScriptedChatModel(TURN * turns, model_name="lead"),
        subagent_model=ScriptedChatModel(["done"] * turns, model_name="sub"),
        runtime=RuntimeOptions(subagents_enabled=True),
        services={TITLE_MODEL: ScriptedChatModel(["A title"] * turns),
                  MEMORY_MODEL: ScriptedChatModel(["[]"]), "memory_queue": NoQueue()},
        base_dir=home, registry=registry, checkpointer="memory")


def run_once(agent: Any, variant: str, thread: str) -> float:
    started = time.perf_counter()
    if variant == "sync":
        agent.invoke("go", thread_id=thread, user_id="alice")
    elif variant == "async":
        asyncio.run(agent.ainvoke("go", thread_id=thread, user_id="alice"))
    else:
        agent.graph.invoke(
            {"messages": [HumanMessage(content="go")]},
            config={"configurable": {"thread_id": thread,
                                     AUTH_USER_KEY: {"identity": "alice", "roles": ["agent"]}}},
            context={"user_id": "mallory", "roles": ["admin"]})
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--chain", choices=("default", "full"), default="default")
    args = parser.parse_args(argv)
    rounds = args.warmup + args.runs
    times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as scratch:
        agent = build(Path(scratch), args.chain, rounds * len(VARIANTS))
        with agent:
            for number in range(rounds):
                for variant in VARIANTS:
                    elapsed = run_once(agent, variant, f"{variant}-{number}")
                    if number >= args.warmup:
                        times[variant].append(elapsed)
    base = statistics.median(times["sync"])
    print(f"chain {args.chain}: {args.runs} runs per variant, interleaved, InMemorySaver")
    for variant in VARIANTS:
        median = statistics.median(times[variant])
        print(f"  {variant:<7} {median:8.1f} ms  {median / base:5.2f}x sync")


if __name__ == "__main__":
    main()
