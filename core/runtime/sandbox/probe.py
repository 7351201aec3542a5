"""Whether bubblewrap can make sandboxes here: the probe, and its remembered answer.

`bwrap_status` runs ``bwrap`` once per process (a namespace with nothing in it)
and records the answer in ``$XDG_CACHE_HOME/antler/bwrap-probe.json``
(``~/.cache/antler`` by default). `remembered_bwrap_status` is for commands that
only *report* which provider ``auto`` would pick (``antler chain show``): it
returns the recorded answer when nothing it depends on has changed since, and
probes (and records) otherwise. The answer is keyed on what decides it: the
``bwrap`` binary (real path, size, mtime, inode), the user, the kernel boot,
the process's user namespace and seccomp mode, and the kernel's user-namespace
settings. Anything that starts a sandbox probes for itself (`bwrap_status`),
so a stale or forged record can only mislabel a report, never skip isolation.

This module imports nothing of the sandbox itself, so reporting stays cheap.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["BwrapStatus", "bwrap_status", "probe_record_path", "remembered_bwrap_status"]

_RECORD_VERSION = 1
_KERNEL_SETTINGS = ("/proc/sys/kernel/unprivileged_userns_clone",
                    "/proc/sys/user/max_user_namespaces",
                    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
                    "/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class BwrapStatus:
    """Whether bubblewrap can run sandboxes in this process, and why (not)."""

    usable: bool
    reason: str
    path: str | None = None


def probe_record_path() -> Path:
    """Where the last probe's answer is recorded (under the user's cache directory)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root, "antler", "bwrap-probe.json")


@functools.cache
def bwrap_status() -> BwrapStatus:
    """Probe bubblewrap once per process: installed, and able to make every namespace.

    The answer is also recorded for `remembered_bwrap_status`.
    """
    found = shutil.which("bwrap")
    status = _probe(found)
    if found is not None:
        _record(found, status)
    return status


def remembered_bwrap_status() -> BwrapStatus:
    """The recorded answer of the last probe of this ``bwrap``, if still valid; else probe.

    For reports only (``chain show``): a sandbox that is started probes for itself.
    """
    found = shutil.which("bwrap")
    if found is None:
        return _probe(None)
    key = _record_key(found)
    if key is not None:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            record = json.loads(probe_record_path().read_text(encoding="utf-8"))
            if record["key"] == key:
                status = record["status"]
                return BwrapStatus(bool(status["usable"]), str(status["reason"]),
                                   status["path"] and str(status["path"]))
    return bwrap_status()


def _probe(found: str | None) -> BwrapStatus:
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


def _record_key(found: str) -> list[str] | None:
    """What the probe's answer depends on, as comparable text (None: cannot tell)."""
    try:
        real = os.path.realpath(found)
        stat = os.stat(real)
        namespace = os.readlink("/proc/self/ns/user")
        seccomp = " ".join(line for line in Path("/proc/self/status").read_text().splitlines()
                           if line.startswith(("Seccomp:", "NoNewPrivs:")))
    except OSError:
        return None
    settings = []
    for setting in _KERNEL_SETTINGS:
        try:
            settings.append(Path(setting).read_text(encoding="ascii").strip())
        except OSError:
            settings.append("-")
    return [str(_RECORD_VERSION), found, real, str(stat.st_size), str(stat.st_mtime_ns),
            str(stat.st_ino), str(os.geteuid()), namespace, seccomp, *settings]


def _record(found: str, status: BwrapStatus) -> None:
    """Write the answer for `remembered_bwrap_status`; a cache that cannot be written is skipped."""
    key = _record_key(found)
    if key is None:
        return
    target = probe_record_path()
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".bwrap-probe-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump({"key": key, "status": asdict(status)}, file)
            os.replace(temporary, target)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
