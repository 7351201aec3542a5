"""Run every benchmark, one after another: `python -m benchmarks` (what `make bench` runs).

Each benchmark prints its own ratios against a baseline measured in the same
process, so figures stay comparable on a shared or noisy machine. Pass names
to run a subset: `python -m benchmarks resolve fusion`.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name.removeprefix("bench_") for m in pkgutil.iter_modules([str(here)])
                   if m.name.startswith("bench_"))
    chosen = argv or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {', '.join(names)}",
              file=sys.stderr)
        return 2
    failed = []
    for name in chosen:
        print(f"\n=== benchmarks.bench_{name} ===", flush=True)
        code = subprocess.call([sys.executable, "-m", f"benchmarks.bench_{name}"],
                               cwd=here.parent)
        if code:
            failed.append(name)
    if failed:
        print(f"\nbenchmarks that missed a target or failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
