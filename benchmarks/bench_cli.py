"""How long the CLI takes as a whole process: `antler chain show`, `antler run`, imports.

Each command runs in a fresh interpreter, N rounds after one warm-up run of each
(so the page cache and bytecode are warm). The commands take turns, one run each
per round, so a change of load hits them all alike; each figure is the median of
its rounds. CPU time is the process's (user and system, its children included,
from the rusage of waited-for children); wall time is printed beside it, but on a
loaded machine it mostly measures the wait for a core, so the targets are read
on CPU time. Each command is also given as a ratio to two baselines measured in
the same rounds, with a 90% bootstrap interval (rounds resampled whole,
`benchmarks/interval.py`): `python -c pass` (the interpreter's start) and
`python -c "import langchain_core, langgraph"` (the top-level packages of the
stack), so figures from a busy machine and a quiet one compare.

Targets: `antler chain show` within 0.5 s of CPU; `antler run` on the demo (its
first turn: a `bash` call in the sandbox and the answer, scripted model, a new
thread each time) within 1.5x the time Python takes to import langchain's
`create_agent` and langgraph (`python -c "import langchain.agents,
langgraph.graph"`), on the median of the per-round ratios' medians. Then one
`python -X importtime` run of the command splits its import time by top-level
package, to show whether langchain is imported at all (it should not be for
`chain show`: it plans from specs alone), and each read-only command runs twice
with a `bwrap` on PATH that logs its calls: a command that runs no sandbox must
not probe bubblewrap. `chain show` reports which provider `auto` picks from the
last recorded probe while it is valid (`antler.runtime.sandbox.probe`), so its
first run against a `bwrap` never probed before (the logging one is new each
time) probes once and its repeat must not.

Child processes run with bytecode caching on (PYTHONDONTWRITEBYTECODE is
dropped from their environment): otherwise every run recompiles the project's
own modules, which no installed copy does.

    python -m benchmarks.bench_cli                       # chain show, 10 rounds
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

from benchmarks.interval import median_ratio_interval

PASS = "python -c pass (baseline)"
STACK = 'python -c "import langchain_core, langgraph"'
RUN = "antler run (the demo's first turn)"
AGENTS = 'python -c "import langchain.agents, langgraph.graph"'

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


def one_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `argv`; a failure stops the benchmark."""
    start, start_cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    wall, cpu = time.perf_counter() - start, _children_cpu() - start_cpu
    if done.returncode:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"{' '.join(argv[1:])!r} exited {done.returncode}: {first}")
    return wall, cpu


def interleaved_runs(commands: dict[str, list[str]], rounds: int,
                     ) -> dict[str, tuple[list[float], list[float]]]:
    """Per command, (wall seconds, CPU seconds) of each round; one warm-up run each first,
    then every round runs each command once, in turn."""
    env = {**_child_environment(), "COLUMNS": "120"}
    for argv in commands.values():
        subprocess.run(argv, capture_output=True, env=env, check=False)  # warm-up
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            wall, cpu = one_run(argv, env)
            times[name][0].append(wall)
            times[name][1].append(cpu)
    return times


def ratio_text(cell: list[float], base: list[float]) -> str:
    """'12.3x [11.9-12.8]': the median over the base's, with its 90% interval."""
    ratio = statistics.median(cell) / statistics.median(base)
    interval = median_ratio_interval(cell, base)
    return f"{ratio:.2f}x" + (f" [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else "")


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
    parser.add_argument("-n", "--runs", type=int, default=10,
                        help="rounds (runs of each command)")
    parser.add_argument("antler_args", nargs="*", default=["chain", "show"],
                        help="arguments of `antler` (after --); default: chain show")
    options = parser.parse_args(args)
    python = sys.executable
    show = [python, "-m", "antler", *options.antler_args]
    label = "python -m antler " + " ".join(options.antler_args)
    home = Path(tempfile.mkdtemp(prefix="antler-bench-cli-"))
    commands = {
        PASS: [python, "-c", "pass"],
        STACK: [python, "-c", "import langchain_core, langgraph"],
        label: show,
        RUN: demo_run(python, home),
        AGENTS: [python, "-c", "import langchain.agents, langgraph.graph"],
        'python -c "import antler.cli"': [python, "-c", "import antler.cli"],
        'python -c "import antler.chain.config"': [python, "-c", "import antler.chain.config"],
        'python -c "import rich.console, rich.table"':
            [python, "-c", "import rich.console, rich.table"],
    }
    load = os.getloadavg()[0]
    print(f"antler CLI benchmark: {options.runs} interleaved rounds, median wall and CPU time "
          f"of a fresh process (Python {sys.version.split()[0]}); load average {load:.1f} at "
          "the start\n")
    try:
        times = interleaved_runs(commands, options.runs)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    width = max(len(name) for name in commands)
    print(f"{'command':<{width}}  {'wall':>9}  {'cpu':>9}  {'cpu x pass':>20}  "
          f"{'cpu x langchain_core+langgraph':>30}")
    for name in commands:
        walls, cpus = times[name]
        print(f"{name:<{width}}  {statistics.median(walls) * 1e3:7.1f}ms  "
              f"{statistics.median(cpus) * 1e3:7.1f}ms  {ratio_text(cpus, times[PASS][1]):>20}  "
              f"{ratio_text(cpus, times[STACK][1]):>30}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if options.antler_args == ["chain", "show"]:
        cpu = statistics.median(times[label][1])
        wall = statistics.median(times[label][0])
        print(f"\ntarget: chain show within {CHAIN_SHOW_TARGET} s: {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU: {'met' if cpu <= CHAIN_SHOW_TARGET else 'MISSED'} (on CPU "
              "time)")
    run_cpu, import_cpu = times[RUN][1], times[AGENTS][1]
    ratio = statistics.median(run_cpu) / statistics.median(import_cpu)
    wall_ratio = statistics.median(times[RUN][0]) / statistics.median(times[AGENTS][0])
    print(f"target: antler run within {RUN_TARGET}x importing langchain and langgraph: "
          f"{wall_ratio:.2f}x wall, {ratio_text(run_cpu, import_cpu)} CPU: "
          f"{'met' if ratio <= RUN_TARGET else 'MISSED'} (on CPU time)")
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
