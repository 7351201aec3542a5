"""Benchmark: what the race-free file operations cost, against plain opens by path.

    python -m benchmarks.bench_file_tools [--runs N]

Each file operation of the sandbox opens its path beneath a descriptor of the
thread's root (`antler.plugin_api.confined`). Measured, interleaved so that load
affects them alike, for a file three directories below the workspace:

* ``plain read``: ``open(host_path, "rb").read()``, no confinement at all (the
  baseline);
* ``read (openat2)``: `HostSandbox.read_bytes`, the kernel resolving the whole
  path beneath the root in one call;
* ``read (walk)``: the same with ``openat2`` switched off: one ``openat`` per
  component, as on kernels without it or when a symlink is on the way;
* ``read (symlink)``: a read through an in-thread symlink (always the walk);
* ``plain write`` / ``write``: the same for an overwrite (`write_file`);
* ``ls``: `list_dir` of the workspace, two levels (12 entries).

Reported: the median microseconds of each and its ratio to the plain operation
of its kind. No target: the figures say what confinement costs per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def operations(base: Path) -> tuple[dict[str, Callable[[], object]], Callable[[], None]]:
    """The operations to time, by name, and what shuts the provider down."""
    from antler.plugin_api import confined
    from antler.plugin_api.paths import PathLayout
    from antler.runtime.sandbox.local import LocalSandboxProvider

    provider = LocalSandboxProvider()
    paths = PathLayout(base).thread("bench", "files")
    sandbox = provider.get(provider.acquire(paths))
    deep = paths.workspace / "a" / "b" / "c"
    deep.mkdir(parents=True)
    host = deep / "file.txt"
    host.write_text("x" * 4096)
    for index in range(8):
        (paths.workspace / f"f{index}.txt").write_text("y")
    os.symlink("a/b/c/file.txt", paths.workspace / "link.txt")
    virtual = "/mnt/user-data/workspace/a/b/c/file.txt"

    def plain_read() -> bytes:
        with open(host, "rb") as handle:
            return handle.read()

    def plain_write() -> None:
        with open(host, "w", encoding="utf-8") as handle:
            handle.write("x" * 4096)

    def walked_read() -> bytes:
        usable = confined._openat2.usable
        confined._openat2.usable = False
        try:
            return sandbox.read_bytes(virtual)
        finally:
            confined._openat2.usable = usable

    found: dict[str, Callable[[], object]] = {
        "plain read": plain_read,
        "read (openat2)": lambda: sandbox.read_bytes(virtual),
        "read (walk)": walked_read,
        "read (symlink)": lambda: sandbox.read_bytes("/mnt/user-data/workspace/link.txt"),
        "plain write": plain_write,
        "write": lambda: sandbox.write_file(virtual, "x" * 4096),
        "ls": lambda: sandbox.list_dir("/mnt/user-data/workspace"),
    }
    if not confined._openat2.usable:
        del found["read (openat2)"]
    return found, provider.shutdown


def measure(runs: int) -> dict[str, float]:
    """Median microseconds of each operation (runs interleaved)."""
    with tempfile.TemporaryDirectory(prefix="antler-bench-files-") as scratch:
        found, shutdown = operations(Path(scratch))
        try:
            samples: dict[str, list[float]] = {name: [] for name in found}
            for run in found.values():
                run()
            for _ in range(runs):
                for name, run in found.items():
                    started = time.perf_counter()
                    run()
                    samples[name].append((time.perf_counter() - started) * 1e6)
        finally:
            shutdown()
    return {name: statistics.median(values) for name, values in samples.items()}


def report(medians: dict[str, float], runs: int) -> str:
    lines = [f"file operations, median of {runs} interleaved runs:",
             f"{'operation':<16} {'us':>8} {'x plain':>8}"]
    for name, us in medians.items():
        plain = medians["plain write"] if "write" in name else medians["plain read"]
        ratio = "" if name == "ls" else f"{us / plain:>7.1f}x"
        lines.append(f"{name:<16} {us:>8.1f} {ratio:>8}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args(argv)
    print(report(measure(args.runs), args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
