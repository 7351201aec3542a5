"""Removing a thread's directory while its sandbox namespace may still live.

A thread's bubblewrap namespace (`antler.runtime.sandbox.bwrap`) lives in the
process that ran the thread, for up to ``idle_seconds`` after its last command,
and an adopted spare mounts the thread's files from an overlay, whose work
folder (``<thread>/.overlay/work``) the kernel makes with no permissions
at all. Root passes such a folder; a harness that is not root cannot list it,
so removing the thread's directory failed there, and a command still running
in the namespace could write into the directory while it was being removed.

So the namespace records its init in the thread's directory when it becomes
the thread's (`record_namespace`: the init's host pid and start time, in
`INIT_FILE`; the note goes when the namespace has ended, unless a newer namespace
of the thread has noted itself since), and `remove_thread_directory`

1. ends that init first, from any process of the same user (or root): it checks
   that the pid still is that init (its start time and command line), opens a
   pidfd and kills it; as the namespace's PID 1, its death makes the kernel kill
   everything in the namespace. The process that kept the namespace finds it
   gone and starts a new one should the thread run again;
2. makes every folder below passable for its owner (the overlay's work folder
   included) and removes the tree, again should a writer that was still
   finishing have added to it;
3. raises `ThreadDirectoryError`, naming the path and the reason, when it cannot
   (an init another user runs, a file the harness may not remove).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from antler.plugin_api.sandbox import SandboxError

__all__ = ["INIT_FILE", "ThreadDirectoryError", "forget_init", "record_init",
           "record_namespace", "remove_thread_directory", "remove_tree"]

INIT_FILE = ".namespace-init"
"""In a thread's directory (beside ``user-data``, which no command sees): the host pid and
start time of the init of the thread's namespace, as ``"<pid> <start time>"``."""

_INIT_COMMAND = b"import posix;exec(posix.read("
"""What the command line of a namespace's init holds (`antler.runtime.sandbox.namespace`)."""
_ATTEMPTS = 3
_RACED = (errno.ENOTEMPTY, errno.EEXIST)
"""What removing a folder meets when something was still writing in it."""
_END_WAIT = 5.0


_noting = threading.Lock()
"""Held while this process writes or removes a note: an ended namespace's removal of its
own note (read, compared, unlinked) never takes a newer namespace's written meanwhile."""


class ThreadDirectoryError(SandboxError, OSError):
    """A thread's directory, or the namespace still using it, could not be removed."""


class _Noted(Protocol):
    """What `record_namespace` needs of a started namespace (`namespace.Namespace`)."""

    init_pid: int | None

    def on_close(self, callback: Callable[[], None]) -> None: ...


def record_namespace(thread_dir: Path | str, namespace: _Noted) -> None:
    """`record_init` for the started `namespace`; the note is removed once the namespace
    has ended (`forget_init`, when it closes)."""
    pid = namespace.init_pid
    started = record_init(thread_dir, pid)
    if pid is not None and started is not None:
        namespace.on_close(functools.partial(forget_init, thread_dir, pid, started))


def record_init(thread_dir: Path | str, pid: int | None) -> int | None:
    """Note in `thread_dir` that the init `pid` runs the thread's namespace (best effort:
    without the note, removing the directory does not end the namespace first); return
    the start time noted, None when nothing was."""
    started = _start_time(pid) if pid is not None else None
    if pid is None or started is None:
        return None
    # `os` calls on a string: a text file object costs five more system calls.
    with _noting, contextlib.suppress(OSError):
        fd = os.open(f"{thread_dir}/{INIT_FILE}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                     | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, _note(pid, started))
        finally:
            os.close(fd)
        return started
    return None


def forget_init(thread_dir: Path | str, pid: int, started: int) -> None:
    """Remove the note of the init `pid` (started at `started`) from `thread_dir` once its
    namespace has ended, if the note still names it.

    Safe against a deletion from another process, which reads the note to end the
    init first: the init is gone by now, so a deletion that finds no note has nothing to
    end, and one that read it just before finds the init gone (`_end_init`).
    """
    note = f"{thread_dir}/{INIT_FILE}"
    with _noting, contextlib.suppress(OSError):
        fd = os.open(note, os.O_RDONLY | os.O_CLOEXEC)
        try:
            noted = os.read(fd, 64)
        finally:
            os.close(fd)
        if noted == _note(pid, started):
            os.unlink(note)


def _note(pid: int, started: int) -> bytes:
    return f"{pid} {started}\n".encode("ascii")


def remove_thread_directory(thread_dir: Path) -> None:
    """End the thread's namespace if it still lives, then remove `thread_dir` entirely.

    Raises:
        ThreadDirectoryError: the namespace cannot be ended, or the directory removed.
    """
    _end_init(thread_dir)
    for attempt in range(_ATTEMPTS):
        try:
            remove_tree(thread_dir)
            return
        except FileNotFoundError:
            continue  # something went away while it was being listed: look again
        except OSError as error:
            if attempt == _ATTEMPTS - 1 or error.errno not in _RACED:
                where = error.filename or thread_dir
                raise ThreadDirectoryError(
                    f"cannot remove the thread's files: {where}: "
                    f"{error.strerror or error}. Remove what is left of {thread_dir} as a "
                    "user who may (its owner, or root), then delete the thread again"
                ) from error
    if thread_dir.exists():
        raise ThreadDirectoryError(f"cannot remove the thread's files in {thread_dir}: "
                                   "something keeps writing there")


def remove_tree(path: Path) -> None:
    """Remove the directory `path` and everything in it, if it is there; the overlay makes
    its folders there with no permissions, which only root may pass."""
    if not path.is_dir() or path.is_symlink():
        with contextlib.suppress(FileNotFoundError):
            if path.is_symlink() or path.exists():
                path.unlink()
        return

    def passable(folder: str) -> None:
        with contextlib.suppress(PermissionError):  # not its owner: rmtree says so
            os.chmod(folder, 0o700)  # before it is listed
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    passable(entry.path)

    passable(str(path))
    shutil.rmtree(path)


def _end_init(thread_dir: Path) -> None:
    """Kill the init `INIT_FILE` names, if it is still that init; wait until it is gone."""
    try:
        recorded = (thread_dir / INIT_FILE).read_text(encoding="ascii").split()
        pid, started = int(recorded[0]), int(recorded[1])
    except (OSError, ValueError, IndexError):
        return  # no namespace was noted (or the note is unreadable: nothing to go by)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return  # gone already
    try:
        # Checked after the pidfd is open: from here on the pid cannot be reused.
        if _start_time(pid) != started or _INIT_COMMAND not in _command_line(pid):
            return  # another process has that pid now
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError as error:
            raise ThreadDirectoryError(
                f"the thread's sandbox namespace still runs (init pid {pid}) under another "
                "user, who may end it: stop the process that runs the thread (a server "
                "ends a namespace after its idle time), or delete the thread as that user "
                "or root") from error
        deadline = time.monotonic() + _END_WAIT
        while _start_time(pid) == started and time.monotonic() < deadline:
            time.sleep(0.01)  # until its parent has reaped it (then nothing of it is left)
    finally:
        os.close(pidfd)


def _start_time(pid: int) -> int | None:
    """Process `pid`'s start time (clock ticks after boot); None once it is reaped."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
    except OSError:
        return None
    finally:
        os.close(fd)
    if fields[0] == b"Z":
        return None  # dead, only its parent's wait left: nothing in it runs any more
    return int(fields[19])


def _command_line(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return b""
