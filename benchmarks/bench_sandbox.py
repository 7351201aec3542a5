"""Benchmark: what one shell command costs in each sandbox provider, against a plain subprocess.

    python -m benchmarks.bench_sandbox [--runs N] [--command TEXT]

Three ways to run the same command, interleaved so that load on the machine
affects them alike:

* ``plain``: ``subprocess.run(["bash", "-c", command], capture_output=True)``,
  what a bare agent's stand-in tool does (the baseline);
* ``local``: `LocalSandbox.execute_command`: its own session, the sweep token
  (and the watchdog that sweeps should the harness die), both pipes drained
  with a selector, output caps and virtual-path rewriting;
* ``bwrap``: `BwrapSandbox.execute_command`: the same runner, the command in
  fresh user, mount, PID, network, IPC and UTS namespaces holding only the
  thread's directories and a read-only system (skipped when bubblewrap is not
  usable here).

Reported: the median milliseconds per command of each and its ratio to plain.
No target: the figures say what isolation costs per tool call.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def runners(base: Path, command: str) -> tuple[dict[str, Callable[[], object]], list[object]]:
    """The ways to run ``command``, by name, and the providers to shut down afterwards."""
    from antler.runtime.paths import PathLayout
    from antler.runtime.sandbox import load_sandbox_provider
    from antler.runtime.sandbox.bwrap import bwrap_status

    layout = PathLayout(base)
    workdir = base / "plain"
    workdir.mkdir()
    found: dict[str, Callable[[], object]] = {
        "plain": lambda: subprocess.run(["bash", "-c", command], cwd=workdir,
                                        capture_output=True, check=False)}
    providers: list[object] = []
    names = ["local"] + (["bwrap"] if bwrap_status().usable else [])
    for name in names:
        provider = load_sandbox_provider(name)
        providers.append(provider)
        sandbox = provider.get(provider.acquire(layout.thread("bench", name)))
        found[name] = lambda sandbox=sandbox: sandbox.execute_command(command)
    return found, providers


def measure(runs: int, command: str) -> dict[str, float]:
    """Median milliseconds per command of each runner (runs interleaved)."""
    with tempfile.TemporaryDirectory(prefix="antler-bench-sandbox-") as scratch:
        found, providers = runners(Path(scratch), command)
        try:
            samples: dict[str, list[float]] = {name: [] for name in found}
            for run in found.values():  # warm up: caches, page cache, the watchdog
                run()
            for _ in range(runs):
                for name, run in found.items():
                    started = time.perf_counter()
                    run()
                    samples[name].append((time.perf_counter() - started) * 1000)
        finally:
            for provider in providers:
                provider.shutdown()  # type: ignore[attr-defined]
    return {name: statistics.median(values) for name, values in samples.items()}


def report(medians: dict[str, float], command: str, runs: int) -> str:
    plain = medians["plain"]
    lines = [f"one command ({command!r}), median of {runs} interleaved runs:",
             f"{'runner':<8} {'ms':>8} {'x plain':>8}"]
    for name, ms in medians.items():
        lines.append(f"{name:<8} {ms:>8.2f} {ms / plain:>7.1f}x")
    if "bwrap" not in medians:
        from antler.runtime.sandbox.bwrap import bwrap_status

        lines.append(f"bwrap    skipped: {bwrap_status().reason}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--command", default="echo hello")
    args = parser.parse_args(argv)
    print(report(measure(args.runs, args.command), args.command, args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
