"""Benchmark: what one more wrap layer with nothing to do costs inside a real run.

    python -m benchmarks.bench_wrap_layer [--runs N] [--layers K] [--clock cpu|wall]

The default chain, compiled, in-memory saver, commands in the local provider
(`bench_fusion`'s `default` cell), runs the demo's two turns interleaved with
the same chain plus K extension middlewares (`extensions.middlewares`) whose
`wrap_model_call` and `wrap_tool_call` hand the request straight on, as a
plugin does when the request gives it nothing to do. The difference of the
medians, over K times the wrap calls a run makes (each pass-through counts its
calls), is the cost of one such layer per call: the chain's own glue around a
wrap hook (the isolation wrapper, the composition, the fused layer), in a run
with its cold caches, not a tight loop. Target: 50 us per layer and call.

A bare `create_agent` runs beside them, so the report also gives each chain's
ratio to bare.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import AntlerRunner, BareRunner, counting_saver
from benchmarks.clock import CLOCKS
from benchmarks.clock import clock as clock_of
from benchmarks.interval import median_ratio_interval

TARGET_US = 50.0
CALLS = [0]
"""Wrap calls made by the pass-through layers (all of them), for the per-call figure."""


def _pass_through_class(index: int) -> type:
    from langchain.agents.middleware import AgentMiddleware

    def wrap_model_call(self: Any, request: Any, handler: Callable[[Any], Any]) -> Any:
        CALLS[0] += 1
        return handler(request)

    async def awrap_model_call(self: Any, request: Any, handler: Any) -> Any:
        CALLS[0] += 1
        return await handler(request)

    def wrap_tool_call(self: Any, request: Any, handler: Callable[[Any], Any]) -> Any:
        CALLS[0] += 1
        return handler(request)

    async def awrap_tool_call(self: Any, request: Any, handler: Any) -> Any:
        CALLS[0] += 1
        return await handler(request)

    return type(f"PassThrough{index}", (AgentMiddleware,), {
        "__module__": __name__, "__doc__": "Hands every request on unchanged.",
        "wrap_model_call": wrap_model_call, "awrap_model_call": awrap_model_call,
        "wrap_tool_call": wrap_tool_call, "awrap_tool_call": awrap_tool_call})


MAX_LAYERS = 16
for _index in range(MAX_LAYERS):
    globals()[f"PassThrough{_index}"] = _pass_through_class(_index)


class LayeredRunner(AntlerRunner):
    """The default chain with `layers` pass-through extension middlewares."""

    def __init__(self, layers: int, saver: Any, base: Path, runs: int) -> None:
        import benchmarks.bench_fusion as fusion

        original = fusion.chain_config

        def with_layers(name: str) -> tuple[Any, Any]:
            config, runtime = original(name)
            if layers:
                from antler.chain.config import parse_config
                from antler.plugin_api.registry import discover

                text = "extensions:\n  middlewares:\n" + "".join(
                    f"    - {__name__}:PassThrough{i}\n" for i in range(layers))
                extra = parse_config(text, discover(), source="bench_wrap_layer")
                config.sections["extensions"] = extra.sections["extensions"]
            return config, runtime

        fusion.chain_config = with_layers
        try:
            super().__init__("default", "fused", saver, base, runs)
        finally:
            fusion.chain_config = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--layers", type=int, default=8, choices=range(1, MAX_LAYERS + 1),
                        metavar=f"1-{MAX_LAYERS}")
    parser.add_argument("--clock", choices=CLOCKS, default="cpu")
    args = parser.parse_args(argv)
    clock = clock_of(args.clock)
    load_before = os.getloadavg()[0]
    total = args.runs + args.warmup
    with contextlib.ExitStack() as stack:
        runners: dict[str, Any] = {}
        for name in ("bare", "default", "layered"):
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="antler-bench-")))
            saver, _counter, close = counting_saver("memory", base)
            stack.callback(close)
            runner: Any = (BareRunner(saver, total, base) if name == "bare" else
                           LayeredRunner(args.layers if name == "layered" else 0, saver,
                                         base / "home", total))
            stack.callback(runner.close)
            runners[name] = runner
        for _ in range(args.warmup):
            for runner in runners.values():
                runner.prepare()()
        times: dict[str, list[float]] = {name: [] for name in runners}
        calls = 0
        gc.collect()
        for _ in range(args.runs):
            for name, runner in runners.items():
                run = runner.prepare()
                before = CALLS[0]
                started = clock()
                run()
                times[name].append((clock() - started) * 1000)
                calls += CALLS[0] - before
    medians = {name: statistics.median(values) for name, values in times.items()}
    per_run = calls / args.runs / args.layers
    extra_ms = medians["layered"] - medians["default"]
    per_layer_us = extra_ms * 1000 / args.layers / per_run if per_run else float("nan")
    interval = median_ratio_interval(times["layered"], times["default"])
    print(f"One wrap layer with nothing to do: the default chain (compiled, in-memory saver) "
          f"with and without {args.layers} pass-through extension middlewares, median of "
          f"{args.runs} interleaved runs, {args.clock} time; load average {load_before:.1f} "
          f"at the start, {os.getloadavg()[0]:.1f} at the end")
    for name in runners:
        print(f"  {name:<8} {medians[name]:7.2f} ms  {medians[name] / medians['bare']:5.2f}x bare")
    spread = (f" (layered/default {interval[0]:.3f}-{interval[1]:.3f}x, 90% bootstrap interval)"
              if interval else "")
    print(f"  {per_run:.1f} wrap calls per layer and run; {extra_ms:+.2f} ms per run for "
          f"{args.layers} layers{spread}")
    verdict = "met" if per_layer_us <= TARGET_US else "MISSED"
    print(f"  one layer: {per_layer_us:.1f} us per call (target {TARGET_US:.0f} us): {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
