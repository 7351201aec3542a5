"""Finding and killing what a sandbox's commands left running, even after a crash.

Every command runs in a session of its own (its shell is the session and
group leader), so killing the group stops the command and the children it
started. Three things escape a group kill, and each has its answer here:

* a child that calls `setsid` (or double-forks into a new session): every
  command's environment carries a token (`ANTLER_SANDBOX_TOKEN`), which its
  descendants inherit, and `sweep` kills every process carrying it;
* the harness dying (`kill -9`, a crash): a small watchdog process, started
  with the first command and holding the read end of a pipe only the harness
  writes to, wakes on end-of-file and kills every process carrying one of the
  harness's tokens, the shells included. At a normal exit the harness closes
  the pipe itself and reaps the watchdog once it has swept. (Setting the parent-death signal on
  each shell instead would cost every command an extra exec through a
  launcher, or a `preexec_fn` that forks the whole interpreter.)
* children of an already-dead shell: found by the token like the rest.

Reading a process's environment is the costly part of a sweep (the kernel
copies it out of that process's memory), and a busy machine runs hundreds of
processes. So a sweep reads only the processes that can be a command's
descendants: those whose pid was handed out after the first command of the run
started (`PidMark`, with counters read before it). Pids are handed out in increasing
order and wrap around at ``pid_max``; when the pid counter may have gone all
the way round since the mark, or the kernel does not say where it stands, every
process is read, as before.

A process caught while it starts a new program (inside `execve`) reads as having
no environment for a moment; an empty read is taken again a few times, a
millisecond or two apart, unless the process is a kernel thread.

Limits: a process that clears or replaces its environment (`env -i`, a
daemon re-executing itself with a fresh environment) carries no token and is
not found; neither is one that moves to another user or PID namespace.
Containment without those limits needs a cgroup (a container provider).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["TOKEN_VARIABLE", "PidCounters", "PidMark", "new_token", "pid_counters",
           "recent_pid_counters", "start_watchdog", "sweep"]

TOKEN_VARIABLE = "ANTLER_SANDBOX_TOKEN"

_process_token: tuple[int, str] | None = None
_watchdog: subprocess.Popen[bytes] | None = None
_watchdog_lock = threading.Lock()
_counter = 0


def _this_process() -> str:
    """A token prefix unique to this process (made afresh after a fork)."""
    global _process_token
    if _process_token is None or _process_token[0] != os.getpid():
        _process_token = (os.getpid(), f"{os.getpid()}-{uuid.uuid4().hex[:10]}")
    return _process_token[1]


def new_token() -> str:
    """A token for one sandbox: this process's prefix and a sequence number."""
    global _counter
    with _watchdog_lock:
        _counter += 1
        return f"{_this_process()}.{_counter}"


def _read(path: str) -> bytes | None:
    """The whole of a /proc file, or None when it is gone or not ours to read.

    Plain descriptors: a buffered file object costs more than the read itself.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(descriptor, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(descriptor)


# A process caught in the middle of `execve` shows an empty environment until the
# new program's memory is in place: such a read is taken again, a few times.
_EXEC_RETRIES = 3
_EXEC_WAIT = 0.002


def _environment_has(pid: str, needle: bytes) -> bool:
    if not _exists(int(pid)):
        return False  # most pids of a sweep's window are gone: a signal says so cheaply
    environment = _read(f"/proc/{pid}/environ")
    for _ in range(_EXEC_RETRIES):
        if environment != b"" or _kernel_thread(pid):
            break
        time.sleep(_EXEC_WAIT)
        environment = _read(f"/proc/{pid}/environ")
    return environment is not None and needle in environment


def _exists(pid: int) -> bool:
    """Whether a process or thread `pid` exists (signal 0: nothing is sent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's: it exists
    return True


def _kernel_thread(pid: str) -> bool:
    """Whether `pid` is a kernel thread (always an empty environment): kthreadd's or a child."""
    ppid = _stat_field(pid, 1)
    return pid == "2" or ppid is None or ppid == 2  # None: gone meanwhile, nothing to wait for


def _session_of(pid: str) -> int | None:
    return _stat_field(pid, 3)


def _stat_field(pid: str, index: int) -> int | None:
    """Field `index` after the command name in /proc/<pid>/stat (0 state, 1 ppid, 2 pgrp,
    3 session), or None when the process is gone."""
    stat = _read(f"/proc/{pid}/stat")
    try:
        # The command name may hold spaces; the fields after its ')' do not.
        return int(stat.rsplit(b")", 1)[1].split()[index]) if stat else None
    except (IndexError, ValueError):
        return None


# The kernel hands out pids cyclically from the last one it gave, skipping those
# in use, and wraps from `pid_max` back to this floor (300 in the first pid
# namespace, lower in others, so 300 is the cautious figure).
_PID_FLOOR = 300


# The counters' files, kept open per process: reading one again from its start makes
# the kernel write it afresh, as opening it would, without the path look-up (which
# costs more than the read). {path: descriptor}, for the process in `_kept_pid`.
_kept: dict[str, int] = {}
_kept_pid = 0
_kept_lock = threading.Lock()
_READ_SIZE = 1 << 16


def _read_again(path: str) -> bytes | None:
    """The whole of a /proc file read often, through a descriptor kept open; None when
    it cannot be read."""
    global _kept, _kept_pid
    descriptor = _kept.get(path) if _kept_pid == os.getpid() else None
    if descriptor is None:
        with _kept_lock:
            if _kept_pid != os.getpid():  # a forked child holds its parent's copies
                _kept, _kept_pid = {}, os.getpid()
            descriptor = _kept.get(path)
            if descriptor is None:
                try:
                    descriptor = _kept[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    return None
    chunks: list[bytes] = []
    offset = 0
    try:
        # The kernel hands out all that such a file holds, up to the size asked: a
        # shorter read is the end (no read of nothing to find it).
        while len(chunk := os.pread(descriptor, _READ_SIZE, offset)) == _READ_SIZE:
            chunks.append(chunk)
            offset += _READ_SIZE
    except OSError:
        return None
    chunks.append(chunk)
    return b"".join(chunks)


def _proc_number(path: str, prefix: bytes = b"") -> int | None:
    """The number after `prefix` at the start of a line of a /proc file, or None when it
    is not there."""
    text = _read_again(path) or b""
    if text.startswith(prefix):
        start = 0
    else:
        start = text.find(b"\n" + prefix) + 1
        if not start:
            return None
    try:
        return int(text[start + len(prefix):].split(None, 1)[0])
    except (IndexError, ValueError):
        return None


class PidCounters(NamedTuple):
    """The kernel's pid bookkeeping at one moment."""

    forks: int
    """Tasks forked since boot (``processes`` in /proc/stat)."""
    tasks: int
    """Tasks alive (/proc/loadavg)."""
    last_pid: int
    """The pid handed out last in this pid namespace (/proc/loadavg)."""
    pid_max: int


def pid_counters() -> PidCounters | None:
    """The counters now, or None without a Linux /proc."""
    forks = _proc_number("/proc/stat", b"processes ")
    # "0.12 0.34 0.56 running/tasks last_pid": the loads are not integers, so skip them.
    load = (_read_again("/proc/loadavg") or b"").split()[3:]
    pid_max = _proc_number("/proc/sys/kernel/pid_max")
    try:
        tasks, last_pid = int(load[0].split(b"/")[1]), int(load[1])
    except (IndexError, ValueError):
        return None
    if forks is None or pid_max is None:
        return None
    global _latest
    counters = PidCounters(forks, tasks, last_pid, pid_max)
    _latest = (time.monotonic(), counters)
    return counters


# The last counters read in this process, and when (`time.monotonic`).
_latest: tuple[float, PidCounters] | None = None
_RECENT_SECONDS = 1.0


def recent_pid_counters() -> PidCounters | None:
    """Counters read in the last second, or read now: what a `PidMark` needs.

    A mark may hold any reading taken before its command started: an older one
    only counts more forks since, so the sweep's proof holds, a little looser.
    Reusing the last sweep's reading spares the first command of a run a read
    of /proc/stat (the costly one); the age limit keeps the proof from being
    spent on an idle harness's old reading (past it, every process is read).
    """
    latest = _latest
    if latest is not None and time.monotonic() - latest[0] < _RECENT_SECONDS:
        return latest[1]
    return pid_counters()


@dataclass(frozen=True)
class PidMark:
    """Where pid allocation stood when a run's first command started.

    Every descendant of the command got its pid after `first_pid` (the
    command's own), in the kernel's cyclic order, unless the pid counter went
    all the way round since. Going round means stepping over ``pid_max - 300``
    pids, and each step either hands a pid out (a fork, counted in `forks`) or
    skips one in use by a task that was alive at the mark (at most `tasks` of
    them) or forked since: fewer forks since the mark than that, minus
    `tasks`, prove it has not.
    """

    first_pid: int
    before: PidCounters
    """The counters read before the command started (the closer, the tighter the proof)."""

    @classmethod
    def after(cls, before: PidCounters | None, first_pid: int) -> PidMark | None:
        """The mark of a command with pid `first_pid`, started after `pid_counters()` (or
        `recent_pid_counters()`) gave `before`; None when they could not be read."""
        return None if before is None else cls(first_pid, before)


def _allocated_since(mark: PidMark | None) -> tuple[int, int] | None:
    """(first, last): the pids handed out since `mark` run from `first` to `last`, wrapping
    at ``pid_max`` when `last` is the smaller; None when any pid may have been."""
    if mark is None:
        return None
    now = pid_counters()
    if now is None:
        return None
    steps = now.forks - mark.before.forks + mark.before.tasks
    if steps >= min(now.pid_max, mark.before.pid_max) - _PID_FLOOR - 1:
        return None  # the counter may have gone all the way round
    return mark.first_pid, now.last_pid


# Up to this many pids handed out since the mark, each is looked up by number: cheaper
# than listing /proc, which costs as much as a few dozen failed look-ups.
_PROBE_LIMIT = 32


def _candidates(since: PidMark | None) -> list[int]:
    """The pids a sweep reads: those handed out since `since`, or every process."""
    window = _allocated_since(since)
    if window is not None and window[0] <= window[1] < window[0] + _PROBE_LIMIT:
        # Thread ids too: a thread's environment is its process's, and a signal to it
        # goes to the whole process.
        return list(range(window[0], window[1] + 1))
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except FileNotFoundError:
        return []
    if window is None:
        return pids
    first, last = window
    if first <= last:
        return [pid for pid in pids if first <= pid <= last]
    return [pid for pid in pids if pid >= first or pid <= last]  # it wrapped once


def sweep(token: str, *, spare_sessions: Iterable[int] = (),
          since: PidMark | None = None) -> list[int]:
    """Kill every process whose environment carries `token`; return their pids.

    Processes in `spare_sessions` (commands still running for someone) are
    left alone. With `since` (the mark taken when the run's first command
    started), only processes started after it are read, when the kernel's
    counters prove that no other one can carry the token. Without /proc (not
    Linux) nothing can be found.
    """
    spared = set(spare_sessions)
    needle = f"{TOKEN_VARIABLE}={token}\0".encode()
    # This process and its threads (a run starts some) share its environment, which
    # carries no token: they are not read.
    harness = {os.getpid(), *(thread.native_id for thread in threading.enumerate())}
    killed: list[int] = []
    for pid in _candidates(since):
        if pid in harness or not _environment_has(str(pid), needle):
            continue
        if spared and _session_of(str(pid)) in spared:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


# The watchdog waits for end-of-file on its standard input, which only this
# process holds open, then kills every process carrying one of its tokens: one
# `grep` over every environment per round, so the sweep takes milliseconds even
# on a busy machine. Three rounds: a process forking during one is caught by
# the next.
_WATCHDOG_SCRIPT = r"""
cat >/dev/null
for round in 1 2 3; do
  for file in $(grep -laF -- "$1" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${file#/proc/}
    kill -9 "${pid%/environ}" 2>/dev/null
  done
done
"""


def _watching() -> bool:
    """Whether this process's watchdog runs."""
    watchdog = _watchdog
    return watchdog is not None and getattr(watchdog, "antler_owner", None) == os.getpid() \
        and watchdog.poll() is None


def start_watchdog() -> None:
    """Start this process's watchdog unless it runs already (Linux only; idempotent)."""
    global _watchdog
    if _watching():
        return  # every command calls this: the common case looks at nothing else
    if not os.path.isdir("/proc"):
        return
    with _watchdog_lock:
        if _watching():
            return
        try:
            watchdog = subprocess.Popen(
                # The needle is an argument: in its environment the watchdog would
                # find (and kill) itself.
                ["/bin/sh", "-c", _WATCHDOG_SCRIPT, "antler-watchdog",
                 f"{TOKEN_VARIABLE}={_this_process()}."], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={"PATH": "/usr/bin:/bin"},
                # Its own session: Ctrl-C at the terminal must not stop it first.
                start_new_session=True,
            )
        except OSError:
            return  # no /bin/sh, no watchdog: the end-of-run sweeps still run
        watchdog.antler_owner = os.getpid()  # type: ignore[attr-defined]
        _watchdog = watchdog
        atexit.register(_stop_watchdog, watchdog)


def _stop_watchdog(watchdog: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """At a normal exit: let the watchdog sweep now, and reap it.

    Left to outlive the harness, it would exit an orphan, and a container's init
    may never reap it: a defunct process per run.
    """
    if getattr(watchdog, "antler_owner", None) != os.getpid():
        return  # a forked child's copy: the parent's watchdog
    with contextlib.suppress(OSError, ValueError):
        if watchdog.stdin is not None:
            watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=timeout)
