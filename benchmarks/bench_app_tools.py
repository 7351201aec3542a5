"""Benchmark: an application tool's call, quiet against LangChain's run, in one process.

    python -m benchmarks.bench_app_tools [--calls N] [--rounds N]

The tools a caller passes to `create_agent` are called quietly when nothing
observes the call (`antler.runtime.quiettools.quiet_tools`). This times a tool
call as the tools node makes it (`invoke` with a tool call and the node's config,
no handler) on the caller's tool (LangChain's run) and on its quiet copy,
interleaved, for a ``@tool`` with two arguments and one with an injected call id.
Reported: the median microseconds of the calling thread per call of each and the
median paired difference.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Annotated, Any

from langchain_core.tools import InjectedToolCallId, tool

from benchmarks.interval import paired_medians


def _tools() -> list[Any]:
    @tool
    def forecast(city: str, days: int = 1) -> str:
        """The weather in `city` for the next `days` days."""
        return f"{city}: sunny for {days} day(s)"

    @tool
    def whoami(call_id: Annotated[str, InjectedToolCallId]) -> str:
        """The id of this call."""
        return f"call {call_id}"

    return [forecast, whoami]


LOUD = "LangChain's run"
ARGS = {"forecast": {"city": "Oslo", "days": 2}, "whoami": {}}


def measure(calls: int, rounds: int) -> dict[str, dict[str, float]]:
    from antler.plugin_api.toolargs import with_resolved_signatures
    from antler.runtime.quiettools import quiet_tools

    tools = with_resolved_signatures(_tools())
    pairs = [(tool.name, {LOUD: tool, "quiet": quiet})
             for tool, quiet in zip(tools, quiet_tools(tools), strict=True)]
    config: dict[str, Any] = {"configurable": {}, "metadata": {}, "tags": []}
    samples: dict[str, dict[str, list[float]]] = {}
    for rnd in range(rounds + 1):
        for name, variants in pairs:
            call = {"name": name, "args": ARGS[name], "id": "call_1", "type": "tool_call"}
            order = list(variants) if rnd % 2 else list(variants)[::-1]
            for which in order:
                tool = variants[which]
                started = time.thread_time()
                for _ in range(calls):
                    tool.invoke(dict(call, args=dict(call["args"])), config)
                spent = (time.thread_time() - started) / calls * 1e6
                if rnd:
                    samples.setdefault(name, {}).setdefault(which, []).append(spent)
    return paired_medians(samples, LOUD, "quiet")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per sample")
    parser.add_argument("--rounds", type=int, default=15, help="samples per variant")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    results = measure(args.calls, args.rounds)
    print(f"us per call (thread CPU), medians of {args.rounds} samples of {args.calls} calls; "
          f"load {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    for name, figures in results.items():
        loud = figures[LOUD]
        print(f"{name:<10} LangChain's run {loud:7.1f}"
              f"  quiet {figures['quiet']:7.1f}  saved {figures['difference']:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
