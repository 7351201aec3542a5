"""The benchmarks' clocks: wall time, or CPU time of the process and everything it started.

On a shared machine, wall time measures the other jobs as much as the code: a
run waits for a core whenever the load is above the core count. CPU time does
not include that wait. `cpu_seconds` counts the process (all its threads), the
children it has reaped (`RUSAGE_CHILDREN`: the shell commands a tool ran) and
the children still alive (read from `/proc`: the sandbox audit's parser worker
lives across runs, so `RUSAGE_CHILDREN` would never see it). A child that is
reaped between two readings moves from the live sum to `RUSAGE_CHILDREN` with
everything it used, so differences stay right. The reading's own cost (a walk
over `/proc`, growing with the number of live descendants) is left out.

One thing `/proc` cannot give to the nanosecond: what a live descendant reaped
itself, which it reports in 10 ms ticks. A bubblewrap namespace's init reaps the
commands it starts, and lives on after the run, so the `cpu` clock leaves a
sandboxed command's CPU out (a few milliseconds a run: below a tick each time).
The `cgroup` clock counts it: it puts the process and its descendants in a
cpuacct cgroup of their own (cgroup v1, as root) and reads the cgroup's usage,
which counts every process in it to the nanosecond, nested PID namespaces
included, and costs no walk. It says why when it cannot (`CgroupClockError`).

CPU time still moves with the machine's load (caches, frequency, hyperthreads),
less than wall time; interleave the variants and take medians either way.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

CLOCKS = ("cpu", "wall", "cgroup")
_CGROUP_PREFIX = "antler-bench-"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found.extend(int(child) for child in task.read_text().split())
        except (OSError, ValueError):
            continue
    return found


def _live_descendants_cpu() -> float:
    """CPU seconds of the live descendants, each with the children it reaped itself."""
    total = 0.0
    pending = _children(os.getpid())
    while pending:
        pid = pending.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
            # Its own threads to the nanosecond (schedstat's first field); stat's
            # utime and stime count 10 ms ticks, too coarse for a parse of 0.3 ms.
            own = sum(int(task.read_text().split()[0])
                      for task in Path(f"/proc/{pid}/task").glob("*/schedstat")) / 1e9
        except (OSError, ValueError):
            continue  # gone meanwhile: its time is in RUSAGE_CHILDREN once reaped
        # cutime and cstime (fields 16-17 of stat): the children it reaped itself
        total += own + sum(int(value) for value in fields[13:15]) / _TICKS
        pending.extend(_children(pid))
    return total


_reading_seconds = 0.0
"""CPU seconds this process spent reading the live descendants (not the code's)."""


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and its descendants, live or reaped, less
    what reading them cost: the walk over `/proc` costs about 0.1 ms per live descendant
    (a thread's sandbox namespace lives on for its idle time), which would otherwise be
    counted in the run it ends."""
    global _reading_seconds
    live = 0.0
    if Path("/proc/self/task").is_dir():
        started = time.thread_time()
        live = _live_descendants_cpu()
        _reading_seconds += time.thread_time() - started
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime - _reading_seconds + reaped.ru_utime + reaped.ru_stime
            + live)


class CgroupClockError(RuntimeError):
    """The `cgroup` clock cannot run here (no cgroup v1 cpuacct, or no right to make one)."""


def _own_cpuacct_cgroup() -> Path:
    """A cpuacct cgroup of this process's own, made below its current one, holding it and
    its live descendants; removed at exit once empty (what a dead benchmark left, the
    next one removes)."""
    parent = None
    with contextlib.suppress(OSError, ValueError):
        member = next(line.split(":", 2)[2] for line in
                      Path("/proc/self/cgroup").read_text().splitlines()
                      if "cpuacct" in line.split(":", 2)[1].split(","))
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            after = fields[fields.index("-") + 1:]
            if after[0] == "cgroup" and "cpuacct" in after[2].split(","):
                parent = Path(fields[4], os.path.relpath(member, fields[3]))
                break
    if parent is None:
        raise CgroupClockError("the cgroup clock needs cgroup v1's cpuacct controller, "
                               "which this system does not mount; use --clock cpu")
    for stale in parent.glob(f"{_CGROUP_PREFIX}*"):
        owner = stale.name[len(_CGROUP_PREFIX):]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError):
                stale.rmdir()
    group = parent / f"{_CGROUP_PREFIX}{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        pending = [os.getpid()]
        while pending:  # this process, then what it started (the cgroup's new ones are born in)
            pid = pending.pop()
            with contextlib.suppress(ProcessLookupError):
                (group / "cgroup.procs").write_text(str(pid))
            pending.extend(_children(pid))
    except OSError as error:
        raise CgroupClockError(f"the cgroup clock could not make a cpuacct cgroup at {group} "
                               f"({error.strerror}); it needs root; use --clock cpu") from None

    def leave() -> None:
        with contextlib.suppress(OSError):
            (parent / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(50):  # refused while a descendant still runs (or is exiting)
            try:
                group.rmdir()
                return
            except OSError:
                time.sleep(0.01)

    atexit.register(leave)
    return group / "cpuacct.usage"


_cgroup_usage: Path | None = None


def cgroup_cpu_seconds() -> float:
    """CPU seconds used so far by this process and every descendant, live or reaped, from
    the cpuacct cgroup they were put in at the first reading (`CgroupClockError` where
    that cannot be)."""
    global _cgroup_usage
    if _cgroup_usage is None:
        _cgroup_usage = _own_cpuacct_cgroup()
    return int(_cgroup_usage.read_text()) / 1e9


def clock(name: str) -> Callable[[], float]:
    """The reading function of clock `name` ("cpu", "wall" or "cgroup"), in seconds."""
    if name == "wall":
        return time.perf_counter
    if name == "cpu":
        return cpu_seconds
    if name == "cgroup":
        cgroup_cpu_seconds()  # set up now, so that its error comes before any run
        return cgroup_cpu_seconds
    raise ValueError(f"unknown clock {name!r}; pick one of {', '.join(CLOCKS)}")


def best_of(runs: int, func: Callable[[], object]) -> float:
    """The fastest of `runs` calls of `func`, in wall seconds, with the collector paused."""
    best = float("inf")
    gc.disable()
    try:
        for _ in range(runs):
            start = time.perf_counter()
            func()
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best
