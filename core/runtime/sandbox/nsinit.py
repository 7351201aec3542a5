"""The init of a thread's bubblewrap namespace: PID 1 inside, it starts the thread's commands.

`antler.runtime.sandbox.namespace` starts one bubblewrap namespace per thread
with this program as its only process (``--as-pid-1``), run by the sandbox's
own system Python as ``python3 -I -S`` and fed this file's text through a
descriptor. It imports built-in modules only (``posix``, ``_socket``...), so it
starts as fast as the interpreter does, and it never looks at the harness's
files: it sees the sandbox's mounts like any command.

The harness talks to it over one ``SOCK_SEQPACKET`` socket (the *control*
socket, inherited). Each request is one `marshal`-ed tuple with descriptors
attached (``SCM_RIGHTS``):

* ``("run", argv, env)`` with four descriptors: the command's *channel* (a
  socket of its own), its stdin, stdout and stderr. The init starts ``argv``
  with `posix_spawn` (a vfork: a Python `fork` would copy the interpreter and
  cost several times a command's start) in a session of its own, in the init's
  working directory (the workspace), the three descriptors as 0, 1 and 2 and
  no other (every descriptor of the init is close-on-exec), every signal at its
  default disposition and none blocked: the interpreter ignores ``SIGPIPE`` and
  ``SIGXFSZ``, and a command must not inherit that (``yes | head -1`` would
  complain of a broken pipe, and a write past the file-size limit would fail
  instead of killing the writer). A command that
  cannot start reports exit code 126 (127: not found) and why, on its stderr.
  Whatever arrives on the channel, or its end, kills the command's process
  group (a time limit, an interrupt, an abandoned call).
  When the command's shell exits, its group and every process outside the
  sessions of the thread's other running commands are killed (so nothing it
  left behind, ``setsid`` or not, outlives it), and ``("exit", code)`` is
  sent on the channel (``code`` as `subprocess` reports it: negative for a
  signal).
* ``("end",)`` with one descriptor, a reply socket: kill every process outside
  the running commands' sessions, then reply ``("ended",)``.

The init says ``ready`` on the control socket once it listens. When the
control socket ends (the harness closed it, or died), the init kills
every other process and exits; as PID 1, its exit ends the namespace, and the
kernel kills whatever is left. Orphans are re-parented to it, and it reaps them.
"""

# Only built-in modules: `os`, `signal` and `socket` cost milliseconds of imports.
import _signal
import _socket
import marshal
import posix
import select
import sys

_MAX_FDS = 16
_KILL = 9


def _ignored_signals():
    """The signals this process ignores: the interpreter's own (``SIGPIPE``, ``SIGXFSZ``)
    and any it inherited; its commands get them back at their default."""
    ignored = {_signal.SIGPIPE, _signal.SIGXFSZ}
    for signum in _signal.valid_signals():
        try:
            if _signal.getsignal(signum) == _signal.SIG_IGN:
                ignored.add(signum)
        except (OSError, ValueError):
            continue
    return tuple(sorted(ignored))


_DEFAULT_SIGNALS = _ignored_signals()


def _descriptors(ancillary):
    """The descriptors of an ``SCM_RIGHTS`` message, in order."""
    found = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            found += [int.from_bytes(data[i:i + 4], sys.byteorder)
                      for i in range(0, usable, 4)]
    return found


def _close(fd):
    try:  # noqa: SIM105 - contextlib costs the init milliseconds of imports
        posix.close(fd)
    except OSError:
        pass


def _kill(pid, group=False):
    try:
        if group:
            posix.killpg(pid, _KILL)
        else:
            posix.kill(pid, _KILL)
    except OSError:
        pass


def _session(pid):
    """The session of `pid` (from /proc), or None when it is gone."""
    try:
        fd = posix.open(f"/proc/{pid}/stat", posix.O_RDONLY)
    except OSError:
        return None
    try:
        stat = posix.read(fd, 4096)
    finally:
        posix.close(fd)
    try:
        return int(stat.rsplit(b")", 1)[1].split()[3])
    except (IndexError, ValueError):
        return None


def _send(channel, message):
    try:  # noqa: SIM105
        channel.send(marshal.dumps(message))
    except OSError:
        pass  # the harness gave the command up; nobody to tell


class Init:
    """The loop: requests on the control socket, the commands' channels, their exits."""

    def __init__(self, control_fd):
        self.control = _socket.socket(fileno=control_fd)
        self.running = {}  # pid of a command's shell -> its channel (None once let go)
        self.by_fd = {}  # channel descriptor -> pid
        self.wake_read, wake_write = posix.pipe()
        posix.set_blocking(wake_write, False)
        _signal.set_wakeup_fd(wake_write)
        _signal.signal(_signal.SIGCHLD, lambda signum, frame: None)
        self.poller = select.poll()
        self.poller.register(self.control.fileno(), select.POLLIN)
        self.poller.register(self.wake_read, select.POLLIN)

    def serve(self):
        while True:
            for fd, _events in self.poller.poll():
                if fd == self.wake_read:
                    posix.read(self.wake_read, 512)
                    self.reap()
                elif fd == self.control.fileno():
                    if not self.request():
                        self.kill_all()
                        return
                else:
                    self.channel(fd)

    def request(self):
        """Handle one request; False when the control socket has ended."""
        try:
            data, ancillary, _flags, _address = self.control.recvmsg(
                1 << 20, _socket.CMSG_SPACE(4 * _MAX_FDS), _socket.MSG_CMSG_CLOEXEC)
        except InterruptedError:
            return True
        fds = _descriptors(ancillary)
        if not data:
            for fd in fds:
                _close(fd)
            return False
        message = marshal.loads(data)
        if message[0] == "run" and len(fds) == 4:
            self.run(message[1], message[2], fds)
        elif message[0] == "end" and len(fds) == 1:
            reply = _socket.socket(fileno=fds[0])
            self.sweep(set(self.running))
            _send(reply, ("ended",))
            reply.close()
        else:
            for fd in fds:
                _close(fd)
        return True

    def run(self, argv, env, fds):
        channel_fd, stdin, stdout, stderr = fds
        channel = _socket.socket(fileno=channel_fd)
        try:
            pid = posix.posix_spawn(
                argv[0], argv, env, setsid=True, setsigdef=_DEFAULT_SIGNALS, setsigmask=(),
                file_actions=[(posix.POSIX_SPAWN_DUP2, stdin, 0),
                              (posix.POSIX_SPAWN_DUP2, stdout, 1),
                              (posix.POSIX_SPAWN_DUP2, stderr, 2)])
        except OSError as error:  # not found, or the process limit reached
            try:
                said = f"the sandbox could not start {argv[0]}: {error.strerror}\n"
                posix.write(stderr, said.encode())
            except OSError:
                pass
            for fd in (stdin, stdout, stderr):
                _close(fd)
            _send(channel, ("exit", 127 if isinstance(error, FileNotFoundError) else 126))
            channel.close()
            return
        for fd in (stdin, stdout, stderr):
            _close(fd)
        self.running[pid] = channel
        self.by_fd[channel.fileno()] = pid
        self.poller.register(channel.fileno(), select.POLLIN)

    def channel(self, fd):
        """Anything from a command's channel, or its end: kill the command's group."""
        pid = self.by_fd.pop(fd)
        self.poller.unregister(fd)
        _kill(pid, group=True)
        # The exit is still reported, should the harness still listen.

    def reap(self):
        while True:
            try:
                pid, status = posix.waitpid(-1, posix.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.running:
                self.finished(pid, status)

    def finished(self, pid, status, sweep=True):
        """A command's shell exited: stop what it left, then report its exit code."""
        channel = self.running.pop(pid)
        if sweep:
            _kill(pid, group=True)
            self.sweep(set(self.running))
        code = -posix.WTERMSIG(status) if posix.WIFSIGNALED(status) else \
            posix.WEXITSTATUS(status)
        if self.by_fd.pop(channel.fileno(), None) is not None:
            self.poller.unregister(channel.fileno())
        _send(channel, ("exit", code))
        channel.close()

    def sweep(self, spared):
        """Kill every process but this one outside the sessions `spared`."""
        if not spared:
            self.kill_all()
            return
        for _round in range(50):
            killed = False
            for name in posix.listdir("/proc"):
                if not name.isdigit() or name == "1":
                    continue
                pid = int(name)
                session = _session(pid)
                if session is not None and session not in spared:
                    _kill(pid)
                    killed = True
            if not killed:
                return

    def kill_all(self):
        """Kill every other process of the namespace and reap them all.

        A process being killed cannot finish a fork, so one ``kill(-1)`` reaches
        every process there is; waiting until no child is left proves them dead.
        """
        try:
            posix.kill(-1, _KILL)
        except OSError:
            return  # nobody else
        while True:
            try:
                pid, status = posix.waitpid(-1, 0)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid in self.running:
                self.finished(pid, status, sweep=False)


def _undumpable():
    """Make this process non-dumpable: the commands run as the same user, and could
    otherwise take it over (ptrace, /proc/1/mem) and keep processes from being killed.

    Through `_ctypes` alone (the `ctypes` package costs milliseconds of imports); without
    it the init stays dumpable, and the harness still ends the namespace from outside.
    """
    try:
        import _ctypes

        prctl = _ctypes.dlsym(_ctypes.dlopen("libc.so.6"), "prctl")
        _ctypes.call_function(prctl, (4, 0, 0, 0, 0))  # PR_SET_DUMPABLE, 0
    except (ImportError, OSError, AttributeError):
        pass


def main(control_fd):
    """Serve the harness on `control_fd` until it ends; every other descriptor is closed."""
    _undumpable()
    posix.closerange(3, control_fd)
    posix.closerange(control_fd + 1, 1 << 16)
    posix.set_inheritable(control_fd, False)
    init = Init(control_fd)
    init.control.send(b"ready")
    init.serve()
    posix._exit(0)
