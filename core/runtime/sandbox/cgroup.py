"""A ``pids`` cgroup per sandbox namespace: a process limit that holds when the harness is root.

``RLIMIT_NPROC`` counts the processes of a host user, and the kernel does not
apply it to root's: a harness run as root maps the sandbox's user onto root,
so ``sandbox.limits.processes`` would not stop a fork bomb. A ``pids`` cgroup
counts the processes in it whoever owns them, and a process cannot leave it
(moving one needs write access to the cgroup tree, which the sandbox does not
have). So where the harness may make cgroups (root, or a delegated cgroup v2
subtree), each namespace gets one below the harness's own, named
``antler-<harness pid>-<n>``, with ``pids.max`` set to the limit plus one
(the namespace's init); its init is moved in before it starts a command, and
everything it starts is born inside. The cgroup is removed when the namespace
ends; ones left by a harness that died are removed by the next one to start.

`PidsLimit.find` says whether that is possible here (cgroup v1's ``pids``
hierarchy, or v2 with the ``pids`` controller).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from pathlib import Path

__all__ = ["PidsLimit"]

_PREFIX = "antler-"
_ids = itertools.count(1)


class PidsLimit:
    """Makes ``pids`` cgroups below `parent`, each holding `limit` processes."""

    def __init__(self, parent: Path, limit: int) -> None:
        self.parent = parent
        self.limit = limit
        self._parent = str(parent)
        self._limit_text = str(limit + 1).encode()

    @classmethod
    def find(cls, limit: int) -> PidsLimit | None:
        """A `PidsLimit` below this process's own ``pids`` cgroup, or None when no cgroup
        can be made and limited there."""
        for parent in _own_pids_cgroups():
            _remove_stale(parent)
            probe = parent / f"{_PREFIX}{os.getpid()}-probe"
            try:
                probe.mkdir()
            except OSError:
                continue
            try:
                if (probe / "pids.max").exists():
                    (probe / "pids.max").write_text(str(limit + 1))
                    return cls(parent, limit)
            except OSError:
                continue
            finally:
                with contextlib.suppress(OSError):
                    probe.rmdir()
        return None

    def hold(self, pid: int) -> Path:
        """Move process `pid` (a namespace's init, before it starts anything) into a new
        cgroup holding ``limit + 1`` processes; return the cgroup's directory.

        Raises:
            OSError: the cgroup could not be made or the process not moved.
        """
        # `os` calls on strings: pathlib's objects and text files cost a run about 0.1 ms.
        group = f"{self._parent}/{_PREFIX}{os.getpid()}-{next(_ids)}"
        os.mkdir(group)
        try:
            _write(f"{group}/pids.max", self._limit_text)
            _write(f"{group}/cgroup.procs", str(pid).encode())
        except OSError:
            release(Path(group))
            raise
        return Path(group)


def release(group: Path, *, tries: int = 50) -> None:
    """Remove cgroup `group` once its processes are gone (they may still be exiting)."""
    for _ in range(tries):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def _own_pids_cgroups() -> list[Path]:
    """This process's cgroup directories that have a ``pids`` controller: v1 first, then v2."""
    memberships: dict[str, str] = {}  # controller list ("" for v2) -> path
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            memberships[controllers] = path
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            separator = fields.index("-")
            root, mount_point = fields[3], fields[4]
            kind, options = fields[separator + 1], fields[separator + 3].split(",")
            member: str | None
            if kind == "cgroup" and "pids" in options:
                member = next((path for controllers, path in memberships.items()
                               if "pids" in controllers.split(",")), None)
            elif kind == "cgroup2":
                member = memberships.get("")
            else:
                continue
            if member is None:
                continue
            relative = os.path.relpath(member, root)
            if relative.startswith(".."):
                continue  # this process's cgroup is not under that mount
            directory = Path(mount_point, relative).resolve()
            if kind == "cgroup2" and "pids" not in _read(directory / "cgroup.controllers"):
                continue
            found.append(directory)
    return found


def _write(path: str, data: bytes) -> None:
    """Write `data` to the cgroup file `path` in one call."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove_stale(parent: Path) -> None:
    """Remove the cgroups of harnesses that are gone (empty ones; rmdir refuses the rest)."""
    with contextlib.suppress(OSError):
        for group in parent.glob(f"{_PREFIX}*-*"):
            owner = group.name[len(_PREFIX):].split("-", 1)[0]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                with contextlib.suppress(OSError):
                    group.rmdir()
