"""A thread's long-lived bubblewrap namespace, and the commands started in it.

Starting bubblewrap costs several plain process starts (namespaces, mounts, a
pivot), so a thread's sandbox starts it once and keeps it: `Namespace` runs
bubblewrap with `antler.runtime.sandbox.nsinit` as the namespace's PID 1 (under
the sandbox's own system Python), and each command is a request to that init
over a socket: the init forks it inside, with the pipes the harness made. A
command there costs about what a plain `subprocess` start costs.

A namespace whose init is a *source* (``spare=True``) runs no command: its
init forks spare namespaces (`Namespace.spawn`), each nested in the source's
and with no bubblewrap of its own, for threads to adopt (`Namespace.adopt`;
`antler.runtime.sandbox.spares` keeps the sources). A fork of the small init
costs a fraction of a start of bubblewrap and a new interpreter.

Lifetime (see `BwrapSandbox` for when each step happens):

* started on the thread's first command, or ahead of it (`Namespace.start`
  returns once the init listens), or spawned by a source and adopted;
* a command's leftovers die with it: when its shell exits, the init kills its
  group and every process outside the other running commands' sessions;
* `Namespace.end` (the end of a run) kills every process but the init outside
  running commands' sessions;
* `Namespace.close` ends the namespace: the init kills everything and exits,
  and as PID 1 its exit makes the kernel kill whatever is left. It is closed
  after an idle time, with its sandbox, and when it stops answering. An init
  that does not exit in time is killed from here, by a pidfd (never a reused
  pid); bubblewrap reaps it and exits (a spawned spare's init: its source's init
  reaps it), so when `close` returns the namespace is gone and its init reaped.

Should the harness die, the init sees its control socket end and does the
same; bubblewrap's ``--die-with-parent`` (bubblewrap is started from one
long-lived thread, so the death that counts is the process's) and the
reaper's watchdog (the init carries the sandbox's token) back that up.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import marshal
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from antler.plugin_api.sandbox import SandboxError

from . import reaper

__all__ = ["Namespace", "NamespaceCommand", "NamespaceGoneError", "memory_file"]

_INIT_SOURCE = Path(__file__).with_name("nsinit.py")
_MARSHAL_VERSION = 2  # read by every Python 3 the sandbox's system may have
_START_TIMEOUT = 30.0
_END_TIMEOUT = 30.0
# How long a killed command's exit may take to be reported before the namespace is ended.
_KILL_GRACE = 5.0
_ids = itertools.count(1)

# bubblewrap's --die-with-parent follows the thread that started it: start every
# namespace from one thread that lives as long as the process.
_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _spawn(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen`, called from the spawning thread."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="antler-bwrap")
        spawner = _spawner

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, **options)

    return spawner.submit(popen).result()


class NamespaceGoneError(SandboxError, RuntimeError):
    """The namespace's init no longer answers (it was closed, or died); start another."""


class NamespaceCommand:
    """One command running in a namespace, as the command runner sees a `subprocess.Popen`.

    Its exit arrives on its channel, a socket of its own that the init answers
    on; anything the harness sends there kills the command's process group.
    """

    def __init__(self, channel: socket.socket, stdout: int, stderr: int,
                 end_namespace: Callable[[], None]) -> None:
        self.pid = next(_ids)  # a label: the command's pid is the namespace's own
        self._end_namespace = end_namespace
        self._kill_asked: float | None = None
        self.stdout: IO[bytes] | None = open(stdout, "rb", buffering=0)  # noqa: SIM115 - the runner
        self.stderr: IO[bytes] | None = open(stderr, "rb", buffering=0)  # noqa: SIM115 - closes them
        self.returncode: int | None = None
        self._channel: socket.socket | None = channel

    def poll(self) -> int | None:
        channel = self._channel
        if self.returncode is None and channel is not None:
            try:
                data = channel.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            except OSError:
                data = b""
            self._settle(data)
        return self.returncode

    def _settle(self, data: bytes) -> None:
        message = marshal.loads(data) if data else None
        # No answer: the namespace ended under the command, which was killed with it.
        self.returncode = int(message[1]) if message and message[0] == "exit" \
            else -signal.SIGKILL
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit; a command killed `_KILL_GRACE` seconds ago without an answer
        ends the whole namespace (an init that does not answer is not waited for)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poller = select.poll()
        while (code := self.poll()) is None:
            channel = self._channel
            if channel is None:
                break
            now = time.monotonic()
            if self._kill_asked is not None and now - self._kill_asked >= _KILL_GRACE:
                self._end_namespace()  # the channel ends with it: the next poll settles
                self._kill_asked = None
                continue
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"command {self.pid}", timeout or 0.0)
            if self._kill_asked is not None:
                grace = self._kill_asked + _KILL_GRACE - now
                left = grace if left is None else min(left, grace)
            poller.register(channel, select.POLLIN)
            poller.poll(None if left is None else max(0.0, left) * 1000)
            poller.unregister(channel)
        return code if code is not None else -signal.SIGKILL

    def exit_descriptor(self) -> int | None:
        """A descriptor that becomes readable when the command's exit is known (the caller
        closes it)."""
        channel = self._channel
        return os.dup(channel.fileno()) if channel is not None else None

    def kill_group(self) -> None:
        """Kill the command's process group (the init does it)."""
        channel = self._channel
        if channel is not None:
            if self._kill_asked is None:
                self._kill_asked = time.monotonic()
            with contextlib.suppress(OSError):
                channel.send(b"kill")


class Namespace:
    """One running bubblewrap namespace whose PID 1 starts commands (see the module docstring).

    Args:
        bwrap: bubblewrap's path.
        options: bubblewrap's options (mounts, namespaces, ...); they reach it through
            a descriptor (``--args``), not its command line.
        python: the Python inside the namespace that runs the init.
        env: the init's environment (the commands get their own).
        fds: descriptors the options refer to (``--file`` sources); closed once started.
        spare: start the init as a source of spare namespaces (`spawn`), which `adopt`
            makes a thread's (the options must run it as the namespace's root, with the
            capabilities they need for that); a spawned spare has it set until adopted.
    """

    def __init__(self, bwrap: str, options: Sequence[str], python: str, env: dict[str, str],
                 fds: Sequence[int] = (), *, spare: bool = False) -> None:
        self.spare = spare
        self._bwrap = bwrap
        self._options = list(options)
        self._python = python
        self._env = env
        self._fds = list(fds)
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._send_lock = threading.RLock()  # re-entered by a signal handler (interrupt)
        self._close_lock = threading.RLock()  # re-entered by a callback of `on_close`
        self._devnull: int | None = None
        self._on_close: list[Callable[[], None]] = []
        self.init_pid: int | None = None
        """The init's pid on the host (bubblewrap's ``child-pid``)."""
        self._init_fd: int | None = None  # a pidfd of the init, to kill it and see it end
        self._launched: tuple[subprocess.Popen[bytes], socket.socket, int] | None = None

    @property
    def alive(self) -> bool:
        if self._control is None:
            return False
        if self._process is not None:
            return self._process.poll() is None
        # A spare spawned by a source: no bubblewrap of its own; its init's pidfd says.
        init_fd = self._init_fd  # once: a close in another thread may drop it meanwhile
        return init_fd is not None and not _readable(init_fd, 0.0)

    def start(self) -> None:
        """Start bubblewrap and its init; return once the init runs.

        Raises:
            SandboxError: bubblewrap could not set the namespace up (its message).
        """
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start bubblewrap (the first half of `start`); return once it runs.

        Starting a process copies every descriptor of this one until the process execs:
        a lock held through a descriptor (a thread's run lock) is held by the copy
        meanwhile. So a run starts namespaces only while it holds its own lock (in its
        hooks and tool calls): the copy is gone before the run lets its lock go. The
        rest, the namespace's setup, may be waited for in the background (`wait_ready`).
        """
        reaper.start_watchdog()
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        info_read, info_write = os.pipe()
        code = memory_file("antler-init", _INIT_SOURCE.read_bytes()
                            + f"\nmain({theirs.fileno()}, {self.spare})\n".encode())
        arguments = memory_file("bwrap-args", b"".join(
            option.encode() + b"\0" for option in
            [*self._options, "--info-fd", str(info_write)]))
        boot = f"import posix;exec(posix.read({code},1<<20))"
        passed = (arguments, code, info_write, theirs.fileno(), *self._fds)
        try:
            process = _spawn(
                [self._bwrap, "--args", str(arguments), "--", self._python, "-I", "-S", "-c",
                 boot],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env=self._env, start_new_session=True, pass_fds=passed)
        finally:
            for fd in (arguments, code, info_write, *self._fds):
                os.close(fd)
            theirs.close()
        self._launched = (process, control, info_read)

    def wait_ready(self) -> None:
        """Wait until the init that `launch` started runs (the second half of `start`).

        Raises:
            SandboxError: bubblewrap could not set the namespace up (its message).
        """
        assert self._launched is not None, "launch() first"
        (process, control, info_read), self._launched = self._launched, None
        try:
            info = _read_all(info_read, _START_TIMEOUT)
        finally:
            os.close(info_read)
        assert process.stderr is not None
        # The init says it is ready once it listens: a command sent earlier would wait.
        ready = _ready(control, _START_TIMEOUT) if info else False
        if not ready:
            process.kill()
            _, said = process.communicate()
            control.close()
            detail = said.decode("utf-8", "replace").strip().splitlines()
            who = "bubblewrap could not start the sandbox" if not info else \
                "the sandbox's init did not start"
            raise SandboxError(f"{who}: "
                               + (detail[-1] if detail else f"exit code {process.returncode}"))
        process.stderr.close()  # the init says nothing more; its failures show as a closed socket
        self.init_pid = int(json.loads(info.decode())["child-pid"])
        # The init just said it is ready, and only bubblewrap may reap it: the pid is its.
        with contextlib.suppress(OSError):
            self._init_fd = os.pidfd_open(self.init_pid)
        self._process, self._control = process, control

    def spawn(self, *, network: bool, tmp_bytes: int) -> Namespace:
        """A new spare namespace, forked by this source's init (see `nsinit`): unadopted,
        its own mount, PID, IPC, UTS and (unless `network`) network namespaces, nested in
        this one's; `tmp_bytes` is the size of the ``/tmp`` its adoption gives it. It ends
        when closed, and with this namespace.

        Raises:
            NamespaceGoneError: this source no longer answers.
            SandboxError: the spare could not set itself up (its reason).
        """
        control = self._control
        if control is None or not self.spare:
            raise NamespaceGoneError("the namespace is closed, or not a source of spares")
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # The spare's "ready" then carries its pid, as this process's PID namespace
            # numbers it (its cgroup and its pidfd need that one).
            mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            with self._send_lock:
                socket.send_fds(control, [marshal.dumps(("spawn", network, tmp_bytes),
                                                        _MARSHAL_VERSION)], [theirs.fileno()])
        except OSError as error:
            mine.close()
            raise NamespaceGoneError(f"the namespace's init is gone ({error})") from None
        finally:
            theirs.close()
        try:
            pid, said = _hello(mine, _START_TIMEOUT)
            init_fd = os.pidfd_open(pid) if pid is not None else None
        except OSError as error:
            pid, said, init_fd = None, str(error), None
        if pid is None or init_fd is None:
            mine.close()
            raise SandboxError(f"the sandbox's init could not start a namespace: {said}")
        spare = Namespace(self._bwrap, (), self._python, self._env, spare=True)
        spare._control, spare.init_pid, spare._init_fd = mine, pid, init_fd
        return spare

    def adopt(self, view: str, binds: Sequence[tuple[str, str, bool, bool]], workdir: str,
              overlays: Sequence[tuple[str, str, str, str]] = ()
              ) -> tuple[int | None, str | None]:
        """Make a spare namespace a thread's: its init mounts each ``(source, target,
        read_only, optional)`` of `binds` from `view` (a mount inside; an optional one
        whose source or target is missing is left out), detaches `view`, moves to
        `workdir` and drops to the unprivileged sandbox user (see `nsinit`).

        With `overlays` (each ``(directory, upper, work, lower)``: a directory in `view`,
        then names relative to it; ``upper`` empty for a read-only one), the `binds` below
        an overlay's top layer are mounted from it (see `nsinit`). Returns a descriptor
        of the writable overlay's root (the caller owns it), or None and why the overlays
        could not be mounted (the binds were then mounted from the view); ``(None,
        None)`` without `overlays`.

        Raises:
            SandboxError: the init could not (the namespace is closed).
        """
        control = self._control
        if control is None or not self.spare:
            raise NamespaceGoneError("the namespace is closed, or not a spare")
        fds: list[int] = []
        try:
            with self._send_lock:
                control.send(marshal.dumps(("adopt", view, [list(bind) for bind in binds],
                                            workdir, [list(layers) for layers in overlays]),
                                           _MARSHAL_VERSION))
            poller = select.poll()
            poller.register(control, select.POLLIN)
            data = b""
            if poller.poll(_START_TIMEOUT * 1000):
                # Room for the sender's credentials too: the socket asked for them (`spawn`).
                data, ancillary, _flags, _address = control.recvmsg(
                    4096, socket.CMSG_SPACE(4) + socket.CMSG_SPACE(struct.calcsize("3i")),
                    socket.MSG_CMSG_CLOEXEC)
                fds = [fd for level, kind, value in ancillary
                       if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
                       for fd in struct.unpack(f"{len(value) // 4}i",
                                               value[:len(value) // 4 * 4])]
        except OSError:
            data = b""
        answer = marshal.loads(data) if data else ("failed", "no answer")
        if answer[0] != "adopted":
            for fd in fds:
                os.close(fd)
            self.close(grace=0.0)
            raise SandboxError(f"the sandbox's init could not take the thread's directories: "
                               f"{answer[-1]}")
        self.spare = False
        for extra in fds[1:]:
            os.close(extra)
        if fds:
            return fds[0], None
        return None, (str(answer[1]) if len(answer) > 1 else
                      "no descriptor came" if any(upper for _, upper, _, _ in overlays)
                      else None)

    def run(self, argv: list[str], env: dict[str, str]) -> NamespaceCommand:
        """Start one command in the namespace's working directory, its output on two new
        pipes and nothing to read on its input.

        Raises:
            NamespaceGoneError: the init did not take the request (start another namespace).
        """
        control = self._control
        if control is None or self.spare:
            raise NamespaceGoneError("the namespace is closed, or a spare not yet adopted")
        channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        request = marshal.dumps(("run", argv, env), _MARSHAL_VERSION)
        try:
            with self._send_lock:
                socket.send_fds(control, [request],
                                [theirs.fileno(), self._stdin(), out_write, err_write])
        except OSError as error:
            for fd in (out_read, err_read):
                os.close(fd)
            channel.close()
            raise NamespaceGoneError(f"the namespace's init is gone ({error})") from None
        finally:
            for fd in (out_write, err_write):
                os.close(fd)
            theirs.close()
        return NamespaceCommand(channel, out_read, err_read,
                                functools.partial(self.close, grace=0.0))

    def _stdin(self) -> int:
        """``/dev/null``, opened once: every command's input."""
        if self._devnull is None:
            self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return self._devnull

    def end(self) -> None:
        """Kill every process outside the running commands' sessions; wait until it is done."""
        control = self._control
        if control is None:
            return
        reply, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._send_lock:
                socket.send_fds(control, [marshal.dumps(("end",), _MARSHAL_VERSION)],
                                [theirs.fileno()])
            theirs.close()
            reply.settimeout(_END_TIMEOUT)
            reply.recv(64)
        except OSError:
            pass  # the init is gone: so is everything it started
        finally:
            theirs.close()
            reply.close()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the namespace has ended (`close`)."""
        self._on_close.append(callback)

    def close(self, grace: float = 5.0) -> None:
        """End the namespace and everything in it, and return once it is gone and its init
        reaped: the init is asked to end it, and killed unless it has within `grace`
        seconds (an init that is stopped, or too busy, does not answer).

        Closes from several threads (an idle time's end, a command's, the caller's) take
        turns: the first does the work, the others return once it is done."""
        with self._close_lock:
            self._close(grace)

    def _close(self, grace: float) -> None:
        control, self._control = self._control, None
        process = self._process
        if control is not None:
            control.close()  # the init kills everything and exits
        if self._devnull is not None:
            os.close(self._devnull)
            self._devnull = None
        if process is not None:
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._kill_init(process)
        elif self._init_fd is not None:  # a spawned spare: its source's init reaps it
            if not _readable(self._init_fd, grace):
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self._init_fd, signal.SIGKILL)
                _readable(self._init_fd, _END_TIMEOUT)
            _wait_reaped(self._init_fd)
        if self._init_fd is not None:
            os.close(self._init_fd)
            self._init_fd = None
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback()


    def _kill_init(self, process: subprocess.Popen[bytes]) -> None:
        """Kill the init, so that bubblewrap reaps it and exits; should bubblewrap not, kill
        it too and wait for the init's end (it dies with bubblewrap, and its new parent
        reaps it).

        Killing bubblewrap alone is not enough: the init's death (``--die-with-parent``)
        comes after bubblewrap's and, as PID 1, waits for every process of its namespace
        to end first, so the init could still be there when bubblewrap is reaped.
        """
        if self._init_fd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._init_fd, signal.SIGKILL)
            try:
                process.wait(timeout=_END_TIMEOUT)
                return
            except subprocess.TimeoutExpired:
                pass
        process.kill()
        process.wait()
        if self._init_fd is not None:
            poller = select.poll()
            poller.register(self._init_fd, select.POLLIN)
            poller.poll(_END_TIMEOUT * 1000)  # readable once the init has exited


def memory_file(name: str, data: bytes) -> int:
    """A memory file holding `data`, read from the start (inheritable only when passed).

    ``name`` is only the file's label (its last ``/`` component is used)."""
    fd = os.memfd_create(name.rsplit("/", 1)[-1], os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _ready(control: socket.socket, timeout: float) -> bool:
    """Whether the init said it is ready on `control` within `timeout` seconds."""
    poller = select.poll()
    poller.register(control, select.POLLIN)
    if not poller.poll(timeout * 1000):
        return False
    try:
        return control.recv(16) == b"ready"
    except OSError:
        return False


def _readable(fd: int, timeout: float) -> bool:
    """Whether `fd` is readable within `timeout` seconds (a pidfd: its process has exited)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def _wait_reaped(pidfd: int) -> None:
    """Wait (at most `_END_TIMEOUT`) until the exited process of `pidfd` has been reaped."""
    deadline = time.monotonic() + _END_TIMEOUT
    while time.monotonic() < deadline:
        try:
            signal.pidfd_send_signal(pidfd, 0)  # succeeds until the process is reaped
        except OSError:
            return
        time.sleep(0.001)


def _hello(control: socket.socket, timeout: float) -> tuple[int | None, str]:
    """The pid of a spawned spare that said ``ready`` on `control` within `timeout` seconds
    (from the message's credentials), or None and why not."""
    poller = select.poll()
    poller.register(control, select.POLLIN)
    if not poller.poll(timeout * 1000):
        return None, "no answer"
    data, ancillary, _flags, _address = control.recvmsg(
        4096, socket.CMSG_SPACE(struct.calcsize("3i")))
    if data != b"ready":
        answer = marshal.loads(data) if data else ("failed", "it exited")
        return None, str(answer[-1])
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _uid, _gid = struct.unpack("3i", value[:struct.calcsize("3i")])
            return pid, ""
    return None, "no credentials"


def _read_all(fd: int, timeout: float) -> bytes:
    """Everything written to pipe `fd` until its writer closes it, or until `timeout`."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while (left := deadline - time.monotonic()) > 0:
        if not poller.poll(left * 1000):
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        with contextlib.suppress(ValueError):
            json.loads(b"".join(chunks))
            break  # bubblewrap may keep the pipe open: a whole document is enough
    return b"".join(chunks)
