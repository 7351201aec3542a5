"""How long the CLI takes as a whole process: `antler chain show`, `antler run`, imports.

Runs each command N times in a fresh interpreter (after one warm-up run, so the
page cache and bytecode are warm) and reports the mean wall time and the mean
CPU time of the process (user and system, from the children's rusage), each
as a ratio to `python -c pass` measured the same way in the same run, so
figures from different machines compare. On a loaded machine wall time waits
for a core; CPU time does not, so the targets are read on both.

Targets: `antler chain show` within 0.5 s; `antler run` on the demo (its first
turn: a `bash` call in the sandbox and the answer, scripted model, a new
thread each time) within 1.5x the time Python takes to import langchain's
`create_agent` and langgraph (`python -c "import langchain.agents,
langgraph.graph"`). Then one `python -X importtime` run of the command splits
its import time by top-level package, to show whether langchain is imported at
all (it should not be for `chain show`: it plans from specs alone), and each
read-only command runs twice with a `bwrap` on PATH that logs its calls: a
command that runs no sandbox must not probe bubblewrap. `chain show` reports
which provider `auto` picks from the last recorded probe while it is valid
(`antler.runtime.sandbox.probe`), so its first run against a `bwrap` never
probed before (the logging one is new each time) probes once and its repeat
must not.

Child processes run with bytecode caching on (PYTHONDONTWRITEBYTECODE is
dropped from their environment): otherwise every run recompiles the project's
own modules, which no installed copy does.

    python -m benchmarks.bench_cli                       # chain show, 10 runs each
    python -m benchmarks.bench_cli -n 30 -- --isolated --manifest my.yaml chain show
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HEAVY = ("langchain", "langchain_core", "langgraph")
"""Top-level packages counted as "langchain" in the import-time split."""


CHAIN_SHOW_TARGET = 0.5
"""Seconds `antler chain show` may take."""
RUN_TARGET = 1.5
"""`antler run` on the demo, as a multiple of importing langchain and langgraph."""
DEMO_SCRIPT = """turns:
  - content: ""
    tool_calls:
      - {name: bash, args: {command: "wc -l /mnt/user-data/uploads/sales.csv"}}
  - "The sales file has 3 data rows."
"""
READ_ONLY = (["chain", "show"], ["plugins", "list"], ["config", "check"], ["chain", "graph"])
"""Commands that run no sandbox, so must not probe bubblewrap."""


def _child_environment() -> dict[str, str]:
    """This process's environment, with bytecode caching on for the measured processes."""
    return {name: value for name, value in os.environ.items()
            if name != "PYTHONDONTWRITEBYTECODE"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_runs(argv: list[str], runs: int, env: dict[str, str] | None = None,
               ) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of `runs` runs of `argv`, after one warm-up run."""
    env = {**_child_environment(), "COLUMNS": "120", **(env or {})}
    subprocess.run(argv, capture_output=True, env=env, check=False)  # warm-up
    walls, cpus = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), _children_cpu()
        done = subprocess.run(argv, capture_output=True, env=env, check=False)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - start_cpu)
        if done.returncode:
            first = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
            raise SystemExit(f"{' '.join(argv[1:])!r} exited {done.returncode}: {first}")
    return walls, cpus


def demo_run(python: str, home: Path) -> list[str]:
    """`antler run` on the demo's first turn, scripted, with an upload, on a new thread."""
    script = home / "demo.yaml"
    script.write_text(DEMO_SCRIPT, encoding="utf-8")
    upload = home / "sales.csv"
    upload.write_text("month,revenue\n2026-01,1200\n2026-02,1100\n2026-03,900\n",
                      encoding="utf-8")
    return [python, "-m", "antler", "run", "Analyse the uploaded file, please.",
            "--model", f"scripted:{script}", "--upload", str(upload),
            "--home", str(home / "home")]


def bwrap_probes(python: str, argv: list[str]) -> tuple[int, int]:
    """How many times `antler ARGV` runs `bwrap` (a logging `bwrap` first on PATH): on its
    first run, and on a repeat with the same `bwrap` (a cache of its own)."""
    real = shutil.which("bwrap")
    with tempfile.TemporaryDirectory() as shim:
        log = Path(shim) / "calls"
        fake = Path(shim) / "bwrap"
        fake.write_text(f"#!/bin/sh\necho >> {log}\n"
                        + (f'exec {real} "$@"\n' if real else "exit 1\n"), encoding="utf-8")
        fake.chmod(0o755)
        env = {**_child_environment(), "PATH": f"{shim}:{os.environ.get('PATH', '')}",
               "XDG_CACHE_HOME": str(Path(shim) / "cache")}
        counts = []
        for _ in range(2):
            subprocess.run([python, "-m", "antler", *argv], capture_output=True, env=env,
                           check=False)
            counts.append(len(log.read_text().splitlines()) if log.exists() else 0)
        return counts[0], counts[1] - counts[0]


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
    home = Path(tempfile.mkdtemp(prefix="antler-bench-cli-"))
    commands = [
        ("python -c pass (baseline)", [python, "-c", "pass"]),
        (label, show),
        ("antler run (the demo's first turn)", demo_run(python, home)),
        ('python -c "import langchain.agents, langgraph.graph"',
         [python, "-c", "import langchain.agents, langgraph.graph"]),
        ('python -c "import antler.cli"', [python, "-c", "import antler.cli"]),
        ('python -c "import antler.chain.config"',
         [python, "-c", "import antler.chain.config"]),
        ('python -c "import rich.console, rich.table"',
         [python, "-c", "import rich.console, rich.table"]),
    ]
    load = os.getloadavg()[0]
    print(f"antler CLI benchmark: {options.runs} runs each, mean wall and CPU time of a fresh "
          f"process (Python {sys.version.split()[0]}); load average {load:.1f} at the start\n")
    width = max(len(name) for name, _ in commands)
    print(f"{'command':<{width}}  {'wall':>9}  {'stdev':>8}  {'x base':>7}  {'cpu':>9}  "
          f"{'x base':>7}")
    base_wall = base_cpu = 0.0
    means: dict[str, tuple[float, float]] = {}
    for name, argv in commands:
        walls, cpus = timed_runs(argv, options.runs)
        wall, cpu = statistics.fmean(walls), statistics.fmean(cpus)
        stdev = statistics.stdev(walls) if len(walls) > 1 else 0.0
        base_wall, base_cpu = base_wall or wall, base_cpu or cpu
        means[name] = (wall, cpu)
        print(f"{name:<{width}}  {wall * 1e3:7.1f}ms  {stdev * 1e3:6.1f}ms  "
              f"{wall / base_wall:6.2f}x  {cpu * 1e3:7.1f}ms  {cpu / base_cpu:6.2f}x")
    shutil.rmtree(home, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if options.antler_args == ["chain", "show"]:
        wall, cpu = means[label]
        print(f"\ntarget: chain show within {CHAIN_SHOW_TARGET} s: {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU: {'met' if cpu <= CHAIN_SHOW_TARGET else 'MISSED'} (on CPU "
              "time)")
    run_wall, run_cpu = means["antler run (the demo's first turn)"]
    import_wall, import_cpu = means['python -c "import langchain.agents, langgraph.graph"']
    print(f"target: antler run within {RUN_TARGET}x importing langchain and langgraph: "
          f"{run_wall / import_wall:.2f}x wall, {run_cpu / import_cpu:.2f}x CPU: "
          f"{'met' if run_cpu / import_cpu <= RUN_TARGET else 'MISSED'} (on CPU time)")
    total, per_package = import_split(show)
    heavy = sum(seconds for package, seconds in per_package.items() if package in HEAVY)
    top = sorted(per_package.items(), key=lambda item: -item[1])[:6]
    print(f"\nimports inside `{label}` (-X importtime, one run): {total * 1e3:.1f}ms in all; "
          f"langchain/langchain_core/langgraph: {heavy * 1e3:.1f}ms "
          f"({heavy / total if total else 0:.0%})")
    print("largest: " + ", ".join(f"{package} {seconds * 1e3:.1f}ms" for package, seconds in top))
    print("\nbubblewrap probes by commands that run no sandbox (first run, repeat; the repeat "
          "must be 0, and the first too but for `chain show` on a never-probed bwrap):")
    for argv in READ_ONLY:
        first, repeat = bwrap_probes(python, argv)
        print(f"  antler {' '.join(argv)}: {first}, {repeat}")


if __name__ == "__main__":
    main()
