"""Benchmark: the CPU time each plugin's hooks take, per run and per history length.

    python -m benchmarks.bench_hooks [--scenario demo|long|replay] [--runs N]
                                     [--history 0,2000] [--chain default|all-optional]
                                     [--top N]

The chain benchmarks (`bench_fusion`, `bench_long_thread`) say how far a chain
is from a bare agent; this one says which hook the difference is spent in.
Every hook of every middleware class (`before_agent`, `before_model`,
`after_model`, `after_agent`, `wrap_model_call`, `wrap_tool_call`) is timed on
the calling thread's CPU clock (`time.thread_time`); a wrap hook's figure
excludes the handler it calls, so each row is the hook's own work.

- `--scenario demo` (default): the demo's two turns, as `bench_fusion` runs them
  (compiled default chain, in-memory saver). Reported per run: each hook's
  milliseconds and calls, and the process CPU time of the whole run. A run
  allocates the same objects in the same order every time, so a collection of
  the garbage collector lands in the same hook run after run, and a change
  that allocates a little more or less elsewhere moves it to another row:
  compare single rows with `--collector off` (the collector paused while the
  runs are timed), the total with it on.
- `--scenario long`: one turn of `bench_long_thread` (a message, one `ls` call,
  the answer) on threads of each `--history` length, in-memory saver. Each
  hook's milliseconds per turn at every length and the ratio of the largest
  length to the smallest: a hook whose work grows with the history shows a
  ratio well above 1 (the rule in `docs/plugins.md`: no work proportional to
  the whole history on every call).
- `--scenario replay`: the demo's hook calls, each hook's calls of one run played
  again on their own (a wrap hook's handler returns what it returned in the run),
  the fastest of 7 repeats of `--runs` plays. Per run and per call, each hook's
  own work with the rest of the graph out of the way: on a loaded machine the
  minimum leaves out most of what other processes and the collector add, so
  two versions of a hook compare within a few percent (warm caches: a hook that
  keeps a result across calls shows its kept cost). `--collector off` also
  pauses the garbage collector while timing, which leaves out the collections a
  hook's allocations bring on. A hook that calls a model (title, memory) calls
  the scripted one again on every play.

Timing wraps the classes before the agent is built, so it adds about a
microsecond per hook call to the figures; compare rows, not absolute sums, with
the other benchmarks.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import importlib
import pkgutil
import tempfile
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HOOKS = ("before_agent", "before_model", "after_model", "after_agent",
         "wrap_model_call", "wrap_tool_call")

Key = tuple[str, str]


class HookTimes:
    """Per (class, hook): CPU seconds and calls, summed over every thread."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[Key] = collections.Counter()
        self.calls: collections.Counter[Key] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, key: Key, seconds: float) -> None:
        with self._lock:
            self.seconds[key] += seconds
            self.calls[key] += 1

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _timed(times: HookTimes, cls: type, hook: str, function: Callable[..., Any]) -> Any:
    name = cls.__name__
    if hook.startswith("wrap_"):
        @functools.wraps(function)
        def wrapped(self: Any, request: Any, handler: Callable[..., Any], *args: Any,
                    **kwargs: Any) -> Any:
            inner = [0.0]

            def timed_handler(*a: Any, **k: Any) -> Any:
                started = time.thread_time()
                try:
                    return handler(*a, **k)
                finally:
                    inner[0] += time.thread_time() - started

            started = time.thread_time()
            try:
                return function(self, request, timed_handler, *args, **kwargs)
            finally:
                times.add((name, hook), time.thread_time() - started - inner[0])
        return wrapped

    @functools.wraps(function)
    def plain(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(self, *args, **kwargs)
        finally:
            times.add((name, hook), time.thread_time() - started)
    return plain


def instrument() -> HookTimes:
    """Time every middleware class's own hooks (import every plugin module first)."""
    from langchain.agents.middleware import AgentMiddleware

    _import_plugins()
    times = HookTimes()
    for cls in set(_subclasses(AgentMiddleware)):
        if not cls.__module__.startswith("antler."):
            continue
        for hook in HOOKS:
            if hook in cls.__dict__:
                setattr(cls, hook, _timed(times, cls, hook, cls.__dict__[hook]))
    return times


def demo(times: HookTimes, chain: str, runs: int, collector: bool = True,
         ) -> tuple[dict[Key, float], dict[Key, float], float]:
    """Per-run hook ms and calls on the demo scenario, and the process CPU ms per run
    (`collector`: whether the garbage collector runs while they are timed)."""
    from langgraph.checkpoint.memory import InMemorySaver

    from benchmarks.bench_fusion import AntlerRunner

    runner = AntlerRunner(chain, "fused", InMemorySaver(), Path(tempfile.mkdtemp()),
                          runs + 3)
    try:
        for _ in range(3):
            runner.prepare()()
        prepared = [runner.prepare() for _ in range(runs)]
        gc.collect()
        times.clear()
        if not collector:
            gc.disable()
        started = time.process_time()
        for run in prepared:
            run()
        spent = (time.process_time() - started) / runs * 1000
    finally:
        gc.enable()
        runner.close()
    return ({k: v / runs * 1000 for k, v in times.seconds.items()},
            {k: v / runs for k, v in times.calls.items()}, spent)


def replay(chain: str, plays: int, collector: bool) -> dict[Key, tuple[float, int]]:
    """Per hook: microseconds per run (its calls of one demo run played again) and calls."""
    from langchain.agents.middleware import AgentMiddleware
    from langgraph.checkpoint.memory import InMemorySaver

    from benchmarks.bench_fusion import AntlerRunner

    recorded: dict[Key, list[tuple[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any],
                                   list[Any] | None]]] = collections.defaultdict(list)
    originals: list[tuple[type, str, Any]] = []

    def recording(cls: type, hook: str, function: Callable[..., Any]) -> Any:
        key = (cls.__name__, hook)

        @functools.wraps(function)
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not hook.startswith("wrap_"):
                recorded[key].append((function, self, args, kwargs, None))
                return function(self, *args, **kwargs)
            request, handler = args[0], args[1]
            out: list[Any] = []
            recorded[key].append((function, self, args, kwargs, out))

            def keeping(*a: Any, **k: Any) -> Any:
                result = handler(*a, **k)
                out.append(result)
                return result
            return function(self, request, keeping, *args[2:], **kwargs)
        return wrapped

    _import_plugins()
    for cls in set(_subclasses(AgentMiddleware)):
        if cls.__module__.startswith("antler."):
            for hook in HOOKS:
                if hook in cls.__dict__:
                    originals.append((cls, hook, cls.__dict__[hook]))
                    setattr(cls, hook, recording(cls, hook, cls.__dict__[hook]))
    # Hooks that call a model (title, memory) call it again on every play: script enough turns.
    runner = AntlerRunner(chain, "fused", InMemorySaver(), Path(tempfile.mkdtemp()),
                          7 * plays + 4)
    try:
        runner.prepare()()
        marks = {key: len(calls) for key, calls in recorded.items()}
        runner.prepare()()
    finally:
        runner.close()
        for cls, hook, function in originals:
            setattr(cls, hook, function)

    def play(calls: list[Any]) -> None:
        for function, self, args, kwargs, out in calls:
            if out is None:
                function(self, *args, **kwargs)
            else:  # a wrap hook: its handler gives what it gave in the run
                result = out[-1] if out else None
                function(self, args[0], lambda *a, result=result, **k: result, *args[2:],
                         **kwargs)

    timings: dict[Key, tuple[float, int]] = {}
    for key, calls in recorded.items():
        last = calls[marks.get(key, 0):]
        if not last:
            continue
        gc.collect()
        if not collector:
            gc.disable()
        try:
            best = min(timeit.repeat(lambda last=last: play(last), number=plays, repeat=7))
        finally:
            gc.enable()
        timings[key] = (best / plays * 1e6, len(last))
    return timings


def _import_plugins() -> None:
    import antler.plugins

    for module in pkgutil.walk_packages(antler.plugins.__path__, "antler.plugins."):
        try:
            importlib.import_module(module.name)
        except Exception:  # an optional dependency a plugin needs is missing
            continue


def long_thread(times: HookTimes, chain: str, history: int, turns: int) -> dict[Key, float]:
    """Per-turn hook ms on a thread already holding `history` messages."""
    from benchmarks.bench_long_thread import Runner, Saver

    with tempfile.TemporaryDirectory(prefix="antler-hooks-") as scratch:
        base = Path(scratch)
        runner = Runner(chain, Saver("memory", base), "full", history, turns + 1,
                        base / "home", "sync")
        try:
            runner.turn()
            gc.collect()
            times.clear()
            for _ in range(turns):
                runner.turn()
        finally:
            runner.close()
    return {k: v / turns * 1000 for k, v in times.seconds.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("demo", "long", "replay"), default="demo")
    parser.add_argument("--collector", choices=("on", "off"), default="on",
                        help="demo and replay: the garbage collector while timing")
    parser.add_argument("--runs", type=int, default=20, help="timed runs (demo) or turns")
    parser.add_argument("--history", default="0,2000", help="history lengths (long)")
    parser.add_argument("--chain", choices=("default", "all-optional"), default="default")
    parser.add_argument("--top", type=int, default=40, help="rows to print")
    args = parser.parse_args(argv)
    if args.scenario == "replay":
        timings = replay(args.chain, args.runs, args.collector == "on")
        print(f"{args.chain} chain, demo hook calls of one run played again on their own: "
              f"fastest of 7 x {args.runs} plays, collector {args.collector}")
        print(f"{'middleware':40} {'hook':16} {'us/run':>8} {'calls':>6} {'us/call':>8}")
        for key, (micros, count) in sorted(timings.items(), key=lambda item: -item[1][0])[
                :args.top]:
            print(f"{key[0]:40} {key[1]:16} {micros:8.1f} {count:6d} {micros / count:8.1f}")
        print(f"{'all hooks':57} {sum(m for m, _ in timings.values()):8.1f}")
        return 0
    times = instrument()
    if args.scenario == "demo":
        ms, calls, total = demo(times, args.chain, args.runs, args.collector == "on")
        print(f"{args.chain} chain, demo scenario, {args.runs} runs (collector "
              f"{args.collector}): process CPU {total:.2f} ms per run, hooks "
              f"{sum(ms.values()):.2f} ms of it")
        print(f"{'middleware':40} {'hook':16} {'ms/run':>7} {'calls':>6} {'us/call':>8}")
        for key, value in sorted(ms.items(), key=lambda item: -item[1])[:args.top]:
            print(f"{key[0]:40} {key[1]:16} {value:7.3f} {calls[key]:6.1f} "
                  f"{value / calls[key] * 1000:8.1f}")
        return 0
    lengths = [int(h) for h in args.history.split(",")]
    table = {h: long_thread(times, args.chain, h, args.runs) for h in lengths}
    keys = sorted(set().union(*table.values()),
                  key=lambda k: -(table[lengths[-1]].get(k, 0.0)))
    print(f"{args.chain} chain, one turn on a thread of H messages (in-memory saver), "
          f"{args.runs} turns each: hook ms per turn")
    print(f"{'middleware':40} {'hook':16} " + " ".join(f"{'H=' + str(h):>8}" for h in lengths)
          + f" {'ratio':>6}")
    for key in keys[:args.top]:
        row = [table[h].get(key, 0.0) for h in lengths]
        ratio = row[-1] / row[0] if row[0] else float("inf")
        print(f"{key[0]:40} {key[1]:16} " + " ".join(f"{v:8.3f}" for v in row)
              + f" {ratio:6.2f}")
    print(f"{'all hooks':57} " + " ".join(f"{sum(table[h].values()):8.3f}" for h in lengths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
