"""A sandbox provider that runs a thread's commands in its own bubblewrap (``bwrap``) namespace.

The thread's files and tools are the same as under the local provider (both
are `HostSandbox`es: the files live in the thread's host ``user-data``
directory, and the file tools work on them there; while the thread's namespace
lives, through the overlay it mounts them from, see below). What changes is the shell
command: it runs in the thread's user, mount, PID, IPC, cgroup and network
namespaces (and a UTS namespace whose host name, ``sandbox``, no command can
change), which hold only

* the thread's ``workspace`` and ``outputs`` at ``/mnt/user-data/...``
  (read-write) and its ``uploads`` (read-only), so the virtual paths are real
  paths and the model's commands are the same as under the local provider;
* the installed skills, read-only, at ``/mnt/skills/<category>/<name>``;
* a read-only system: ``/usr``, and ``/bin``, ``/sbin``, ``/lib*`` as the host
  has them (symlinks or directories); an ``/etc`` with a ``sandbox`` user and
  group only (written into the sandbox's own root from memory), the dynamic
  linker's cache and the alternatives, plus name resolution and certificates
  when the network is allowed;
* ``/proc`` of its own PID namespace, a minimal ``/dev``, and a ``/tmp`` of its
  own in memory (at most ``file_size_mb``), kept between the thread's commands
  for as long as the namespace lives.

An adopted spare mounts the thread's directories from an overlay of its
``user-data`` and the skills from read-only overlays of their roots, so that
no mount inside names a host path (a bind mount's root, in mountinfo, is its
host path); the file tools then reach the thread's files through a descriptor
of that overlay (`antler.plugin_api.confined.register_mount`), since an
overlay does not see changes made beside it. Where no overlay can be mounted,
they are bind mounts (said once in the log), as in a namespace started whole.

The root is read-only; no other host path exists inside. The network is
unreachable (not even the host's loopback) unless ``network=True``. Resource
limits (address space, processes, CPU seconds, file size) are hard rlimits set
on each command before it starts; where a ``pids`` cgroup can be made
(`antler.runtime.sandbox.cgroup`), the whole namespace is held to the process
limit too, which holds when the harness runs as root (``RLIMIT_NPROC`` does
not bind root's processes).

One namespace per thread (`antler.runtime.sandbox.namespace`): a spare forked
by a source namespace started ahead (`antler.runtime.sandbox.spares`), adopted
when the thread's sandbox is acquired (or by its first command; started whole,
with the thread's mounts as bubblewrap's options, where an init cannot adopt), its
PID 1 an init that starts each command in a
session of its own (no terminal to inject keys into), and answers the time
limit and interrupts by killing the command's process group. When a command's
shell exits, whatever it left running (``setsid`` or not) is killed; at the end
of a run (`end_run`), everything but the init and the thread's still-running
commands; after ``idle_seconds`` without a command, or when the sandbox is
closed, the namespace itself ends and the kernel kills whatever is in it. It
also ends with the harness (``--die-with-parent``, the init's control socket,
and the reaper's watchdog). Two threads never share one.

The probe (`bwrap_status`, in `antler.runtime.sandbox.probe`) runs once per process and
is cached.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antler.plugin_api import confined
from antler.plugin_api.paths import SKILLS_VIRTUAL_ROOT, VIRTUAL_ROOT, PathLayout, ThreadPaths
from antler.plugin_api.sandbox import SandboxError

from . import cgroup, reaper, workers
from .deadlines import Deadline, call_later
from .host import HostSandbox, HostSandboxProvider, RunningCommand
from .namespace import Namespace, NamespaceCommand, NamespaceGoneError, memory_file
from .probe import BwrapStatus, bwrap_status
from .spares import SparePool
from .threaddir import record_namespace, remove_tree

logger = logging.getLogger(__name__)

__all__ = ["BwrapSandbox", "BwrapSandboxProvider", "BwrapStatus", "BwrapUnavailableError",
           "bwrap_status"]

SANDBOX_USER = "sandbox"
SANDBOX_UID = 1000
WORKSPACE = f"{VIRTUAL_ROOT}/workspace"
DEFAULT_IDLE_SECONDS = 120.0
_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
_LIMITS_FILE = "/etc/antler-limits.sh"
# Host entries every sandbox gets in its /etc: the dynamic linker's cache and
# the Debian alternatives (`awk` and friends are symlinks into them).
_ETC_ALWAYS = ("ld.so.cache", "alternatives", "localtime")
# Only when the network is allowed: name resolution and TLS certificates.
_ETC_NETWORK = ("resolv.conf", "hosts", "nsswitch.conf", "host.conf", "gai.conf", "ssl",
                "ca-certificates", "ca-certificates.conf")
_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Where the harness's own Python is mounted when the system has none under /usr.
_OWN_PYTHON_MOUNT = "/opt/antler-python"
# Where a spare namespace sees the base directory's `users` tree until a thread adopts it.
_SPARE_VIEW = "/tmp/.antler-view"
# Where it sees each skill root (by its index), and an empty directory (an overlay's second
# layer: a read-only overlay needs two).
_SPARE_SKILLS = "/tmp/.antler-skills"
_SPARE_EMPTY = "/tmp/.antler-empty"
_THREAD_DIRS = (("workspace", False), ("uploads", True), ("outputs", False))
# Beside a thread's `user-data` (never below it): its overlay's work directory, named
# relative to the thread's directory. Its empty lower layer is the spare's own
# `_SPARE_EMPTY` (any empty directory serves, and none is made per thread: making a
# directory costs tens of microseconds of CPU on a journalled file system).
_OVERLAY_WORK = ".overlay"
# What the overlay makes in its work directory, removed when it is unmounted: a new
# overlay would take milliseconds to remove it, or refuse it (`nsinit`: volatile). It is
# also where an earlier layout kept its work directory (``.overlay/work``), removed alike.
_OVERLAY_OWN_WORK = "work"


class BwrapUnavailableError(SandboxError, RuntimeError):
    """bubblewrap is not installed here, or cannot create the namespaces it needs."""


def _system_arguments() -> list[str]:
    """The read-only system every sandbox sees, as the host lays it out."""
    arguments = ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_DIRS:
        host = Path("/", name)
        if host.is_symlink():
            arguments += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            arguments += ["--ro-bind", str(host), f"/{name}"]
    return arguments


def _etc_arguments(network: bool) -> list[str]:
    """The host's /etc entries a sandbox needs, each at its own path (symlinks into /usr
    stay symlinks); ``passwd`` and ``group`` are written from memory at start."""
    arguments = ["--dir", "/etc"]
    for name in (*_ETC_ALWAYS, *(_ETC_NETWORK if network else ())):
        host = Path("/etc", name)
        with contextlib.suppress(OSError):
            if host.is_symlink() and host.resolve().is_relative_to("/usr"):
                arguments += ["--symlink", os.readlink(host), str(host)]
            elif host.exists():
                arguments += ["--ro-bind", str(host), str(host)]
    return arguments


def _etc_files(limits: dict[str, int]) -> dict[str, bytes]:
    """The files of the sandbox's /etc that are made up: one user and one group, and the
    script that sets the limits (`ulimit` flags and values)."""
    # Hard and soft limits at once; a command cannot raise a hard limit again.
    script = "".join(f"ulimit -H -S {flag} {value} 2>/dev/null\n"
                     for flag, value in limits.items())
    return {
        "/etc/passwd": f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:{SANDBOX_USER}:"
                       f"{WORKSPACE}:/bin/sh\n".encode(),
        "/etc/group": f"{SANDBOX_USER}:x:{SANDBOX_UID}:\n".encode(),
        _LIMITS_FILE: script.encode(),
    }


def _sandbox_python() -> tuple[str, list[str]]:
    """The Python that runs the namespace's init, and the mounts it needs.

    The system's own under ``/usr`` (mounted anyway); else this process's
    installation, mounted read-only at a neutral path.
    """
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        with contextlib.suppress(OSError):
            if Path(candidate).resolve().is_relative_to("/usr") and os.access(candidate, os.X_OK):
                return candidate, []
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return (f"{_OWN_PYTHON_MOUNT}/bin/{version}",
            ["--ro-bind", str(Path(sys.base_prefix).resolve()), _OWN_PYTHON_MOUNT])


class BwrapSandbox(HostSandbox):
    """One thread's sandbox whose commands run in its bubblewrap namespace (module docstring)."""

    # A command's leftovers die with it, in the namespace (the init sees to it), before
    # its exit is reported: then nothing can write its output any more.
    leaves_strays = False
    output_ends_with_exit = True

    def __init__(self, sandbox_id: str, thread_paths: ThreadPaths, *, default_timeout: float,
                 max_output_bytes: int, shell: str, settings: _Settings) -> None:
        super().__init__(sandbox_id, thread_paths, default_timeout=default_timeout,
                         max_output_bytes=max_output_bytes, shell=shell)
        self._settings = settings
        self._namespace: Namespace | None = None
        self._workspace_identity: tuple[int, int] | None = None
        self._idle_timer: Deadline | None = None
        self._preparing = False
        self._ending = False  # its namespace is being closed after its idle time
        self._shell_path: str | None = None

    def _thread_arguments(self) -> list[str]:
        """This thread's mounts: its three directories, its /tmp and the skills."""
        paths = self.thread_paths
        return [
            "--bind", str(paths.workspace), WORKSPACE,
            "--ro-bind", str(paths.uploads), f"{VIRTUAL_ROOT}/uploads",
            "--bind", str(paths.outputs), f"{VIRTUAL_ROOT}/outputs",
            "--size", str(self._settings.tmp_bytes), "--tmpfs", "/tmp",
            *_skill_arguments(paths.skill_roots),
        ]

    @functools.cached_property
    def _spare_key(self) -> tuple[Path, tuple[Path, ...]] | None:
        """Which spares fit this thread (its base directory's ``users`` tree and its skill
        roots), or None when its directories are not laid out below that tree."""
        paths = self.thread_paths
        users = paths.base / "users"
        return (users, paths.skill_roots) if paths.user_data.is_relative_to(users) else None

    # -- the namespace ------------------------------------------------------------------

    def _current_namespace(self) -> Namespace:
        """The thread's namespace, started (again) when there is none or its mounts went stale.

        Called with the sandbox's lock held.
        """
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        namespace = self._namespace
        if namespace is not None and namespace.alive and self._mounts_current():
            return namespace
        if namespace is not None:
            namespace.close()
        self._namespace = None
        self.thread_paths.ensure_directories()
        self._workspace_identity = _identity(self.thread_paths.workspace)
        settings = self._settings
        key = self._spare_key if settings.spares is not None else None
        if settings.spares is not None and key is not None:
            namespace = self._adopted_spare(settings.spares, key)
            if namespace is not None:
                self._namespace = namespace
                record_namespace(os.path.dirname(str(self.thread_paths.user_data)), namespace)
                return namespace
        files = _etc_files(settings.limits)
        fds = [memory_file(name, data) for name, data in files.items()]
        options = [*settings.fixed, *(option for fd, name in zip(fds, files, strict=True)
                                      for option in ("--file", str(fd), name)),
                   *self._thread_arguments(),
                   # Last: the root (tmpfs) itself becomes read-only; the mounts stay as set.
                   "--remount-ro", "/", "--chdir", WORKSPACE]
        namespace = Namespace(settings.bwrap, options, settings.python,
                              self._environment(_PATH, WORKSPACE), fds=fds)
        namespace.start()
        _hold_in_cgroup(namespace, settings.cgroups)
        self._namespace = namespace
        # Deleting the thread ends its namespace first (`threaddir`), from any process.
        record_namespace(os.path.dirname(str(self.thread_paths.user_data)), namespace)
        return namespace

    def _adopted_spare(self, spares: SparePool, key: tuple[Path, tuple[Path, ...]]
                       ) -> Namespace | None:
        """A spare namespace made this thread's: one from the pool's source for `key`
        (started now when there is none); None when spares do not work here (the caller
        starts the namespace with the thread's mounts, as bubblewrap's options)."""
        # Strings, not `Path`s: their joins and `relative_to` cost each new thread some
        # 30 us of CPU. `_spare_key` checked that `user_data` is below the `users` tree.
        user_data = str(self.thread_paths.user_data)
        relative = user_data[len(str(key[0])) + 1:]
        thread_binds = [(f"{_SPARE_VIEW}/{relative}/{name}", f"{VIRTUAL_ROOT}/{name}",
                         read_only, False) for name, read_only in _THREAD_DIRS]
        overlays = self._settings.overlays
        thread = self._overlay_layers(relative) if overlays.enabled else None
        # A running source may be stale (its view of a `users` folder removed since): if
        # its spare cannot adopt, a new source decides whether spares work here.
        fresh = not spares.ready(key)
        while True:
            try:
                namespace = spares.take(key)
                # The skills as the source saw them when it started (its mount points).
                skill_binds, skill_layers = self._settings.start_spare.skill_mounts(key[1])
                layers = [] if thread is None else [thread, *skill_layers]
                root_fd, refused = namespace.adopt(_SPARE_VIEW, [*thread_binds, *skill_binds],
                                                   WORKSPACE, layers)
            except SandboxError as error:  # `adopt` closed the spare
                if not fresh:
                    spares.discard(key)
                    fresh = True
                    continue
                # Not the thread's fault: its directories exist (made just before); the
                # system does not let the init mount. Start namespaces whole.
                logger.warning("sandbox: namespaces are started whole from now on (%s)", error)
                spares.close()
                self._settings.start_spare.disable()
                return None
            if refused is not None:
                overlays.refuse(refused)
            if root_fd is not None:
                # The thread's files are reached through the overlay while it is mounted.
                confined.register_mount(user_data, root_fd)
                namespace.on_close(functools.partial(
                    _unmount_overlay, user_data, root_fd,
                    f"{os.path.dirname(user_data)}/{_OVERLAY_WORK}/{_OVERLAY_OWN_WORK}"))
            return namespace

    def _overlay_layers(self, relative: str) -> tuple[str, str, str, str] | None:
        """The thread's overlay for `Namespace.adopt`: its directory in the spare's view
        and, relative to it, ``user-data`` (the upper layer) and the work directory (made
        here), then the empty lower layer (the spare's own); None when the work directory
        cannot be made. `relative`: ``user-data`` relative to the ``users`` tree."""
        thread = os.path.dirname(str(self.thread_paths.user_data))
        try:
            try:
                os.mkdir(f"{thread}/{_OVERLAY_WORK}", 0o700)
            except FileExistsError:
                # Left by an overlay not unmounted by this process (it died): the overlay
                # would refuse it (`volatile`). Usually not there: one look. (A folder
                # just made holds nothing: no look.)
                remove_tree(Path(thread, _OVERLAY_WORK, _OVERLAY_OWN_WORK))
        except OSError as error:
            self._settings.overlays.refuse(f"{error.strerror}: its work directory")
            return None
        thread_relative, _, user_data_name = relative.rpartition("/")
        return (f"{_SPARE_VIEW}/{thread_relative}", user_data_name, _OVERLAY_WORK,
                _SPARE_EMPTY)

    def _mounts_current(self) -> bool:
        """Whether the workspace mounted is still the thread's (directories removed between
        turns come back as new ones, which a running namespace would not see)."""
        return _identity(self.thread_paths.workspace) == self._workspace_identity

    def _popen(self, command: str) -> RunningCommand:
        if self._shell_path is None:
            found = _find_shell(self._shell)
            if found is None:
                raise SandboxError(f"The sandbox needs the {self._shell!r} shell, which is not "
                                   "in the system's /usr; install it or configure another "
                                   "shell for the provider.")
            self._shell_path = found
        if os.path.basename(self._shell_path) == "bash":
            # bash reads BASH_ENV before the command: the limits cost no extra exec.
            argv = [self._shell_path, "-c", command]
        else:
            argv = ["/bin/sh", "-c", f'. {_LIMITS_FILE}; exec "$0" -c "$1"', self._shell_path,
                    command]
        env = self._environment(_PATH, WORKSPACE)
        env["BASH_ENV"] = _LIMITS_FILE
        # Not needed inside (the namespace ends with its init, which carries one), and it
        # names the harness's pid.
        del env[reaper.TOKEN_VARIABLE]
        try:
            return self._current_namespace().run(argv, env)
        except NamespaceGoneError:
            # The init died (killed from the host, say): start a new namespace, once.
            if self._namespace is not None:
                self._namespace.close()
                self._namespace = None
            return self._current_namespace().run(argv, env)

    def _kill(self, process: RunningCommand) -> None:
        if isinstance(process, NamespaceCommand):
            process.kill_group()

    def _exit_descriptor(self, process: RunningCommand) -> int | None:
        return process.exit_descriptor() if isinstance(process, NamespaceCommand) else None

    def prepare(self) -> None:
        """Start the thread's namespace now, in the background, unless it runs already.

        The provider calls it when the sandbox is acquired: with ``sandbox: {lazy:
        false}`` that is when the run starts, so the namespace starts while the model
        thinks, and the first command finds it running. Unused, it ends after
        ``idle_seconds`` like any other; a start that fails is tried again (and its error
        raised) by the next command.
        """
        with self._lock:
            namespace = self._namespace
            if (self._closed or self._dropped or self._preparing
                    or (namespace is not None and namespace.alive)):
                return
            self._preparing = True
        self._fill_spares()  # here, not in the background (`Namespace.launch` says why)
        workers.submit(self._prepare)

    def _fill_spares(self) -> None:
        """Start a spare this thread (or the next new one) can adopt, unless there is one."""
        spares, key = self._settings.spares, self._spare_key
        if spares is not None and key is not None:
            spares.fill(key)

    def _prepare(self) -> None:
        try:
            with self._lock:
                if self._closed:
                    return
                namespace = self._current_namespace()
                idle = not self._running
            if idle:
                self._close_when_idle(namespace)
        except (SandboxError, OSError) as error:
            logger.debug("sandbox %s: starting the namespace ahead failed: %s", self._id, error)
        finally:
            self._preparing = False

    # -- lifecycle ----------------------------------------------------------------------

    def end_run(self) -> None:
        """Kill every process in the namespace but its init and the thread's running
        commands; the namespace itself ends after ``idle_seconds`` without a command."""
        super().end_run()
        self._fill_spares()  # for the next new thread (or this one after its idle time)
        with self._lock:
            namespace = self._namespace
            idle = not self._running
        if namespace is None:
            return
        if idle:
            # Nothing to kill: when a command's shell exits the init kills everything
            # outside the other running commands' sessions before it reports the exit, so
            # only a command still running can have left something since.
            self._close_when_idle(namespace)
        else:
            namespace.end()

    def _close_when_idle(self, namespace: Namespace) -> None:
        with self._lock:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._idle_timer = call_later(self._settings.idle_seconds, self._idle_close,
                                          namespace)

    def _idle_close(self, namespace: Namespace) -> None:
        with self._lock:
            if self._namespace is not namespace or self._running:
                return
            self._namespace = None
            self._idle_timer = None
            self._ending = True
        try:
            namespace.close()
        finally:
            with self._lock:
                self._ending = False
        self._went_idle()

    def _holds_nothing(self) -> bool:
        # Its namespace (starting, running or ending) is the thread's until it has ended.
        return self._namespace is None and not self._preparing and not self._ending

    def close(self) -> None:
        super().close()
        with self._lock:
            namespace, self._namespace = self._namespace, None
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
        if namespace is not None:
            namespace.close()


_shells: dict[str, str] = {}


def _find_shell(shell: str) -> str | None:
    """The shell's path in the sandbox's system (its ``/usr``, as the host has it), looked
    up once per process once found: a thread's first command would otherwise pay for the
    search."""
    found = _shells.get(shell)
    if found is None:
        found = shutil.which(shell, path=_PATH)
        if found is not None:
            _shells[shell] = found
    return found


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _skill_arguments(skill_roots: tuple[Path, ...]) -> list[str]:
    """The read-only mounts of the skills under ``/mnt/skills``."""
    arguments = ["--dir", SKILLS_VIRTUAL_ROOT]
    # The first root holding a skill wins (as for the file tools): mount the
    # later roots first, so the earlier ones land on top.
    for root in reversed(skill_roots):
        for skill in _skill_folders(root):
            relative = skill.relative_to(root).as_posix()
            arguments += ["--ro-bind", str(skill), f"{SKILLS_VIRTUAL_ROOT}/{relative}"]
    return arguments


_SkillMounts = tuple[list[tuple[str, str, bool, bool]], list[tuple[str, str, str, str]]]


def _spare_skill_mounts(skill_roots: tuple[Path, ...]) -> _SkillMounts:
    """What an adopted spare mounts of the skills (`_spare_skill_arguments` made the
    source's view of them): the skill folders read-only (optional: one removed, or added
    since the source started, is left out), and a read-only overlay per root they come
    from (``.`` and an empty directory: names that say nothing of the host)."""
    binds: list[tuple[str, str, bool, bool]] = []
    overlays: list[tuple[str, str, str, str]] = []
    # The first root holding a skill wins (as for the file tools): mount the later roots
    # first, so the earlier ones land on top.
    for index in reversed(range(len(skill_roots))):
        root = skill_roots[index]
        folders = _skill_folders(root)
        if folders:
            overlays.append((f"{_SPARE_SKILLS}/{index}", "", "", f".:{_SPARE_EMPTY}"))
        for skill in folders:
            relative = skill.relative_to(root).as_posix()
            binds.append((f"{_SPARE_SKILLS}/{index}/{relative}",
                          f"{SKILLS_VIRTUAL_ROOT}/{relative}", True, True))
    return binds, overlays


def _spare_skill_arguments(skill_roots: tuple[Path, ...], mounts: _SkillMounts) -> list[str]:
    """A source's skills: each root read-only in its ``/tmp`` (its spares mount the skill
    folders from there, then detach it), and an empty mount point per skill folder
    (`mounts`: what its spares mount)."""
    arguments = ["--dir", SKILLS_VIRTUAL_ROOT, "--dir", _SPARE_EMPTY]
    for index, root in enumerate(skill_roots):
        arguments += ["--ro-bind-try", str(root), f"{_SPARE_SKILLS}/{index}"]
    for target in sorted({target for _, target, _, _ in mounts[0]}):
        arguments += ["--dir", target]
    return arguments


def _skill_folders(root: Path) -> list[Path]:
    """``<root>/<category>/<name>`` folders, the unit the skills are mounted in.

    A folder that resolves outside its root (a symlink) is left out: mounting it
    would show its target, which the file tools refuse too.
    """
    with contextlib.suppress(OSError):
        real_root = root.resolve()
        return sorted(skill for category in root.iterdir() if category.is_dir()
                      for skill in category.iterdir()
                      if skill.is_dir() and skill.resolve().is_relative_to(real_root))
    return []


@dataclass(frozen=True)
class _Settings:
    """What every sandbox of one provider shares, worked out once."""

    bwrap: str
    fixed: list[str]
    python: str
    limits: dict[str, int]
    """`ulimit` flags and their values."""
    tmp_bytes: int
    idle_seconds: float
    cgroups: cgroup.PidsLimit | None
    """Where each namespace's ``pids`` cgroup is made; None where none can be."""
    start_spare: _SpareStarter
    """Starts a spare namespace (for the pool, or for a thread that found none)."""
    overlays: _Overlays
    """Whether an adopted spare mounts the thread's directories from an overlay."""

    @property
    def spares(self) -> SparePool | None:
        """The spare namespaces; None once they proved not to work here."""
        return self.start_spare.pool


def _unmount_overlay(host: str, root_fd: int, work: str) -> None:
    """After a namespace ended: stop reaching the thread's files through its overlay,
    whose last reference that was (so it is unmounted now), and remove what the overlay
    left in its work directory."""
    confined.unregister_mount(host, root_fd)
    try:
        _remove_overlay_work(work)
    except OSError as error:  # the next adoption tries again
        logger.debug("sandbox: the overlay's work directory stays: %s", error)


# What a volatile overlay leaves in its work directory once unmounted, deepest first.
_OVERLAY_LEFT = ("incompat/volatile/dirty", "incompat/volatile", "incompat")


def _remove_overlay_work(work: str) -> None:
    """Remove `work`, what an unmounted overlay left (`_OVERLAY_LEFT`): entry by entry,
    as root passes the folders the overlay made with no permissions (four calls); else,
    should anything else be there or the entries not be passable, the whole tree
    (`threaddir.remove_tree`: a listing and a permission change per folder)."""
    try:
        os.unlink(f"{work}/{_OVERLAY_LEFT[0]}")
        for name in _OVERLAY_LEFT[1:]:
            os.rmdir(f"{work}/{name}")
        os.rmdir(work)
    except OSError:
        remove_tree(Path(work))


class _Overlays:
    """Whether a spare's adoption mounts the thread's directories from an overlay of its
    ``user-data`` (whose mountinfo names no host path): until one could not be mounted,
    which is said once in the log; from then on they are bind mounts."""

    def __init__(self) -> None:
        self.enabled = True

    def refuse(self, reason: str) -> None:
        if self.enabled:
            self.enabled = False
            logger.warning(
                "sandbox: the thread's directories are bind mounts from now on, whose "
                "/proc/self/mountinfo entries inside name their host path: an overlay could "
                "not be mounted (%s)", reason)


class _SpareStarter:
    """Starts the sources of spare namespaces for one provider (its settings), and their
    spares, and owns their pool."""

    def __init__(self, bwrap: str, fixed: list[str], python: str, limits: dict[str, int],
                 tmp_bytes: int, idle_seconds: float, network: bool,
                 cgroups: cgroup.PidsLimit | None) -> None:
        self._bwrap, self._fixed, self._python = bwrap, fixed, python
        self._limits, self._tmp_bytes, self._network = limits, tmp_bytes, network
        self._cgroups = cgroups
        self.pool: SparePool | None = SparePool(self, idle_seconds)
        # Skill roots -> what a spare mounts of them (`_spare_skill_mounts`), as of the
        # start of the latest source for them: listing the folders costs a stat per path
        # component, too much for each thread.
        self._skill_mounts: dict[tuple[Path, ...], _SkillMounts] = {}

    def skill_mounts(self, skill_roots: tuple[Path, ...]) -> _SkillMounts:
        """What a spare of a source for `skill_roots` mounts of the skills."""
        found = self._skill_mounts.get(skill_roots)
        if found is None:
            found = self._skill_mounts[skill_roots] = _spare_skill_mounts(skill_roots)
        return found

    def disable(self) -> None:
        self.pool = None

    def launch(self, key: Any) -> Namespace:
        """Start bubblewrap for a source of spare namespaces of ``key`` (a ``users`` tree
        and skill roots; `Namespace.launch`)."""
        users, skill_roots = key
        mounts = self._skill_mounts[skill_roots] = _spare_skill_mounts(skill_roots)
        files = _etc_files(self._limits)
        fds = [memory_file(name, data) for name, data in files.items()]
        options = [*self._fixed, *(option for fd, name in zip(fds, files, strict=True)
                                   for option in ("--file", str(fd), name)),
                   "--size", str(self._tmp_bytes), "--tmpfs", "/tmp",
                   "--bind", str(users), _SPARE_VIEW,
                   *(option for name, _ in _THREAD_DIRS
                     for option in ("--dir", f"{VIRTUAL_ROOT}/{name}")),
                   *_spare_skill_arguments(skill_roots, mounts),
                   # Its spares share its /dev: read-only, and each mounts its own shm and pts.
                   "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/"]
        environment = {"PATH": _PATH, "HOME": WORKSPACE,
                       "LANG": os.environ.get("LANG") or "C.UTF-8",
                       reaper.TOKEN_VARIABLE: reaper.new_token(),
                       # Every C function resolved once, at the source's start: resolved
                       # lazily, each spare would resolve again those the source never
                       # called (the interpreter's after-fork work, its setup's), writing
                       # the copied symbol tables (about 35 page faults a spare).
                       "LD_BIND_NOW": "1"}
        namespace = Namespace(self._bwrap, options, self._python, environment, fds=fds,
                              spare=True)
        namespace.launch()
        return namespace

    def finish(self, namespace: Namespace) -> None:
        """Wait until a launched source runs (it starts no command: no cgroup of its own)."""
        namespace.wait_ready()

    def spawn(self, source: Namespace) -> Namespace:
        """A spare namespace made by `source` (`Namespace.spawn`), in its own ``pids``
        cgroup."""
        spare = source.spawn(network=self._network, tmp_bytes=self._tmp_bytes)
        _hold_in_cgroup(spare, self._cgroups)
        return spare


def _hold_in_cgroup(namespace: Namespace, cgroups: cgroup.PidsLimit | None) -> None:
    """Put a running namespace's init in its own ``pids`` cgroup (None: no cgroups),
    released when the namespace closes; a cgroup that cannot be made closes it."""
    if cgroups is None:
        return
    assert namespace.init_pid is not None
    try:
        group = cgroups.hold(namespace.init_pid)
    except OSError as error:
        namespace.close()
        raise SandboxError(f"The sandbox could not be held to its process limit: its "
                           f"cgroup could not be made ({error}).") from None
    namespace.on_close(functools.partial(cgroup.release, group))


class BwrapSandboxProvider(HostSandboxProvider):
    """Hands out one :class:`BwrapSandbox` per thread.

    Args:
        base: ``default_timeout``, ``max_output_bytes`` and ``shell``, as for every
            `HostSandboxProvider`.
        network: let commands reach the network (``--share-net``; the host's name
            resolution and certificates are then mounted too).
        memory_mb: address-space limit of each process (``RLIMIT_AS``).
        processes: processes the sandbox may have (``RLIMIT_NPROC``, and the
            namespace's ``pids`` cgroup where one can be made).
        cpu_seconds: CPU seconds of each process (``RLIMIT_CPU``); default: the
            command timeout, rounded up.
        file_size_mb: largest file a command may write (``RLIMIT_FSIZE``), and the
            size of the sandbox's ``/tmp``.
        idle_seconds: how long a thread's namespace is kept without a command.

    Raises:
        BwrapUnavailableError: when bubblewrap is not usable here (`bwrap_status`).
    """

    name = "bwrap"

    def __init__(self, *, network: bool = False, memory_mb: int = 8192, processes: int = 1024,
                 cpu_seconds: int | None = None, file_size_mb: int = 1024,
                 idle_seconds: float = DEFAULT_IDLE_SECONDS, **base: Any) -> None:
        super().__init__(**base)
        for label, value in (("memory_mb", memory_mb), ("processes", processes),
                             ("cpu_seconds", cpu_seconds or 1), ("file_size_mb", file_size_mb)):
            if value < 1:
                raise ValueError(f"{label} must be at least 1, got {value!r}")
        if idle_seconds <= 0:
            raise ValueError(f"idle_seconds must be positive, got {idle_seconds!r}")
        status = bwrap_status()
        if not status.usable or status.path is None:
            raise BwrapUnavailableError(f"The bwrap sandbox provider cannot run: {status.reason}.")
        self.network = network
        self.processes = processes
        python, python_mounts = _sandbox_python()
        limits = {"-v": memory_mb * 1024, "-u": processes,
                  "-t": cpu_seconds or math.ceil(self.default_timeout),
                  "-f": file_size_mb * 1024}  # bash counts -v and -f in KiB
        cgroups = cgroup.PidsLimit.find(processes)
        self._settings = _Settings(
            bwrap=status.path, fixed=self._fixed_arguments(python_mounts), python=python,
            limits=limits, tmp_bytes=file_size_mb << 20, idle_seconds=float(idle_seconds),
            cgroups=cgroups, overlays=_Overlays(), start_spare=_SpareStarter(
                status.path, self._fixed_arguments(python_mounts, spare=True), python, limits,
                file_size_mb << 20, float(idle_seconds), network, cgroups))
        if self._settings.cgroups is None and os.geteuid() == 0:
            logger.warning(
                "sandbox: limits.processes (%d) cannot hold here: the harness runs as root, "
                "whose processes RLIMIT_NPROC does not count, and no pids cgroup can be made "
                "(mount the cgroup tree writable, or run the harness as another user)",
                processes)

    def _fixed_arguments(self, python_mounts: list[str], *, spare: bool = False) -> list[str]:
        """The options every namespace of this provider shares, worked out once.

        ``spare``: a source of spares (`nsinit`); its init runs as the namespace's root with
        the capabilities its spares need to make their namespaces and mounts
        (``CAP_SYS_ADMIN``), bring their loopback up (``CAP_NET_ADMIN``) and then map
        themselves to the sandbox user in a user namespace of their own (``CAP_SETFCAP``:
        the kernel asks for it to map the parent's root), and to mount a thread's overlay
        (``CAP_DAC_OVERRIDE``: the overlay makes its work directory with no permissions
        and works in it as its mounter), dropping them all; otherwise
        bubblewrap starts it as that user, without any.
        """
        user = ["--uid", "0", "--gid", "0", "--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN",
                "--cap-add", "CAP_NET_ADMIN", "--cap-add", "CAP_SETFCAP",
                "--cap-add", "CAP_DAC_OVERRIDE"] if spare else \
            ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL"]
        return ["--unshare-all", *(["--share-net"] if self.network else []),
                "--die-with-parent", "--new-session", "--as-pid-1", *user,
                "--hostname", SANDBOX_USER,
                *_system_arguments(), *python_mounts, "--proc", "/proc", "--dev", "/dev",
                *_etc_arguments(self.network)]

    def acquire(self, thread_paths: ThreadPaths) -> str:
        """The thread's sandbox id; its namespace starts now, in the background."""
        sandbox_id = super().acquire(thread_paths)
        sandbox = self.get(sandbox_id)
        if isinstance(sandbox, BwrapSandbox):
            sandbox.prepare()
        return sandbox_id

    def warm(self, layout: PathLayout) -> None:
        """Start a source of spare namespaces for the threads of `layout`, unless one is
        there (its bubblewrap now, its setup in the background). Not under a base
        directory that has no thread with files yet: a chat turn writes nothing."""
        spares = self._settings.spares
        users = layout.base / "users"
        key = (users, layout.skill_roots)
        if spares is not None and (spares.has(key) or users.is_dir()):
            spares.fill(key)  # or, with a source there, make a spare ahead if it has none

    def settle(self) -> None:
        """Wait until the work the last runs started in the background is done: sources
        starting, spares being made ahead (benchmarks use it, so that the work counts
        for the run that started it)."""
        spares = self._settings.spares
        if spares is not None:
            spares.settle()

    def shutdown(self) -> None:
        super().shutdown()
        spares = self._settings.spares
        if spares is not None:
            spares.close()

    def _new_sandbox(self, sandbox_id: str, thread_paths: ThreadPaths) -> BwrapSandbox:
        return BwrapSandbox(sandbox_id, thread_paths, default_timeout=self.default_timeout,
                            max_output_bytes=self.max_output_bytes, shell=self.shell,
                            settings=self._settings)
