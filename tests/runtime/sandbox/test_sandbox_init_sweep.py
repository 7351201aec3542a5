"""The init's sweep of everything else in its namespace (`nsinit.Init.kill_all`).

Driven as the namespace's PID 1 in a PID namespace of bubblewrap's (the only place
where the init sends ``kill(-1)``), with the init's `_kill` recorded on the way
through: a lone init sends no ``kill(-1)`` (the kernel would walk every process of
the machine to find nobody), and one with a child left, a ``setsid`` escapee
re-parented to it beside its exited, unreaped shell, still kills and reaps it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from antler.runtime.sandbox.bwrap import bwrap_status
from tests.runtime.sandbox.test_sandbox_bwrap import needs_bwrap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="bubblewrap and /proc are Linux only")

_INIT_SOURCE = Path(__file__).parents[3] / "core" / "runtime" / "sandbox" / "nsinit.py"

_SWEEP = """
import posix, sys, time
exec(compile(open(sys.argv[1]).read(), "nsinit", "exec"))
sent = []
_sent_through = _kill
def _kill(pid, group=False, libc=None):
    sent.append(-pid if group else pid)
    return _sent_through(pid, group, libc)
def state(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0]
    except OSError:
        return None
assert posix.getpid() == 1, posix.getpid()
init = Init.__new__(Init)
init.libc = _Libc()
init.running = {}
init.kill_all()
alone = list(sent)
sent.clear()
shell = posix.posix_spawn("/bin/sh", ["/bin/sh", "-c", "setsid sleep 300 & exit 0"], {},
                          setsid=True)
deadline = time.monotonic() + 20
while state(shell) != "Z" and time.monotonic() < deadline:
    time.sleep(0.01)
escapees = [int(name) for name in posix.listdir("/proc")
            if name.isdigit() and int(name) not in (1, shell)
            and open(f"/proc/{name}/comm").read().strip() == "sleep"]
while len(escapees) != 1 and time.monotonic() < deadline:
    time.sleep(0.01)
    escapees = [int(name) for name in posix.listdir("/proc")
                if name.isdigit() and int(name) not in (1, shell)
                and open(f"/proc/{name}/comm").read().strip() == "sleep"]
before = state(shell)
init.kill_all()
print(alone, before, state(shell), len(escapees), -1 in sent, [state(pid) for pid in escapees],
      _wait_any(init.libc, block=False))
"""


def test_a_lone_init_sends_no_kill_of_everything_and_one_with_an_escapee_kills_it(
        tmp_path: Path) -> None:
    """After most commands the init is alone in its namespace: its sweep must not send
    ``kill(-1)``, which costs a walk over every process of the machine (on the code
    before, it was sent every time). An init that still has a child (a ``setsid``
    escapee of a shell that exited, the shell not yet reaped) must kill and reap it."""
    needs_bwrap()
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    script = tmp_path / "sweep.py"
    script.write_text(_SWEEP)
    done = subprocess.run(
        [bwrap_status().path or "bwrap", "--unshare-pid", "--as-pid-1", "--die-with-parent",
         "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
         python, "-I", "-S", str(script), str(_INIT_SOURCE)],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # Alone: nothing sent. Then: the shell exited (a zombie) and left one escapee;
    # kill(-1) sent, the shell and the escapee reaped (gone from /proc), no child left.
    assert done.stdout.splitlines() == ["[] Z None 1 True [None] None"], done.stdout
