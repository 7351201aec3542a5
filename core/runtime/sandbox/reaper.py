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
  harness's tokens, the shells included. (Setting the parent-death signal on
  each shell instead would cost every command an extra exec through a
  launcher, or a `preexec_fn` that forks the whole interpreter.)
* children of an already-dead shell: found by the token like the rest.

Limits: a process that clears or replaces its environment (`env -i`, a
daemon re-executing itself with a fresh environment) carries no token and is
not found; neither is one that moves to another user or PID namespace.
Containment without those limits needs a cgroup (a container provider).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterable

__all__ = ["TOKEN_VARIABLE", "new_token", "start_watchdog", "sweep"]

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


def _environment_has(pid: str, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return needle in handle.read()
    except OSError:  # gone, or not ours to read
        return False


def _session_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            # The command name may hold spaces; the fields after its ')' do not.
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[3])  # state, ppid, pgrp, session
    except (OSError, IndexError, ValueError):
        return None


def sweep(token: str, *, spare_sessions: Iterable[int] = ()) -> list[int]:
    """Kill every process whose environment carries `token`; return their pids.

    Processes in `spare_sessions` (commands still running for someone) are
    left alone. Without /proc (not Linux) nothing can be found.
    """
    spared = set(spare_sessions)
    needle = f"{TOKEN_VARIABLE}={token}\0".encode()
    me = str(os.getpid())
    killed: list[int] = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir("/proc"):
            if not name.isdigit() or name == me or not _environment_has(name, needle):
                continue
            if spared and _session_of(name) in spared:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(name), signal.SIGKILL)
                killed.append(int(name))
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


def start_watchdog() -> None:
    """Start this process's watchdog unless it runs already (Linux only; idempotent)."""
    global _watchdog
    if not os.path.isdir("/proc"):
        return
    with _watchdog_lock:
        if _watchdog is not None and _watchdog.poll() is None and getattr(
                _watchdog, "antler_owner", None) == os.getpid():
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
            return  # no /bin/sh: the parent-death signal still stops each shell
        watchdog.antler_owner = os.getpid()  # type: ignore[attr-defined]
        _watchdog = watchdog
