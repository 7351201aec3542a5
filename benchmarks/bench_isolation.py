"""Benchmark: what run-time isolation (`on_error`) costs when no hook raises.

    python -m benchmarks.bench_isolation [--runs N] [--calls N] [--check]

Two measurements, each a ratio to the same middlewares without isolation,
measured in the same process:

* a turn through 35 do-nothing middlewares that each have `before_model`,
  `after_model`, `wrap_model_call` and `wrap_tool_call` (two model calls and one
  tool call: 210 hook calls per turn), compiled as `antler.agent.create_agent` does
  by default (hook nodes fused, model-call hooks inside the model node) and as
  LangChain's own graph, with the hooks under `fail`, under `skip` and bare.
  Runs are interleaved, and timed in CPU time of this process, so that other
  load on a shared machine affects the variants alike; the median is
  reported. Target: within 5% of bare (`--check` makes a miss the exit
  status). The wrappers carry the hooks' signatures, which LangSmith's
  `traceable` reads on every wrap-hook call: that lookup is cheaper than for
  a bare hook, so the isolated turn can come out faster.
* one hook call on its own (a node hook and a wrap hook with a do-nothing
  handler, and a wrap hook returning a message of its own, which the state-write
  guard reads), in nanoseconds: the wrapper's own cost; and one tool call's
  `invoke`, bare and guarded as a plugin's tool.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

MIDDLEWARES = 35
TARGET = 1.05
VARIANTS = ("bare", "fail", "skip", "owned")
"""`owned`: `fail` with the state-write guard every built chain gets (each middleware may
write only the shared channels: `antler.chain.stateowners`), and the tool guarded as a
plugin's tool is (`antler.runtime.toolguard`)."""


def _middleware_class() -> type:
    from langchain.agents.middleware import AgentMiddleware

    class Noop(AgentMiddleware):
        def before_model(self, state: Any, runtime: Any) -> None:
            return None

        def after_model(self, state: Any, runtime: Any) -> None:
            return None

        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return handler(request)

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return handler(request)

    return Noop


def _own_message_class() -> type:
    """A wrap_tool_call that calls its handler and returns a message of its own (as a hook
    that truncates or cleans a tool's output does): the write guard reads that result."""
    from langchain_core.messages import ToolMessage

    own = ToolMessage("ok", tool_call_id="c")

    class OwnMessage(_middleware_class()):  # type: ignore[misc]
        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            handler(request)
            return own

    return OwnMessage


def _chain(variant: str, base: type | None = None) -> list[Any]:
    from antler.runtime.isolation import isolate

    base = base or _middleware_class()
    # One class each: LangChain names a middleware after its class, and names must differ.
    middlewares = [type(f"Noop{index}", (base,), {})() for index in range(MIDDLEWARES)]
    if variant == "bare":
        return middlewares
    if variant == "owned":
        from antler.plugin_api.spec import SHARED_STATE_KEYS

        return isolate(middlewares, ["fail"] * MIDDLEWARES, None,
                       [SHARED_STATE_KEYS] * MIDDLEWARES, {})
    return isolate(middlewares, [variant] * MIDDLEWARES)  # type: ignore[list-item]


def _graph(variant: str, compiled: bool, runs: int) -> Callable[[], None]:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from antler.compiler import create_fused_agent
    from benchmarks.bench_fusion import scripted

    @tool
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    turns: list[Any] = []
    for _ in range(runs):
        turns += [{"content": "", "tool_calls": [{"name": "echo", "args": {"text": "hi"}}]},
                  "done"]
    tools: list[Any] = [echo]
    if variant == "owned":  # a plugin's tool, as a built chain guards it
        tools = _guarded(tools)
    kwargs: dict[str, Any] = {"model": scripted(turns), "tools": tools}
    middlewares = _chain(variant)
    if compiled:
        graph, _plan = create_fused_agent(middlewares, **kwargs)
    else:
        graph = create_agent(middleware=middlewares, **kwargs)

    def run() -> None:
        graph.invoke({"messages": [{"role": "user", "content": "go"}]})

    return run


def turn_ratios(runs: int, warmup: int) -> dict[tuple[bool, str], float]:
    """Median ms per turn for each (compiled, variant)."""
    cells = {(compiled, variant): _graph(variant, compiled, runs + warmup)
             for compiled in (True, False) for variant in VARIANTS}
    samples: dict[tuple[bool, str], list[float]] = {key: [] for key in cells}
    for round_ in range(runs + warmup):
        for key, run in cells.items():
            gc.collect()
            started = time.process_time()
            run()
            if round_ >= warmup:
                samples[key].append((time.process_time() - started) * 1000)
    return {key: statistics.median(values) for key, values in samples.items()}


def call_costs(calls: int) -> dict[tuple[str, str], float]:
    """Nanoseconds per direct hook call, bare and isolated."""
    costs = {}
    for variant in VARIANTS:
        middleware = _chain(variant)[0]
        for hook, call in (("before_model", lambda m=middleware: m.before_model({}, None)),
                           ("wrap_tool_call",
                            lambda m=middleware: m.wrap_tool_call(None, _handler))):
            best = min(timeit.repeat(call, number=calls, repeat=5))
            costs[hook, variant] = best / calls * 1e9
        middleware = _chain(variant, _own_message_class())[0]
        best = min(timeit.repeat(lambda m=middleware: m.wrap_tool_call(None, _handler),
                                 number=calls, repeat=5))
        costs["own message", variant] = best / calls * 1e9
    return costs


def _handler(request: Any) -> Any:
    return request


def _guarded(tools: list[Any]) -> list[Any]:
    from antler.plugin_api.spec import SHARED_STATE_KEYS
    from antler.runtime.toolguard import guard_tools

    return guard_tools(tools, "noop", "fail", SHARED_STATE_KEYS, {})


def tool_costs(calls: int) -> dict[str, float]:
    """Nanoseconds per tool call (a tool call's `invoke`, as the tools node makes it), bare
    and guarded as a plugin's tool, for a tool returning a string and one returning a
    `Command` that writes `messages`."""
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langgraph.types import Command

    @tool
    def text() -> str:
        """Answer."""
        return "ok"

    @tool
    def command() -> Any:
        """Answer with a Command."""
        return Command(update={"messages": [ToolMessage("ok", tool_call_id="c")]})

    costs = {}
    for bare in (text, command):
        call = {"name": bare.name, "args": {}, "id": "c", "type": "tool_call"}
        for variant, runnable in (("bare", bare), ("guarded", _guarded([bare])[0])):
            best = min(timeit.repeat(lambda r=runnable, c=call: r.invoke(c), number=calls,
                                     repeat=5))
            costs[f"{bare.name} {variant}"] = best / calls * 1e9
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--check", action="store_true", help="Exit 1 when a target is missed.")
    args = parser.parse_args(argv)

    medians = turn_ratios(args.runs, args.warmup)
    print(f"Isolation cost: {MIDDLEWARES} do-nothing middlewares, 210 hook calls per turn; "
          f"median of {args.runs} interleaved turns")
    print(f"  {'graph':<10} {'variant':<8} {'CPU ms':>8} {'x bare':>7}")
    missed = False
    for compiled in (True, False):
        bare = medians[compiled, "bare"]
        for variant in VARIANTS:
            ratio = medians[compiled, variant] / bare
            missed = missed or ratio > TARGET
            print(f"  {'compiled' if compiled else 'unfused':<10} {variant:<8} "
                  f"{medians[compiled, variant]:>8.2f} {ratio:>6.3f}x")
    print(f"  target ({TARGET:.2f}x bare): {'MISSED' if missed else 'met'}")
    costs = call_costs(args.calls)
    print("One hook call, ns (best of 5):")
    for hook in ("before_model", "wrap_tool_call", "own message"):
        print(f"  {hook:<15} " + "  ".join(f"{v} {costs[hook, v]:.0f}" for v in VARIANTS))
    tools = tool_costs(max(args.calls // 50, 200))
    print("One tool call's invoke, ns (best of 5): a plugin's tool, guarded, against bare:")
    for kind in ("text", "command"):
        bare, guarded = tools[f"{kind} bare"], tools[f"{kind} guarded"]
        print(f"  returns {kind:<8} bare {bare:.0f}  guarded {guarded:.0f}  "
              f"({guarded / bare:.3f}x)")
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
