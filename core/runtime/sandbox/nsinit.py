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

A *source* init (``main(fd, spare=True)``) runs no command: it makes spare
namespaces, one per ``("spawn", network, tmp_bytes)`` request (with one
descriptor, the new namespace's control socket), by forking (a fork of this
small interpreter costs a fraction of a new interpreter's start). Bubblewrap runs
it as the namespace's root with only the capabilities to unshare and mount
(``CAP_SYS_ADMIN``), to bring a new network namespace's loopback up
(``CAP_NET_ADMIN``), to map the root to a user namespace's sandbox user
(``CAP_SETFCAP``) and to mount an overlay (``CAP_DAC_OVERRIDE``: the overlay
works in a folder it makes with no permissions), a read-only ``/dev`` and a
view of the base directory's ``users`` tree and of the skill roots mounted in
its ``/tmp``; it makes its mounts private once, so that every copy of them is.
It unshares a PID namespace for its next
child, forks the spare (PID 1 there) and returns to its own PID namespace (a
source that cannot return ends, rather than put its next spare in the same
one). The spare unshares mount, IPC and (unless the network is allowed)
network namespaces, mounts a ``/proc`` of its own
(with ``sys``, ``sysrq-trigger``, ``irq`` and ``bus`` read-only, as bubblewrap
does: bound from read-only copies the source made of its own once, in its
``/tmp``; an entry the kernel lacks is left out), brings the loopback up and
says ``ready``; one that cannot says
``("failed", reason)`` on its own socket and exits. Its UTS namespace is the
source's: the host name ``sandbox``, which no command can change.

A spare takes no command until its first request, ``("adopt", view, binds,
workdir, overlays)``, has made it the thread's: it mounts each ``(source, target,
read_only, optional)`` of ``binds`` (sources inside the view; an ``optional`` one
whose source or target is missing is left out), detaches the view and the
source's ``/tmp`` for a ``/tmp`` of its own (``tmp_bytes``), mounts its own
``/dev/shm`` and a new ``devpts`` instance on ``/dev/pts`` (so nothing a command
can write is shared with another spare), moves to ``workdir``, enters a cgroup
namespace of its own (its pids cgroup becomes ``/``) and a user namespace in
which it is the ``sandbox`` user (uid 1000) with every capability dropped,
bounding set included, as bubblewrap leaves its commands; then it answers
``("adopted",)``, or ``("failed", reason)`` and exits. From then on it is like
any other init.

Each of ``overlays`` is ``(directory, upper, work, lower)``: a directory in the
view and names relative to it (or absolute ones inside the namespace). The init
mounts an overlay file system for each: a writable one whose upper layer is
``upper`` (the thread's ``user-data``), with ``work`` as its work directory and
the empty ``lower`` below; or, with no ``upper``, a read-only one of the layers
``lower`` (a skill root, ``.``, and an empty directory: the kernel wants two).
It mounts each overlay over its top layer in the view, so that the ``binds``
whose source is below it come from the overlay: the kernel prints an overlay's
root as ``/`` and its options as given, names that say nothing of the host (a
bind mount's root is its path within its file system, which starts with the
base directory's or the skill root's). The answer ``("adopted",)`` then carries a
descriptor of the writable overlay's root (``SCM_RIGHTS``), through which the
harness reaches the thread's files while the namespace lives: an overlay caches
its lookups, so a file changed beside it, in the upper directory, could stay
unseen inside. Where an overlay cannot be mounted (the kernel, the file system,
the capabilities), the init binds everything from the view as without them and
answers ``("adopted", reason)``, with no descriptor.

A spare also ends when its source does (its PID namespace is inside the source's).

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
_MAX_REQUEST = 1 << 20  # bytes of one request (a command's argv and environment)
_KILL = 9
_SANDBOX_ID = 1000  # the sandbox user's uid and gid
# mount(2), umount2(2), unshare(2), setns(2), prctl(2) and capset(2) numbers (Linux).
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 32, 4096, 1024, 2048, 1 << 21
_MS_REC, _MS_PRIVATE = 16384, 1 << 18
_ST_NOEXEC, _ST_NOATIME, _ST_NODIRATIME, _ST_RELATIME = 8, 1024, 2048, 4096
_MNT_DETACH = 2
_CLONE_NEWCGROUP, _CLONE_NEWUSER = 0x02000000, 0x10000000
_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_SIOCSIFFLAGS, _IFF_UP, _IFF_LOOPBACK = 0x8914, 0x1, 0x8
_AF_INET, _SOCK_DGRAM, _SOCK_CLOEXEC = _socket.AF_INET, _socket.SOCK_DGRAM, _socket.SOCK_CLOEXEC
# The loopback's flags as one SIOCSIFFLAGS request sets them: up. A new network
# namespace's loopback has no flag but IFF_LOOPBACK, which no request changes, so
# the request needs no SIOCGIFFLAGS before it (`_loopback_up`).
_LOOPBACK_UP = b"lo".ljust(16, b"\0") + (_IFF_UP | _IFF_LOOPBACK).to_bytes(2, sys.byteorder) \
    + bytes(22)
# /proc entries bubblewrap makes read-only in its /proc; a spare's own /proc does the same.
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")
# Where a source keeps read-only copies of them, which its spares bind into their own /proc
# (in its /tmp, which an adopted spare detaches).
_PROC_COPIES = "/tmp/.antler-proc"
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 4, 24
_CAPABILITY_VERSION_3 = 0x20080522
# The new mount API (fsopen(2), fsconfig(2), fsmount(2), move_mount(2)).
_FSOPEN_CLOEXEC, _FSMOUNT_CLOEXEC = 1, 1
_FSCONFIG_SET_FLAG, _FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE = 0, 1, 6
_MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 2, 4
_MOVE_MOUNT_F_EMPTY_PATH, _AT_FDCWD = 4, -100
_ENOENT, _ESRCH, _EINTR = 2, 3, 4
_WNOHANG = 1
_PEEK = _socket.MSG_PEEK | _socket.MSG_DONTWAIT  # a look at a channel, taking nothing


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


def _kill(pid, group=False, libc=None):
    """Kill process `pid` (its group, with `group`), should it still be there; whether it
    was. Through `libc` where the init has it: no exception for a process that is gone,
    the usual case (a spare's first exception costs it about 0.1 ms of page faults on the
    interpreter's code for raising one)."""
    if libc is not None:
        return libc.kill(-pid if group else pid, _KILL) == 0
    try:
        if group:
            posix.killpg(pid, _KILL)
        else:
            posix.kill(pid, _KILL)
    except OSError:
        return False
    return True


def _wait_any(libc, block):
    """``(pid, status)`` of an exited child (waited for with `block`), ``(0, 0)`` when none
    has exited yet, or None when the init has no child; through `libc` where it has it
    (no exception when there is no child, the usual case: see `_kill`)."""
    if libc is None:
        try:
            return posix.waitpid(-1, 0 if block else posix.WNOHANG)
        except ChildProcessError:
            return None
    while True:
        pid = libc.waitpid(-1, libc.status_ref, 0 if block else _WNOHANG)
        if pid >= 0:
            return pid, libc.status.value
        if libc.errno() != _EINTR:
            return None  # ECHILD: no child


def _session(pid):
    """The session of `pid` (from /proc), or None when it is gone.

    A process may be reaped between the open and the read (by its own parent, a
    command's shell): the read then fails with ESRCH, which is an answer too."""
    try:
        fd = posix.open(f"/proc/{pid}/stat", posix.O_RDONLY)
    except OSError:
        return None
    try:
        stat = posix.read(fd, 4096)
    except OSError:
        return None
    finally:
        posix.close(fd)
    try:
        return int(stat.rsplit(b")", 1)[1].split()[3])
    except (IndexError, ValueError):
        return None


def _seqpacket(fd):
    """A socket object for `fd`, one of the harness's ``SOCK_SEQPACKET`` Unix sockets (its
    kind given: left out, the interpreter asks the kernel three times)."""
    return _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, fd)


def _say(fd, message):
    """Send `message` on the socket descriptor `fd`, should anyone still listen."""
    try:  # noqa: SIM105
        posix.write(fd, marshal.dumps(message))
    except OSError:
        pass


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
        for name in ("mount", "umount2", "unshare", "setns", "prctl", "capset", "capget",
                     "socket", "ioctl"):
            self._functions[name] = Function((name, Library))
        # For the commands' ends, called directly (-1 and `errno` on failure): `_kill`,
        # `_wait_any`.
        self.kill = Function(("kill", Library))
        self.waitpid = Function(("waitpid", Library))
        self.status = Int()
        self.status_ref = _ctypes.byref(self.status)
        # The arguments of the bounding set's drops, one call per capability, built once
        # here rather than in each spare's adoption (a spare inherits them with the fork).
        zero = Long(0)
        self.bounding_drops = tuple((Int(_PR_CAPBSET_DROP), Long(capability), zero, zero, zero)
                                    for capability in range(self.last_capability + 1))

        class CapabilitySets(_ctypes.Array):  # capget(2)'s two of (effective, permitted,
            _type_ = Int                      # inheritable)
            _length_ = 6

        self.capability_sets = CapabilitySets()
        # (read-only copy, /proc entry) pairs, and the entries a spare binds and remounts
        # itself (`_proc_copies`: all of them until the source has made its copies).
        self.proc_copies = ()
        self.proc_uncopied = tuple(f"/proc/{name}".encode() for name in _PROC_READ_ONLY)
        self.private_mounts = False  # the source's mounts made private: `_private_mounts`
        # The new mount API, in the C library since glibc 2.36: without it, no overlays.
        for name in ("fsopen", "fsconfig", "fsmount", "move_mount"):
            try:  # noqa: SIM105
                self._functions[name] = Function((name, Library))
            except AttributeError:
                pass

    def function(self, name):
        """The C function `name` itself, for a loop of calls (the caller checks for -1 and
        reads `errno`)."""
        return self._functions[name]

    def errno(self):
        return self._ctypes.get_errno()

    def __call__(self, name, *arguments):
        function = self._functions.get(name)
        if function is None:
            raise OSError(38, f"{name}: not in this C library")  # ENOSYS
        result = function(*arguments)
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


def _adopt(libc, tmp_bytes, view, binds, workdir, overlays=()):
    """Make a spare namespace its thread's (see the module docstring): mount the thread's
    directories and skills from the view (from overlays of it, with `overlays`), drop the
    view and the source's /tmp and /dev for its own, then become the unprivileged sandbox
    user.

    Returns ``(descriptor, refused)``: a descriptor of the writable overlay's root, or
    None and why the overlays could not be mounted (None without `overlays`)."""
    root_fd, refused = None, None
    if overlays:
        try:
            root_fd = _overlays_over_view(libc, overlays)
        except OSError as error:
            refused = str(error)
    try:
        for source, target, read_only, *optional in binds:
            try:
                libc("mount", source.encode(), target.encode(), None, libc.Long(_MS_BIND), None)
            except OSError as error:
                if optional and optional[0] and error.errno == _ENOENT:
                    continue  # a skill removed, or added since the source started
                raise
            if read_only:
                _remount_read_only(libc, target)
        if not view.startswith("/tmp/"):  # else it goes with the source's /tmp, next
            libc("umount2", view.encode(), libc.Int(_MNT_DETACH))
        _own_tmp_and_dev(libc, tmp_bytes)
        posix.chdir(workdir)
        _become_sandbox_user(libc)
    except BaseException:
        if root_fd is not None:
            _close(root_fd)
        raise
    return root_fd, refused


def _overlays_over_view(libc, overlays):
    """Mount each overlay (see the module docstring) over its top layer in the view, so
    that the binds from there come from it; the view, and they with it, are detached
    later. Returns a descriptor of the writable overlay's root. On failure, none stays."""
    root_fd, mounted = None, []
    try:
        for directory, upper, work, lower in overlays:
            layers = [(b"lowerdir", lower)]
            if upper:
                layers += [(b"upperdir", upper), (b"workdir", work)]
            posix.chdir(directory)  # the layers are named relative to it: nothing of the host
            try:
                fd = _overlay_mount(libc, layers, bool(upper))
            finally:
                posix.chdir("/")
            over = f"{directory}/{upper}" if upper else directory
            try:
                libc("move_mount", fd, b"", _AT_FDCWD, over.encode(), _MOVE_MOUNT_F_EMPTY_PATH)
            except OSError:
                _close(fd)
                raise
            mounted.append(over)
            if upper and root_fd is None:
                root_fd = fd
            else:
                _close(fd)  # it stays mounted where it was moved
    except OSError:
        for over in reversed(mounted):
            try:  # noqa: SIM105
                libc("umount2", over.encode(), libc.Int(_MNT_DETACH))
            except OSError:
                pass
        if root_fd is not None:
            _close(root_fd)
        raise
    return root_fd


def _overlay_mount(libc, layers, writable):
    """A detached overlay mount of `layers` (``(key, name)`` pairs), nosuid and nodev:
    its descriptor. Its extended attributes are the ``user.`` ones (no privilege beyond
    this user namespace needed, and no warning in the kernel's log); with `writable`
    (an upper layer), ``uuid=off`` (it writes none on the upper directory's root) and
    ``volatile``: it never syncs the upper file system (an unmount would otherwise sync
    the whole file system the thread's directory is on, milliseconds each time)."""
    fs = libc("fsopen", b"overlay", _FSOPEN_CLOEXEC)
    try:
        try:
            options = ((b"source", "overlay"), *layers, *([(b"uuid", "off")] if writable else []))
            for key, value in options:
                libc("fsconfig", fs, _FSCONFIG_SET_STRING, key, value.encode(), 0)
            for flag in (b"userxattr", b"volatile") if writable else (b"userxattr",):
                libc("fsconfig", fs, _FSCONFIG_SET_FLAG, flag, None, 0)
            libc("fsconfig", fs, _FSCONFIG_CMD_CREATE, None, None, 0)
        except OSError as error:
            said = _kernel_says(fs)
            raise OSError(error.errno, f"{error.strerror}{said}") from None
        return libc("fsmount", fs, _FSMOUNT_CLOEXEC, _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV)
    finally:
        posix.close(fs)


def _kernel_says(fs):
    """What the kernel logged on a file system context `fs` (its reasons), or ``""``."""
    said = []
    for _ in range(8):
        try:
            message = posix.read(fs, 512)
        except OSError:
            break
        said.append(message.decode("utf-8", "replace").strip())
    return f" ({'; '.join(said)})" if said else ""


def _remount_read_only(libc, target):
    """Make the mount at `target` read-only, nosuid and nodev, keeping its noexec and
    atime settings (a bind remount keeps the ones the mount has; they may be locked)."""
    found = posix.statvfs(target).f_flag
    flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    for have, need in ((_ST_NOEXEC, _MS_NOEXEC), (_ST_NOATIME, _MS_NOATIME),
                       (_ST_NODIRATIME, _MS_NODIRATIME), (_ST_RELATIME, _MS_RELATIME)):
        if found & have:
            flags |= need
    libc("mount", None, target.encode(), None, libc.Long(flags), None)


def _become_sandbox_user(libc):
    """Enter a cgroup namespace and a user namespace of this process's own, as the
    sandbox user with every capability dropped, bounding set included."""
    libc("unshare", libc.Int(_CLONE_NEWCGROUP))
    libc("unshare", libc.Int(_CLONE_NEWUSER))
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{_SANDBOX_ID} 0 1")
    _write("/proc/self/gid_map", f"{_SANDBOX_ID} 0 1")
    # The new user namespace gave every capability back: drop them all, for good. Each
    # drop that fails raises, so the bounding set is then empty.
    prctl = libc.function("prctl")
    for arguments in libc.bounding_drops:
        if prctl(*arguments) == -1:
            errno = libc.errno()
            raise OSError(errno, f"prctl: {posix.strerror(errno)}")
    header = _CAPABILITY_VERSION_3.to_bytes(4, sys.byteorder) + bytes(4)
    libc("capset", header, bytes(24))  # effective, permitted, inheritable: none
    # Checked with capget(2), not /proc/self/status (the kernel writes the whole file, and
    # reading it cost a spare about 0.1 ms). The ambient set needs no call and no look: a new user
    # namespace starts it empty, and the kernel keeps it within the permitted and
    # inheritable sets, both empty now.
    sets = libc.capability_sets
    libc("capget", header, sets)
    if posix.getuid() != _SANDBOX_ID or any(sets):
        raise OSError(1, "the capabilities or the user did not change")


def _own_tmp_and_dev(libc, tmp_bytes):
    """Replace the source's ``/tmp`` (detached with every mount below it: the view, the
    skill roots, the copies of /proc's entries), ``/dev/shm`` and
    ``/dev/pts``, which its other spares see too, with this namespace's own (the rest of
    the source's ``/dev`` is read-only: device nodes and links)."""
    long, nothing = libc.Long, _MS_NOSUID | _MS_NODEV
    libc("umount2", b"/tmp", libc.Int(_MNT_DETACH))
    size = f"mode=0755,size={int(tmp_bytes)}".encode()
    libc("mount", b"tmpfs", b"/tmp", b"tmpfs", long(nothing), size)
    libc("mount", b"tmpfs", b"/dev/shm", b"tmpfs", long(nothing), size)
    libc("mount", b"devpts", b"/dev/pts", b"devpts", long(_MS_NOSUID | _MS_NOEXEC),
         b"newinstance,ptmxmode=0666,mode=620")


def _own_proc(libc):
    """Make every mount private to this mount namespace (unless the source's were made
    private before the fork: `_private_mounts`), and mount a ``/proc`` of this PID
    namespace over the source's (its entries that change the kernel read-only).

    The read-only entries are bound from the source's copies (`_proc_copies`), which
    it checked are read-only: one call each instead of a bind and a remount (a bind
    mount keeps the read-only flag of the mount it copies). An entry the source had no
    copy of is bound and remounted as bubblewrap does; one the kernel lacks is left
    out."""
    long = libc.Long
    if not libc.private_mounts:
        libc("mount", None, b"/", None, long(_MS_REC | _MS_PRIVATE), None)
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    libc("mount", b"proc", b"/proc", b"proc", long(flags), None)
    for copy, path in libc.proc_copies:
        libc("mount", copy, path, None, long(_MS_BIND | _MS_REC), None)
    for path in libc.proc_uncopied:
        try:
            libc("mount", path, path, None, long(_MS_BIND | _MS_REC), None)
        except OSError:
            continue  # not there
        _remount_read_only_proc(libc, path, flags)


def _remount_read_only_proc(libc, path, flags):
    libc("mount", None, path, None, libc.Long(_MS_BIND | _MS_REMOUNT | _MS_RDONLY | flags), None)


def _private_mounts(libc):
    """In a source: make every mount of its namespace private, once; sets
    ``libc.private_mounts``. A spare's mount namespace starts as a copy of the source's,
    and the copy of a private mount is private: no mount a spare makes or removes then
    reaches the source, another spare or the host, and no spare needs to walk its whole
    mount tree to say so again (`_own_proc`). Mounts the source makes later (`_proc_copies`)
    sit below private ones, so they are private too."""
    try:
        libc("mount", None, b"/", None, libc.Long(_MS_REC | _MS_PRIVATE), None)
    except OSError:
        return  # each spare makes its own copy private
    libc.private_mounts = True


def _proc_copies(libc):
    """In a source: read-only copies of the /proc entries its spares make read-only, in
    its ``/tmp`` (`_PROC_COPIES`), which they bind from (`_own_proc`); sets
    ``libc.proc_copies`` and ``libc.proc_uncopied``. Those entries show the kernel's
    settings, not this PID namespace's processes: the source's serve a spare's /proc as
    well as its own would. Each copy is checked to be read-only here, once, so that no
    spare checks its bind of it. An entry that cannot be copied is left to the spares
    to bind and remount; one this kernel does not have (``sysrq-trigger`` without
    ``CONFIG_MAGIC_SYSRQ``) to none: the failed bind cost each spare about 0.1 ms (the
    exception's page faults). Every /proc has the same such entries: they show the
    kernel, not a PID namespace."""
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    found, uncopied = [], []
    try:
        posix.mkdir(_PROC_COPIES, 0o700)
    except OSError:
        return
    for name in _PROC_READ_ONLY:
        path, copy = f"/proc/{name}", f"{_PROC_COPIES}/{name}"
        try:
            mode = posix.stat(path).st_mode
        except FileNotFoundError:
            continue  # this kernel has none
        except OSError:
            uncopied.append(path.encode())
            continue
        try:
            if mode & 0o170000 == 0o040000:  # a directory
                posix.mkdir(copy, 0o700)
            else:
                posix.close(posix.open(copy, posix.O_WRONLY | posix.O_CREAT, 0o600))
            libc("mount", path.encode(), copy.encode(), None, libc.Long(_MS_BIND | _MS_REC),
                 None)
        except OSError:
            uncopied.append(path.encode())
            continue
        try:
            _remount_read_only_proc(libc, copy.encode(), flags)
            if not posix.statvfs(copy).f_flag & _MS_RDONLY:  # ST_RDONLY is MS_RDONLY
                raise OSError(30, "the copy is not read-only")  # EROFS
        except OSError:
            uncopied.append(path.encode())
            try:  # noqa: SIM105 - a writable copy must not stay mounted
                libc("umount2", copy.encode(), libc.Int(_MNT_DETACH))
            except OSError:
                pass
            continue
        found.append((copy.encode(), path.encode()))
    libc.proc_copies = tuple(found)
    libc.proc_uncopied = tuple(uncopied)


def _loopback_up(libc):
    """Bring the new network namespace's loopback up, as bubblewrap does (one request:
    `_LOOPBACK_UP`), through a socket of this namespace made and closed by the C library
    (a socket object and the ``fcntl`` module cost a spare just forked about 20 page
    faults)."""
    fd = libc("socket", libc.Int(_AF_INET), libc.Int(_SOCK_DGRAM | _SOCK_CLOEXEC), libc.Int(0))
    try:
        libc("ioctl", libc.Int(fd), libc.Long(_SIOCSIFFLAGS), _LOOPBACK_UP)
    finally:
        posix.close(fd)


def _start_spare(init, control_fd, network, tmp_bytes):
    """In a new child of the source, PID 1 of its new PID namespace: unshare the mount, IPC
    and network namespaces, set the spare up and serve `control_fd` with `init`, this
    process's copy of its source's loop (`Init.become_spare`). Never returns."""
    libc = init.libc
    try:
        flags = _CLONE_NEWNS | _CLONE_NEWIPC
        libc("unshare", libc.Int(flags if network else flags | _CLONE_NEWNET))
        posix.setsid()
        posix.closerange(3, control_fd)
        posix.closerange(control_fd + 1, 1 << 16)
        _own_proc(libc)
        if not network:
            _loopback_up(libc)
        init.become_spare(control_fd, tmp_bytes)
    except BaseException as error:  # said on the spare's socket, then exit
        _say(control_fd, ("failed", str(error)))
        posix._exit(1)
    init.control.send(b"ready")
    init.serve()
    posix._exit(0)


class Init:
    """The loop: requests on the control socket, the commands' channels, their exits."""

    def __init__(self, control_fd, source=False):
        self.spare = False  # no command until adopted
        self.source = source  # no command at all: it spawns spares
        self.libc = None  # a source's and its spares', ready for their adoption
        self.tmp_bytes = 0  # a spare's /tmp, once adopted
        self.pid_namespace = -1  # a source's own PID namespace, to return to after a fork
        # Every request is read into this buffer: a new one each time costs a 1 MiB
        # mapping and its removal (about 15 us of the init's CPU per request). A spare
        # reads into its source's (its copy, made by the fork): filling a new one would
        # cost it a page fault per 4 KiB.
        self.buffer = bytearray(_MAX_REQUEST)
        self.running = {}  # pid of a command's shell -> its channel (None once let go)
        self.by_fd = {}  # channel descriptor -> pid
        _signal.signal(_signal.SIGCHLD, lambda signum, frame: None)
        self._listen(control_fd)

    def _listen(self, control_fd):
        """Serve `control_fd`, woken by SIGCHLD through a pipe of this process's own."""
        self.control = _seqpacket(control_fd)
        self.wake_read, wake_write = posix.pipe()
        posix.set_blocking(wake_write, False)
        _signal.set_wakeup_fd(wake_write)
        self.poller = select.poll()
        self.poller.register(self.control.fileno(), select.POLLIN)
        self.poller.register(self.wake_read, select.POLLIN)

    def become_spare(self, control_fd, tmp_bytes):
        """In a spare just forked, its source's descriptors closed: make this copy of the
        source's loop the spare's, serving `control_fd` (its libc, buffer and SIGCHLD
        handler serve as they are: a new loop would cost the spare some 30 page faults
        of the objects it makes)."""
        self.source, self.spare, self.tmp_bytes = False, True, tmp_bytes
        self._listen(control_fd)

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
            size, ancillary, _flags, _address = self.control.recvmsg_into(
                [self.buffer], _socket.CMSG_SPACE(4 * _MAX_FDS), _socket.MSG_CMSG_CLOEXEC)
        except InterruptedError:
            return True
        fds = _descriptors(ancillary)
        if not size:
            for fd in fds:
                _close(fd)
            return False
        message = marshal.loads(memoryview(self.buffer)[:size])
        if self.source:
            if message[0] != "spawn" or len(fds) != 1 or self.libc is None:
                for fd in fds:
                    _close(fd)
                return message[0] == "spawn"  # a source takes nothing else
            self.spawn(fds[0], *message[1:])
        elif self.spare:
            for fd in fds:
                _close(fd)
            if message[0] != "adopt":
                return False  # a spare takes nothing before it is adopted
            try:
                root_fd, refused = _adopt(self.libc, self.tmp_bytes, *message[1:])
            except (OSError, TypeError, ValueError, AttributeError) as error:
                _send(self.control, ("failed", str(error)))
                return False
            _undumpable(self.libc)  # again: changing credentials made it dumpable
            self.spare = False
            if root_fd is None:
                _send(self.control, ("adopted",) if refused is None else ("adopted", refused))
            else:  # the overlay's root, for the harness; none of this namespace keeps it
                try:  # noqa: SIM105
                    self.control.sendmsg([marshal.dumps(("adopted",))], [(
                        _socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                        root_fd.to_bytes(4, sys.byteorder))])
                except OSError:
                    pass
                _close(root_fd)
        elif message[0] == "run" and len(fds) == 4:
            self.run(message[1], message[2], fds)
        elif message[0] == "end" and len(fds) == 1:
            reply = _seqpacket(fds[0])
            self.sweep(set(self.running))
            _send(reply, ("ended",))
            reply.close()
        else:
            for fd in fds:
                _close(fd)
        return True

    def spawn(self, control_fd, network, tmp_bytes):
        """Fork a spare namespace that serves `control_fd` (see `_start_spare`): the source
        unshares a PID namespace for its next child, forks it and returns to its own."""
        libc = self.libc
        try:
            libc("unshare", libc.Int(_CLONE_NEWPID))
            pid = posix.fork()
        except OSError as error:
            pid, failed = -1, error
        if pid == 0:
            self.control.detach()  # the source's: never closed from here
            _start_spare(self, control_fd, bool(network), tmp_bytes)
        try:
            libc("setns", self.pid_namespace, libc.Int(_CLONE_NEWPID))
        except OSError:
            posix._exit(1)  # its next spare would join this one's PID namespace: end instead
        if pid < 0:
            _say(control_fd, ("failed", str(failed)))
        _close(control_fd)

    def run(self, argv, env, fds):
        channel_fd, stdin, stdout, stderr = fds
        channel = _seqpacket(channel_fd)
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
        """Anything from a command's channel, or its end: kill the command's group.

        The event may be stale: one poll reports several, and handling an earlier one
        may have finished the command (its channel closed) and, for a later request,
        given its descriptor number to a new command's channel, which has said nothing.
        """
        pid = self.by_fd.get(fd)
        if pid is None:
            return  # its command finished earlier in this round
        try:
            self.running[pid].recv(1, _PEEK)
        except BlockingIOError:
            return  # a new command's channel, on a reused descriptor: nothing for it
        except OSError:
            pass  # the channel failed: as good as ended
        del self.by_fd[fd]
        self.poller.unregister(fd)
        _kill(pid, group=True, libc=self.libc)
        # The exit is still reported, should the harness still listen.

    def reap(self):
        while True:
            exited = _wait_any(self.libc, block=False)
            if exited is None or exited[0] == 0:
                return
            pid, status = exited
            if pid in self.running:
                self.finished(pid, status)

    def finished(self, pid, status, sweep=True):
        """A command's shell exited: stop what it left, then report its exit code."""
        channel = self.running.pop(pid)
        if sweep:
            _kill(pid, group=True, libc=self.libc)
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
                    _kill(pid, libc=self.libc)
                    killed = True
            if not killed:
                return

    def kill_all(self):
        """Kill every other process of the namespace and reap them all.

        A process being killed cannot finish a fork, so one ``kill(-1)`` reaches
        every process there is; waiting until no child is left proves them dead.
        Only as its namespace's PID 1: anywhere else ``kill(-1)`` would reach every
        process the user may signal outside it (the host's, as root).

        An init with no child, running or exited, is alone in its namespace: every
        other process there descends from it (an orphan goes to the init, or to a
        subreaper that itself descends from it, before its parent can be reaped), so
        no ``kill(-1)`` is sent then. The kernel answers that signal by walking every
        process of the machine, not only the namespace's: after most commands (a shell
        that leaves nothing behind) there is nobody else to find.
        """
        if posix.getpid() != 1:
            return
        exited = _wait_any(self.libc, block=False)
        if exited is None:
            return  # no child: nobody else
        if exited[0] != 0 and exited[0] in self.running:
            self.finished(exited[0], exited[1], sweep=False)
        if not _kill(-1, libc=self.libc):
            return  # nobody else
        while True:
            try:
                exited = _wait_any(self.libc, block=True)
            except InterruptedError:
                continue
            if exited is None:
                return
            pid, status = exited
            if pid in self.running:
                self.finished(pid, status, sweep=False)


def _undumpable(libc=None):
    """Make this process non-dumpable: the commands run as the same user, and could
    otherwise take it over (ptrace, /proc/1/mem) and keep processes from being killed.

    Through `libc` (a spare's, its calls resolved ahead), else `_ctypes` alone (the
    `ctypes` package costs milliseconds of imports); without it the init stays
    dumpable, and the harness still ends the namespace from outside.
    """
    if libc is not None:
        zero = libc.Long(0)
        try:  # noqa: SIM105 - contextlib costs the init milliseconds of imports
            libc("prctl", libc.Int(_PR_SET_DUMPABLE), zero, zero, zero, zero)
        except OSError:
            pass
        return
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

    ``spare``: be a source of spare namespaces, which take no command until a thread
    adopts them."""
    _undumpable()
    posix.closerange(3, control_fd)
    posix.closerange(control_fd + 1, 1 << 16)
    posix.set_inheritable(control_fd, False)
    init = Init(control_fd, source=spare)
    if spare:  # nobody waits for a source: do now what would hold its spares up
        try:
            init.libc = _Libc()
            _private_mounts(init.libc)
            _proc_copies(init.libc)
            init.pid_namespace = posix.open("/proc/self/ns/pid", posix.O_RDONLY)
        except (ImportError, OSError, AttributeError):
            init.libc = None  # it spawns nothing, and namespaces are started whole
        _warm_up()
    init.control.send(b"ready")
    init.serve()
    posix._exit(0)
