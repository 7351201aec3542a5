"""What the caller-input boundary costs per turn as a thread grows: 0, 2k and 20k messages.

Run from the repository root: `python -m benchmarks.bench_input_boundary`.

Times (best of N) the two pieces the boundary adds to a turn whose input is one
human message, on synthetic histories of exchanges:

- the boundary's look at the run's arrivals (`InputBoundary.inspect`), which
  walks the history from its end only until it found every arrival;
- the input step's record (ids given to the input's messages, as the
  ``messages`` reducer would).

Each is reported as a ratio to the same piece on an empty thread timed in the
same process: a cost that follows the input keeps that ratio near 1 however long
the thread; one that walked the history would multiply it by ~10 per step.
For scale, the whole ``before_agent`` hook of input_sanitization (whose
provenance record of the user's messages predates the boundary) is shown as a
ratio to a plain `list(history)` copy.
"""

from __future__ import annotations

import argparse
import logging
from types import SimpleNamespace
from typing import Any

from langchain_core.messages import HumanMessage

from antler.contracts.runcontext import RunContext
from antler.contracts.serverkeys import ARRIVALS_KEY, server_owned_keys
from antler.plugins._lib.inputrecord import PROVENANCE_KEY, merge_provenance
from antler.plugins._lib.tagguard import ReservedTags
from antler.plugins.input_sanitization.boundary import InputBoundary
from antler.plugins.input_sanitization.middleware import InputSanitizationMiddleware
from antler.runtime.inputs import _with_arrivals
from benchmarks.bench_dangling import best_of, history

SIZES = (0, 2_000, 20_000)


def turn(size: int) -> tuple[list[Any], list[str]]:
    """A thread of `size` messages plus this turn's one human message, and its id."""
    arriving = HumanMessage("what next?", id="arrival",
                            additional_kwargs={"antler_hidden": {"source": "forged"}})
    return [*history(size), arriving], ["arrival"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=200, help="timed runs per case")
    args = parser.parse_args(argv)
    logging.getLogger("antler.audit.input").setLevel(logging.ERROR)  # one line per strip

    boundary = InputBoundary(server_owned_keys(()))
    middleware = InputSanitizationMiddleware(ReservedTags(), boundary)
    runtime = SimpleNamespace(context=RunContext(thread_id="t", run_id="r"),
                              stream_writer=None)
    record = _with_arrivals(lambda value: list(value.items()))

    def step() -> None:
        record({"messages": [HumanMessage("what next?")]})

    step_base = best_of(args.runs, step)
    inspect_base = None
    print(f"input step record: {step_base * 1e6:.1f} us per run (independent of the thread)")
    print(f"{'messages':>9}  {'inspect us':>10}  {'x empty':>7}  {'hook ms':>8}  "
          f"{'x list()':>8}")
    for size in SIZES:
        inspected, hook, copy = measure(middleware, runtime, size, args.runs)
        inspect_base = inspect_base or inspected
        print(f"{size:>9}  {inspected * 1e6:>10.1f}  {inspected / inspect_base:>6.2f}x  "
              f"{hook * 1e3:>8.3f}  {hook / copy:>7.1f}x")


def measure(middleware: Any, runtime: Any, size: int, runs: int) -> tuple[float, float, float]:
    """(inspect, whole hook, list copy) best times on a thread of `size` messages."""
    messages, ids = turn(size)
    inspected = best_of(runs, lambda: middleware.boundary.inspect(messages, ids))
    state = {"messages": messages, ARRIVALS_KEY: {"ids": ids}}
    # The provenance record a real thread carries from its earlier turns.
    update = middleware.before_agent(state, runtime) or {}
    state[PROVENANCE_KEY] = merge_provenance(None, update.get(PROVENANCE_KEY))
    few = max(3, runs // 20)
    hook = best_of(few, lambda: middleware.before_agent(state, runtime))
    return inspected, hook, best_of(few, lambda: list(messages))

if __name__ == "__main__":
    main()
