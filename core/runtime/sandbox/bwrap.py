"""A sandbox provider that runs every command in a bubblewrap (``bwrap``) namespace.

The thread's files and tools are the same as under the local provider (both
are `HostSandbox`es: the files live in the thread's host ``user-data``
directory, and the file tools work on them there). What changes is the shell
command: it runs in fresh user, mount, PID, IPC, UTS, cgroup and network
namespaces that hold only

* the thread's ``workspace`` and ``outputs`` at ``/mnt/user-data/...``
  (read-write) and its ``uploads`` (read-only), so the virtual paths are real
  paths and the model's commands are the same as under the local provider;
* the installed skills, read-only, at ``/mnt/skills/<category>/<name>``;
* a read-only system: ``/usr``, and ``/bin``, ``/sbin``, ``/lib*`` as the host
  has them (symlinks or directories); a generated ``/etc`` with a ``sandbox``
  user and group only, the dynamic linker's cache and the alternatives, plus
  name resolution and certificates when the network is allowed;
* ``/proc`` of its own PID namespace, a minimal ``/dev``, and a ``/tmp`` that
  is the thread's own (kept between its commands, invisible to other threads).

The root is read-only; no other host path exists inside, nor is one named: bwrap
(the sandbox's PID 1) reads its options from a memory file (``--args``), so its
command line, ``/proc/1/cmdline`` to the sandbox, holds only the command. The network is
unreachable (not even the host's loopback) unless ``network=True``. The
command's session is new (``--new-session``: no terminal to inject keys into),
and ``--die-with-parent`` ends the sandbox when the harness dies. When the
command's shell exits, its PID namespace ends and the kernel kills whatever it
left running, ``setsid`` or not. Resource limits (address space, processes,
CPU seconds, file size) are hard rlimits the shell sets before the command.

The probe (`bwrap_status`) runs once per process and is cached.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antler.runtime.paths import SKILLS_VIRTUAL_ROOT, VIRTUAL_ROOT, ThreadPaths

from .host import HostSandbox, HostSandboxProvider, Launch
from .provider import SandboxError

__all__ = ["BwrapSandbox", "BwrapSandboxProvider", "BwrapStatus", "BwrapUnavailableError",
           "bwrap_status"]

SANDBOX_USER = "sandbox"
SANDBOX_UID = 1000
WORKSPACE = f"{VIRTUAL_ROOT}/workspace"
_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
_LIMITS_FILE = "antler-limits.sh"
# Host entries every sandbox gets in its /etc: the dynamic linker's cache and
# the Debian alternatives (`awk` and friends are symlinks into them).
_ETC_ALWAYS = ("ld.so.cache", "alternatives", "localtime")
# Only when the network is allowed: name resolution and TLS certificates.
_ETC_NETWORK = ("resolv.conf", "hosts", "nsswitch.conf", "host.conf", "gai.conf", "ssl",
                "ca-certificates", "ca-certificates.conf")
_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


class BwrapUnavailableError(SandboxError, RuntimeError):
    """bubblewrap is not installed here, or cannot create the namespaces it needs."""


@dataclass(frozen=True)
class BwrapStatus:
    """Whether bubblewrap can run sandboxes in this process, and why (not)."""

    usable: bool
    reason: str
    path: str | None = None


@functools.cache
def bwrap_status() -> BwrapStatus:
    """Probe bubblewrap once per process: installed, and able to make every namespace."""
    found = shutil.which("bwrap")
    if found is None:
        return BwrapStatus(False, "bubblewrap is not installed (no 'bwrap' on PATH; Debian "
                                  "and Ubuntu: apt-get install bubblewrap)")
    try:
        # `--as-pid-1`: bwrap's own PID 1 would outlive the outer bwrap by a moment and,
        # orphaned, be left to init to reap; a container's init may never do it.
        probe = subprocess.run(
            [found, "--unshare-all", "--die-with-parent", "--as-pid-1", "--ro-bind", "/", "/",
             "true"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return BwrapStatus(False, f"{found} could not be run: {error}", found)
    if probe.returncode != 0:
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        detail = said[-1] if said else f"exit code {probe.returncode}"
        return BwrapStatus(False, f"{found} cannot create namespaces here ({detail}); "
                                  "unprivileged user namespaces may be disabled", found)
    return BwrapStatus(True, f"bubblewrap works here ({found})", found)


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


def _copy_entry(source: Path, target: Path) -> None:
    """Copy one /etc entry; a symlink into /usr (mounted too) stays a symlink."""
    with contextlib.suppress(OSError):
        if source.is_symlink() and source.resolve().is_relative_to("/usr"):
            target.symlink_to(os.readlink(source))
        elif source.is_dir():
            shutil.copytree(source, target, symlinks=True)
        elif source.exists():
            shutil.copyfile(source, target)


class BwrapSandbox(HostSandbox):
    """One thread's sandbox whose commands run under bubblewrap. See the module docstring."""

    # The command's PID namespace ends with its shell: nothing it started survives.
    leaves_strays = False

    def __init__(self, sandbox_id: str, thread_paths: ThreadPaths, *, default_timeout: float,
                 max_output_bytes: int, shell: str, fixed: list[str]) -> None:
        super().__init__(sandbox_id, thread_paths, default_timeout=default_timeout,
                         max_output_bytes=max_output_bytes, shell=shell)
        self._fixed = fixed
        self._tmp = thread_paths.user_data.parent / "tmp"
        self._mounts = self._thread_arguments()

    def _thread_arguments(self) -> list[str]:
        """This thread's mounts: its three directories, its /tmp and the skills."""
        paths = self.thread_paths
        arguments = [
            "--bind", str(paths.workspace), WORKSPACE,
            "--ro-bind", str(paths.uploads), f"{VIRTUAL_ROOT}/uploads",
            "--bind", str(paths.outputs), f"{VIRTUAL_ROOT}/outputs",
            "--bind", str(self._tmp), "/tmp",
            "--dir", SKILLS_VIRTUAL_ROOT,
        ]
        # The first root holding a skill wins (as for the file tools): mount the
        # later roots first, so the earlier ones land on top.
        for root in reversed(paths.skill_roots):
            for skill in _skill_folders(root):
                relative = skill.relative_to(root).as_posix()
                arguments += ["--ro-bind", str(skill), f"{SKILLS_VIRTUAL_ROOT}/{relative}"]
        return arguments

    def _launch(self, command: str) -> Launch:
        # Bind sources must exist; directories removed between turns come back.
        if not self._tmp.is_dir() or self.thread_paths.ensure_directories():
            self._tmp.mkdir(parents=True, exist_ok=True)
        if os.path.basename(self._shell) == "bash":
            # bash reads BASH_ENV before the command: the limits cost no extra exec.
            shell = [self._shell, "-c", command]
        else:
            shell = ["/bin/sh", "-c", f'. /etc/{_LIMITS_FILE}; exec "$0" -c "$1"',
                     self._shell, command]
        options = [*self._fixed[1:], *self._mounts,
                   # Last: the root (tmpfs) itself becomes read-only; the mounts stay as set.
                   "--remount-ro", "/", "--chdir", WORKSPACE]
        # The options name host paths (the thread's directories, the generated /etc):
        # they reach bwrap through a descriptor (`--args`), not its command line,
        # which the sandbox could read as /proc/1/cmdline.
        fd = _arguments_fd(options)
        argv = [self._fixed[0], "--args", str(fd), "--", *shell]
        env = self._environment(_PATH, WORKSPACE)
        env["BASH_ENV"] = f"/etc/{_LIMITS_FILE}"
        # --die-with-parent ends the sandbox with the harness; the watchdog covers a
        # harness that dies before bwrap has asked for that.
        return Launch(argv, "/", env, fds=(fd,))


def _arguments_fd(arguments: list[str]) -> int:
    """A memory file holding `arguments`, each ended by NUL, read from the start."""
    fd = os.memfd_create("bwrap-args", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as memory:
            memory.write(b"".join(argument.encode() + b"\0" for argument in arguments))
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


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


class BwrapSandboxProvider(HostSandboxProvider):
    """Hands out one :class:`BwrapSandbox` per thread.

    Args:
        base: ``default_timeout``, ``max_output_bytes`` and ``shell``, as for every
            `HostSandboxProvider`.
        network: let commands reach the network (``--share-net``; the host's name
            resolution and certificates are then mounted too).
        memory_mb: address-space limit of each process (``RLIMIT_AS``).
        processes: processes the sandbox user may have (``RLIMIT_NPROC``).
        cpu_seconds: CPU seconds of each process (``RLIMIT_CPU``); default: the
            command timeout, rounded up.
        file_size_mb: largest file a command may write (``RLIMIT_FSIZE``).

    Raises:
        BwrapUnavailableError: when bubblewrap is not usable here (`bwrap_status`).
    """

    name = "bwrap"

    def __init__(self, *, network: bool = False, memory_mb: int = 8192, processes: int = 1024,
                 cpu_seconds: int | None = None, file_size_mb: int = 1024, **base: Any) -> None:
        super().__init__(**base)
        for label, value in (("memory_mb", memory_mb), ("processes", processes),
                             ("cpu_seconds", cpu_seconds or 1), ("file_size_mb", file_size_mb)):
            if value < 1:
                raise ValueError(f"{label} must be at least 1, got {value!r}")
        status = bwrap_status()
        if not status.usable or status.path is None:
            raise BwrapUnavailableError(f"The bwrap sandbox provider cannot run: {status.reason}.")
        self.network = network
        self.limits = {"-v": memory_mb * 1024, "-u": processes,
                       "-t": cpu_seconds or math.ceil(self.default_timeout),
                       "-f": file_size_mb * 1024}  # bash counts -v and -f in KiB
        self._etc = Path(tempfile.mkdtemp(prefix="antler-bwrap-etc-"))
        self._etc.chmod(0o755)
        self._write_etc()
        self._fixed = self._fixed_arguments(status.path)

    def _write_etc(self) -> None:
        """The sandboxes' /etc, made once: a ``sandbox`` user and group, the limits script,
        and copies of the few host entries commands need (no users, no secrets).

        One read-only bind of this directory costs each command less than a tmpfs
        with a bind per entry; the copies are as fresh as the provider.
        """
        for name in (*_ETC_ALWAYS, *(_ETC_NETWORK if self.network else ())):
            _copy_entry(Path("/etc", name), self._etc / name)
        home = WORKSPACE
        (self._etc / "passwd").write_text(
            f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:{SANDBOX_USER}:{home}:/bin/sh\n",
            encoding="utf-8")
        (self._etc / "group").write_text(f"{SANDBOX_USER}:x:{SANDBOX_UID}:\n", encoding="utf-8")
        # Hard and soft limits at once; a command cannot raise a hard limit again.
        lines = [f"ulimit -H -S {flag} {value} 2>/dev/null" for flag, value in self.limits.items()]
        (self._etc / _LIMITS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _fixed_arguments(self, bwrap: str) -> list[str]:
        """The arguments every command of this provider shares, worked out once."""
        return [bwrap, "--unshare-all", *(["--share-net"] if self.network else []),
                "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", SANDBOX_USER,
                *_system_arguments(), "--proc", "/proc", "--dev", "/dev",
                "--ro-bind", str(self._etc), "/etc"]

    def _new_sandbox(self, sandbox_id: str, thread_paths: ThreadPaths) -> BwrapSandbox:
        return BwrapSandbox(sandbox_id, thread_paths, default_timeout=self.default_timeout,
                            max_output_bytes=self.max_output_bytes, shell=self.shell,
                            fixed=self._fixed)

    def shutdown(self) -> None:
        super().shutdown()
        shutil.rmtree(self._etc, ignore_errors=True)
