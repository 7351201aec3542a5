"""How long `antler chain show` takes as a whole process, and how much of it is imports.

Runs each command N times in a fresh interpreter (after one warm-up run, so the
page cache and bytecode are warm) and reports the mean wall time, as a ratio to
`python -c pass` measured the same way in the same run, so figures from
different machines compare. Then one `python -X importtime` run of the command
splits its import time by top-level package, to show whether langchain is
imported at all (it should not be: `chain show` plans from specs alone).

    python -m benchmarks.bench_cli                       # chain show, 10 runs each
    python -m benchmarks.bench_cli -n 30 -- --isolated --manifest my.yaml chain show
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict

HEAVY = ("langchain", "langchain_core", "langgraph")
"""Top-level packages counted as "langchain" in the import-time split."""


def wall_times(argv: list[str], runs: int) -> list[float]:
    env = {**os.environ, "COLUMNS": "120"}
    subprocess.run(argv, capture_output=True, env=env, check=False)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, env=env, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode:
            first = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[0]
            raise SystemExit(f"{' '.join(argv[1:])!r} exited {done.returncode}: {first}")
    return times


def import_split(argv: list[str]) -> tuple[float, dict[str, float]]:
    """(total import seconds, seconds per top-level package) from `-X importtime`."""
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True,
                          text=True, check=False)
    per_package: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        self_us, _cumulative, name = line.removeprefix("import time:").split("|", 2)
        per_package[name.strip().split(".")[0]] += int(self_us) / 1e6
    return sum(per_package.values()), dict(per_package)


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_cli",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=10, help="runs per command")
    parser.add_argument("antler_args", nargs="*", default=["chain", "show"],
                        help="arguments of `antler` (after --); default: chain show")
    options = parser.parse_args(args)
    python = sys.executable
    show = [python, "-m", "antler", *options.antler_args]
    label = "python -m antler " + " ".join(options.antler_args)
    commands = [
        ("python -c pass (baseline)", [python, "-c", "pass"]),
        (label, show),
        ('python -c "import antler.cli"', [python, "-c", "import antler.cli"]),
        ('python -c "import antler.chain, antler.config"',
         [python, "-c", "import antler.chain, antler.config"]),
        ('python -c "import rich.console, rich.table"',
         [python, "-c", "import rich.console, rich.table"]),
        ('python -c "import langchain.agents"', [python, "-c", "import langchain.agents"]),
    ]
    print(f"antler CLI benchmark: {options.runs} runs each, mean wall time of a fresh "
          f"process (Python {sys.version.split()[0]})\n")
    width = max(len(name) for name, _ in commands)
    print(f"{'command':<{width}}  {'mean':>9}  {'stdev':>8}  {'x baseline':>10}  "
          f"{'minus baseline':>14}")
    baseline = 0.0
    for name, argv in commands:
        times = wall_times(argv, options.runs)
        mean = statistics.fmean(times)
        stdev = statistics.stdev(times) if len(times) > 1 else 0.0
        baseline = baseline or mean
        print(f"{name:<{width}}  {mean * 1e3:7.1f}ms  {stdev * 1e3:6.1f}ms  "
              f"{mean / baseline:9.2f}x  {(mean - baseline) * 1e3:12.1f}ms")
    total, per_package = import_split(show)
    heavy = sum(seconds for package, seconds in per_package.items() if package in HEAVY)
    top = sorted(per_package.items(), key=lambda item: -item[1])[:6]
    print(f"\nimports inside `{label}` (-X importtime, one run): {total * 1e3:.1f}ms in all; "
          f"langchain/langchain_core/langgraph: {heavy * 1e3:.1f}ms "
          f"({heavy / total if total else 0:.0%})")
    print("largest: " + ", ".join(f"{package} {seconds * 1e3:.1f}ms" for package, seconds in top))


if __name__ == "__main__":
    main()
