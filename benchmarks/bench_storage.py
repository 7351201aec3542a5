"""Benchmark: the demo scenario on SQLite vs PostgreSQL checkpoints and store.

    python -m benchmarks.bench_storage [--runs N] [--url postgresql://...] [--async]

One run is what `antler demo` does, on a fresh thread: build the default lead
agent (subagents on), seed an interrupted exchange, upload two files, turn one
(a `bash` call and a delegated `task` in parallel, the answer, the title), turn
two (a clarification), then flush the memory queue into the shared store. The
same scenario runs with `storage.checkpointer: sqlite` (checkpoints and store
in files under a temporary base directory) and with the Postgres URL (its
checkpoints, owners, run locks and store in the database; a pool per agent).
Runs of the two backends alternate, so load on the machine affects them alike.

Reported per backend: the median milliseconds per run (agent build included,
as each `antler run` process pays it) and the median of the two turns alone,
and Postgres' ratio to SQLite. `--async` runs the turns through
`agent.graph.ainvoke`, so the async savers are measured too.

The Postgres URL is `--url`, else $ANTLER_TEST_POSTGRES_URL (`.ci/postgres up`
starts a local server); without one the benchmark says so and exits 0. The
figures are from a loopback server with `fsync=off` (what `.ci/postgres`
starts): a networked, durable server adds its round trips and flushes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from antler.chain.config import parse_config
from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
from antler.plugin_api.registry import discover
from antler.runtime import demo
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage import open_storage


def _clear_thread(url: str, base: Path) -> None:
    """Drop the demo thread from the database so each run starts it afresh."""
    storage = open_storage(url, base, store=None)
    try:
        storage.saver.delete_thread(demo.THREAD_ID)
        assert storage.owners is not None
        storage.owners.forget(demo.THREAD_ID)
    finally:
        storage.close()


def one_run(registry: Any, checkpointer: str, base: Path, *, use_async: bool,
            ) -> tuple[float, float]:
    """(seconds for the whole scenario, seconds for its two turns)."""
    config = parse_config(yaml.safe_dump({"storage": {"checkpointer": checkpointer}}),
                          registry)
    started = time.perf_counter()
    agent = create_agent(
        config, model=ScriptedChatModel(demo.LEAD_SCRIPT),
        subagent_model=ScriptedChatModel(demo.SUBAGENT_SCRIPT),
        runtime=RuntimeOptions(subagents_enabled=True, user_id=demo.USER_ID),
        services={TITLE_MODEL: ScriptedChatModel(demo.TITLE_SCRIPT),
                  MEMORY_MODEL: ScriptedChatModel(demo.MEMORY_SCRIPT)},
        base_dir=base, registry=registry)
    with agent:
        demo._seed_interrupted_history(agent)
        files = demo._upload_two_files(agent)
        turns_started = time.perf_counter()
        prompts = [("Analyse the uploaded files, please.", files),
                   ("Now draft a revenue forecast.", [])]
        if use_async:
            async def both() -> None:
                for text, uploads in prompts:
                    await agent.graph.ainvoke(
                        agent.input(text, uploads), config=agent.run_config(demo.THREAD_ID),
                        context=agent.context(demo.THREAD_ID, demo.USER_ID))

            with agent.hold(demo.THREAD_ID, demo.USER_ID):
                asyncio.run(both())
        else:
            for text, uploads in prompts:
                agent.invoke(text, thread_id=demo.THREAD_ID, user_id=demo.USER_ID,
                             files=uploads)
        turns = time.perf_counter() - turns_started
        demo._flush_memory(agent)
    return time.perf_counter() - started, turns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per backend (default 5)")
    parser.add_argument("--url", default=os.environ.get("ANTLER_TEST_POSTGRES_URL"),
                        help="Postgres URL (default: $ANTLER_TEST_POSTGRES_URL)")
    parser.add_argument("--async", dest="use_async", action="store_true",
                        help="run the turns with ainvoke (the async savers)")
    args = parser.parse_args(argv)
    if not args.url:
        print("no Postgres URL: pass --url or start one with `eval \"$(.ci/postgres up)\"`; "
              "nothing measured")
        return 0
    registry = discover()
    backends = {"sqlite": "sqlite", "postgres": args.url}
    totals: dict[str, list[float]] = {name: [] for name in backends}
    turns: dict[str, list[float]] = {name: [] for name in backends}
    with tempfile.TemporaryDirectory(prefix="antler-bench-storage-") as scratch:
        for run in range(args.runs + 1):  # the first round warms imports and the schema
            for name, checkpointer in backends.items():
                base = Path(scratch) / f"{name}-{run}"
                if name == "postgres":
                    _clear_thread(checkpointer, base)
                total, turn = one_run(registry, checkpointer, base, use_async=args.use_async)
                if run:
                    totals[name].append(total)
                    turns[name].append(turn)
    mode = "async (ainvoke)" if args.use_async else "sync (invoke)"
    print(f"demo scenario, {args.runs} runs per backend, {mode}; medians in ms")
    print(f"{'backend':<10} {'whole run':>10} {'two turns':>10}")
    for name in backends:
        print(f"{name:<10} {statistics.median(totals[name]) * 1000:>10.1f} "
              f"{statistics.median(turns[name]) * 1000:>10.1f}")
    whole = statistics.median(totals["postgres"]) / statistics.median(totals["sqlite"])
    turn = statistics.median(turns["postgres"]) / statistics.median(turns["sqlite"])
    print(f"postgres / sqlite: whole run {whole:.2f}x, two turns {turn:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
