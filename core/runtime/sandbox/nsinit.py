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

A *spare* init (``main(fd, spare=True)``) is started before its thread is
known: bubblewrap runs it as the namespace's root, with only the capabilities
to mount (``CAP_SYS_ADMIN``) and to map the root to its own user namespace's
sandbox user (``CAP_SETFCAP``), and a
view of the base directory's ``users`` tree mounted in its ``/tmp``. It takes
no command until its first request, ``("adopt", view, binds, workdir)``, has
made it the thread's: it bind-mounts each ``(source, target, read_only)`` of
``binds`` (sources inside the view), detaches the view and removes its mount
point, moves to ``workdir``, enters a cgroup namespace of its own (its pids
cgroup becomes ``/``) and a user namespace in which it is the ``sandbox``
user (uid 1000) with every capability dropped, bounding set included, as
bubblewrap leaves its commands; then it answers ``("adopted",)``, or
``("failed", reason)`` and exits. From then on it is like any other init.

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
_SANDBOX_ID = 1000  # the sandbox user's uid and gid
# mount(2), umount2(2), unshare(2), prctl(2) and capset(2) numbers (Linux).
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 32, 4096, 1024, 2048, 1 << 21
_ST_NOEXEC, _ST_NOATIME, _ST_NODIRATIME, _ST_RELATIME = 8, 1024, 2048, 4096
_MNT_DETACH = 2
_CLONE_NEWCGROUP, _CLONE_NEWUSER = 0x02000000, 0x10000000
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 4, 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522


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


class _Libc:
    """The C library's calls the standard `posix` module lacks, through `_ctypes` alone
    (the `ctypes` package costs milliseconds of imports); each raises `OSError` with the
    call's errno when it fails."""

    def __init__(self):
        import _ctypes

        class Int(_ctypes._SimpleCData):
            _type_ = "i"

        class Long(_ctypes._SimpleCData):
            _type_ = "l"

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = Int

        class Library:
            _handle = _ctypes.dlopen("libc.so.6")

        self._ctypes = _ctypes
        self._functions = {}
        self.Int, self.Long = Int, Long
        try:
            fd = posix.open("/proc/sys/kernel/cap_last_cap", posix.O_RDONLY)
            try:
                self.last_capability = int(posix.read(fd, 16))
            finally:
                posix.close(fd)
        except (OSError, ValueError):
            self.last_capability = 63
        for name in ("mount", "umount2", "unshare", "prctl", "capset"):
            self._functions[name] = Function((name, Library))

    def __call__(self, name, *arguments):
        result = self._functions[name](*arguments)
        if result == -1:
            errno = self._ctypes.get_errno()
            raise OSError(errno, f"{name}: {posix.strerror(errno)}")
        return result


def _write(path, text):
    fd = posix.open(path, posix.O_WRONLY)
    try:
        posix.write(fd, text.encode())
    finally:
        posix.close(fd)


def _adopt(libc, view, binds, workdir):
    """Make a spare namespace its thread's (see the module docstring): mount the thread's
    directories from the view, drop the view, then become the unprivileged sandbox user."""
    long = libc.Long
    for source, target, read_only in binds:
        libc("mount", source.encode(), target.encode(), None, long(_MS_BIND), None)
        if read_only:
            # A bind remount keeps the atime settings the mount has (they may be locked).
            found = posix.statvfs(target).f_flag
            flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
            for have, need in ((_ST_NOEXEC, _MS_NOEXEC), (_ST_NOATIME, _MS_NOATIME),
                               (_ST_NODIRATIME, _MS_NODIRATIME), (_ST_RELATIME, _MS_RELATIME)):
                if found & have:
                    flags |= need
            libc("mount", None, target.encode(), None, long(flags), None)
    libc("umount2", view.encode(), libc.Int(_MNT_DETACH))
    posix.rmdir(view)
    posix.chdir(workdir)
    libc("unshare", libc.Int(_CLONE_NEWCGROUP))
    libc("unshare", libc.Int(_CLONE_NEWUSER))
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{_SANDBOX_ID} 0 1")
    _write("/proc/self/gid_map", f"{_SANDBOX_ID} 0 1")
    # The new user namespace gave every capability back: drop them all, for good.
    for capability in range(libc.last_capability + 1):
        libc("prctl", libc.Int(_PR_CAPBSET_DROP), long(capability), long(0), long(0), long(0))
    libc("prctl", libc.Int(_PR_CAP_AMBIENT), long(_PR_CAP_AMBIENT_CLEAR_ALL), long(0),
         long(0), long(0))
    header = _CAPABILITY_VERSION_3.to_bytes(4, sys.byteorder) + bytes(4)
    libc("capset", header, bytes(24))  # effective, permitted, inheritable: none
    if posix.getuid() != _SANDBOX_ID or _capabilities() != 0:
        raise OSError(1, "the capabilities or the user did not change")


def _capabilities():
    """This process's permitted, effective and bounding capabilities, or-ed together."""
    fd = posix.open("/proc/self/status", posix.O_RDONLY)
    try:
        status = posix.read(fd, 1 << 16)
    finally:
        posix.close(fd)
    found = 0
    for line in status.splitlines():
        if line.startswith((b"CapPrm:", b"CapEff:", b"CapBnd:", b"CapAmb:")):
            found |= int(line.split()[1], 16)
    return found


class Init:
    """The loop: requests on the control socket, the commands' channels, their exits."""

    def __init__(self, control_fd, spare=False):
        self.spare = spare  # no command until adopted
        self.libc = None  # a spare's, ready for its adoption
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
        if self.spare:
            for fd in fds:
                _close(fd)
            if message[0] != "adopt":
                return False  # a spare takes nothing before it is adopted
            try:
                _adopt(self.libc, *message[1:])
            except (OSError, TypeError, ValueError, AttributeError) as error:
                _send(self.control, ("failed", str(error)))
                return False
            _undumpable()  # again: changing credentials made it dumpable
            self.spare = False
            _send(self.control, ("adopted",))
        elif message[0] == "run" and len(fds) == 4:
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


def _warm_up():
    """Start and reap one short process, so that the first command does not pay for the
    code paths' first use (a spare has the time: nobody waits for it)."""
    try:
        pid = posix.posix_spawn("/bin/sh", ["/bin/sh", "-c", ":"], {},
                                setsid=True, setsigdef=_DEFAULT_SIGNALS, setsigmask=())
        posix.waitpid(pid, 0)
    except OSError:
        pass


def main(control_fd, spare=False):
    """Serve the harness on `control_fd` until it ends; every other descriptor is closed.

    ``spare``: wait to be adopted by a thread before taking commands."""
    _undumpable()
    posix.closerange(3, control_fd)
    posix.closerange(control_fd + 1, 1 << 16)
    posix.set_inheritable(control_fd, False)
    init = Init(control_fd, spare)
    if spare:  # nobody waits for a spare: do now what would hold its first command up
        try:  # noqa: SIM105 - contextlib costs the init milliseconds of imports
            init.libc = _Libc()
        except (ImportError, OSError, AttributeError):
            pass  # its adoption fails, and namespaces are started whole
        _warm_up()
    init.control.send(b"ready")
    init.serve()
    posix._exit(0)
