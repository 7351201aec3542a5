"""How long the sandbox audit takes to classify commands of 1 KB, 10 KB, 100 KB and 1 MB.

Run from the repository root: `python -m benchmarks.bench_sandbox_audit`
(`--unbounded` lifts the work budget, `--shapes a,b` picks shapes, `--repeats N`).

Shapes: two realistic ones (a script of ordinary statements; a big quoted
heredoc, the way a model writes a file); adversarial ones built to hurt a
tokenizer: long quote runs, many `$(`, nested parentheses, many heredoc
markers, pipes, backticks, escapes, unterminated quotes, arithmetic shifts, a
long `bash -c` code string that is classified a second time, brace and `$IFS`
words, long awk and sed programs, `cd` and `rm` statements; and (prefixed
`t:`) the fuzz tests' shapes and units drawn from their fragments by a seeded
RNG.

For each shape and size it prints the best-of-N wall time of
`classify(command)`, the same for `str.split()` over the same input in the
same process (a floor: one pass in C), their ratio, and the verdict. Linearity
is reported as the 1 MB / 100 KB time ratio (10 means linear).

With the default work budget (`splitter.Budget`: 10,000 commands,
substitutions and redirects; 50,000 words and quotes) a command past it is
refused as `command_too_complex` as soon as the budget runs out, so those
shapes cost the same at 100 KB and 1 MB (ratio near 1). `--unbounded` lifts
the budget to show that the analysis itself is linear too (slower: the full
structure is built at 1 MB). Targets: every 1 MB command under 0.5 s with the
default budget; 1 MB / 100 KB at most 15 in either mode.

Then the bound on bashlex (`parse_worker.py`): the cost of one parse in the
worker against bashlex in this process (the per-call overhead of the bound),
and commands that send bashlex into an endless loop, each cut off and read by
the tokenizer (target: under 0.5 s each, the worker's replacement included).
Then the agreement of the two front ends: the share of commands on which the
default (bashlex where it parses) and the tokenizer alone give the same action
and rule, over the test corpus and over commands drawn from the fuzz
fragments. Last, peak memory: this process, and the largest parser worker
(its address space is capped at `parse_worker.MEMORY_LIMIT`).
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from collections.abc import Callable

from antler.plugins.sandbox_audit import bashlex_walker, parse_worker
from antler.plugins.sandbox_audit.classifier import classify
from antler.plugins.sandbox_audit.splitter import Budget

SIZES = (1_000, 10_000, 100_000, 1_000_000)
TARGET_1MB_SECONDS = 0.5
TARGET_RATIO = 15.0
TARGET_LOOP_SECONDS = 0.5


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // max(1, len(unit)) + 1))[:size]


def _heredoc(size: int) -> str:
    return "cat > /mnt/user-data/outputs/data.csv <<'EOF'\n" + _repeat(
        "id,name,value $(not run) `nor this`\n", size) + "\nEOF\n"


SCRIPT_UNIT = ('cd /mnt/user-data/workspace && python3 -m pytest -q tests/ | tail -n 5\n'
               'for f in src/*.py; do ruff check "$f" || echo "lint: $f"; done\n'
               'x=$(git rev-parse HEAD); echo "at ${x:0:8}" >> log.txt\n')

SHAPES: dict[str, Callable[[int], str]] = {
    # realistic
    "script": lambda n: _repeat(SCRIPT_UNIT, n),
    "heredoc file": _heredoc,
    # adversarial
    "long quote run": lambda n: 'echo "' + _repeat("a", n) + '"',
    "quote runs": lambda n: "echo " + _repeat("\"a\" 'b' ", n),
    "many $(": lambda n: _repeat("$(", n),
    "many $(a)": lambda n: "echo " + _repeat("$(a) ", n),
    "nested parens": lambda n: _repeat("(", n) + _repeat(")", n),
    "heredoc markers": lambda n: "cat " + _repeat("<<A ", n),
    "heredoc bodies": lambda n: _repeat("cat <<A\nx $(b)\nA\n", n),
    "pipes": lambda n: _repeat("a|", n) + "b",
    "backticks": lambda n: "echo " + _repeat("`a` ", n),
    "escapes": lambda n: "echo " + _repeat("\\a", n),
    "unclosed quotes": lambda n: _repeat('a"b ', n),
    "arith shifts": lambda n: "echo " + _repeat("$((1<<2)) ", n),
    "bash -c string": lambda n: "bash -c '" + _repeat("echo x; ", n) + "'",
    "brace words": lambda n: "echo " + _repeat("{a,b}{c,d} ", n),
    "IFS words": lambda n: "echo " + _repeat("a${IFS}b ", n),
    "awk program": lambda n: "awk '" + _repeat('{ system("date") } ', n) + "'",
    "sed script": lambda n: "sed '" + _repeat("s/a/b/g;", n) + "'",
    "cd and rm": lambda n: _repeat("cd /tmp/x && rm -rf ./y; ", n),
}

TYPICAL = [
    "cd /mnt/user-data/workspace && python3 -m pytest -q tests/ | tail -n 5",
    'for f in src/*.py; do ruff check "$f" || echo "lint: $f"; done',
    'x=$(git rev-parse HEAD); echo "at $x" >> log.txt',
]

# bashlex 0.18 loops without end on these (a `${` inside single quotes that the word
# continues after); the bound cuts each off and the tokenizer reads it.
LOOPING = ["'${'a", "echo '${'''x", "ls `echo '${'x`", "curl u | sh; echo '${'x"]


def test_shapes() -> dict[str, Callable[[int], str]]:
    """The fuzz tests' adversarial shapes and seeded random units, timed here."""
    from tests.plugins.test_sandbox_audit_fuzz import SHAPES as FUZZ_SHAPES
    from tests.plugins.test_sandbox_audit_fuzz import random_units

    shapes = {f"t:{name}": make for name, make in FUZZ_SHAPES.items()}
    for index, unit in enumerate(random_units()):
        shapes[f"t:random {index}"] = lambda n, u=unit: _repeat(u, n)
    return shapes


def best(run: Callable[[], object], repeats: int) -> float:
    fastest = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        fastest = min(fastest, time.perf_counter() - start)
    return fastest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--unbounded", action="store_true",
                        help="lift the work budget to time the full analysis")
    parser.add_argument("--shapes", default="",
                        help="comma-separated shape names (`-`: none)")
    args = parser.parse_args(argv)
    every = {**SHAPES, **test_shapes()}
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()] or list(every)
    if args.shapes == "-":
        shapes = []      # only the parser bound, the agreement and the memory
    budget: Callable[[], Budget | None] = (
        (lambda: Budget(nodes=10**9, words=10**9)) if args.unbounded else (lambda: None))
    mode = "budget lifted" if args.unbounded else "default budget"
    print(f"sandbox_audit classify, best of {args.repeats} wall time, {mode}")
    print(f"{'shape':<28} {'size':>9} {'classify':>11} {'str.split':>10} {'ratio':>7}  verdict")
    failures = []
    for shape in shapes:
        make = every[shape]
        times = {}
        for size in SIZES:
            text = make(size)
            verdict = classify(text, budget=budget())
            repeats = 1 if size == SIZES[-1] and args.unbounded else args.repeats
            took = best(lambda text=text: classify(text, budget=budget()), repeats)
            floor = best(text.split, args.repeats)
            times[size] = took
            print(f"{shape:<28} {size:>9,} {took * 1000:>9.2f}ms {floor * 1000:>8.2f}ms "
                  f"{took / max(floor, 1e-9):>7.0f}  {verdict.action} {verdict.rule} "
                  f"({verdict.parser})")
        linearity = times[SIZES[-1]] / max(times[SIZES[-2]], 1e-9)
        verdict_1mb = "ok" if linearity <= TARGET_RATIO else "NOT LINEAR"
        print(f"{'':<28} 1MB/100KB time ratio {linearity:.1f} (target <= {TARGET_RATIO:g}): "
              f"{verdict_1mb}")
        if linearity > TARGET_RATIO:
            failures.append(f"{shape}: 1MB/100KB ratio {linearity:.1f}")
        if not args.unbounded and times[SIZES[-1]] > TARGET_1MB_SECONDS:
            failures.append(f"{shape}: 1 MB took {times[SIZES[-1]]:.2f} s")
    failures.extend(bound(args.repeats))
    agreement()
    memory()
    if failures:
        print("targets missed: " + "; ".join(failures))
        return 1
    print("all targets met")
    return 0


def bound(repeats: int) -> list[str]:
    """Per-call cost of the worker against bashlex in process; commands that loop."""
    print("\nbashlex bound: one parse in the worker vs bashlex in this process (best of 50)")
    parse_worker.warm()
    for command in TYPICAL:
        parse_worker.parse(command)
        inside = best(lambda c=command: bashlex_walker.parse(c), 50)
        worker = best(lambda c=command: parse_worker.parse(c), 50)
        print(f"  {len(command):>4} chars: in process {inside * 1000:.2f} ms, worker "
              f"{worker * 1000:.2f} ms (+{(worker - inside) * 1000:.2f} ms, "
              f"{worker / inside:.2f}x)")
    print(f"commands that send bashlex into an endless loop (worst of {repeats}, the "
          "worker's replacement included):")
    failures = []
    for command in LOOPING:
        worst = 0.0
        for _ in range(repeats):
            start = time.perf_counter()
            verdict = classify(command)
            worst = max(worst, time.perf_counter() - start)
        state = "ok" if worst < TARGET_LOOP_SECONDS else "SLOW"
        print(f"  {command!r:<28} {worst * 1000:7.1f} ms  {verdict.action} {verdict.rule} "
              f"({verdict.parser}) {state}")
        if worst >= TARGET_LOOP_SECONDS:
            failures.append(f"{command!r} took {worst:.2f} s")
    return failures


def agreement() -> None:
    """How often the default front end and the tokenizer alone give the same verdict."""
    from tests.plugins.test_sandbox_audit_corpus import CASES
    from tests.plugins.test_sandbox_audit_fuzz import FRAGMENTS

    rng = random.Random(4611)
    drawn = ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12)))
             for _ in range(5000)]
    print("\nfront-end agreement (same action and rule, default vs tokenizer alone):")
    for label, commands in (("test corpus", [c for c, _, _ in CASES]),
                            ("fuzz fragments", drawn)):
        same = by_bashlex = same_bashlex = 0
        for command in commands:
            full, alone = classify(command), classify(command, parser="tokenizer")
            agree = (full.action, full.rule) == (alone.action, alone.rule)
            same += agree
            if full.parser == "bashlex":
                by_bashlex += 1
                same_bashlex += agree
        print(f"  {label:<15} {len(commands):>5} commands: {same / len(commands):.2%} agree; "
              f"bashlex read {by_bashlex}, of which {same_bashlex / max(by_bashlex, 1):.2%} "
              "agree")


def memory() -> None:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peaks = []
    for worker in parse_worker._POOL.idle:
        try:
            with open(f"/proc/{worker.proc.pid}/status") as status:
                peaks.extend(int(line.split()[1]) / 1024 for line in status
                             if line.startswith("VmHWM:"))
        except OSError:
            continue
    parse_worker.shutdown()
    worker = f"{max(peaks):.0f} MB" if peaks else "unknown"
    print(f"\npeak memory (resident): this process {own:.0f} MB; parser worker {worker} "
          f"(its address space is capped at {parse_worker.MEMORY_LIMIT // (1024 * 1024)} MB)")


if __name__ == "__main__":
    raise SystemExit(main())
