"""``sandbox.limits.processes`` holds when the harness runs as root.

The sandbox's user maps onto the harness's, and the kernel does not count
root's processes against ``RLIMIT_NPROC``: as root, only the namespace's
``pids`` cgroup (`antler.runtime.sandbox.cgroup`) bounds them. These tests run
as whoever runs the suite; as root they are the attack the limit must stop.
The count is taken from the host, every process in the namespace's PID
namespace, while the command runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from antler.plugin_api.paths import PathLayout
from antler.plugin_api.sandbox import CommandResult
from antler.runtime.sandbox.bwrap import BwrapSandbox, BwrapSandboxProvider
from tests.runtime.sandbox.test_sandbox_bwrap import needs_bwrap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="bubblewrap and /proc are Linux only")

LIMIT = 64


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[BwrapSandbox]:
    needs_bwrap()
    provider = BwrapSandboxProvider(processes=LIMIT, default_timeout=30)
    if os.geteuid() == 0 and provider._settings.cgroups is None:
        provider.shutdown()
        # Without a pids cgroup nothing bounds root's processes: the attack would take
        # the machine down, so it is not tried.
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root with a writable cgroup tree: the pids cgroup must work")
        pytest.skip("running as root without a writable pids cgroup: the limit cannot hold")
    sandbox = provider.get(provider.acquire(PathLayout(tmp_path).thread("u", "t")))
    assert isinstance(sandbox, BwrapSandbox)
    yield sandbox
    provider.shutdown()


def in_namespace(init_pid: int) -> int:
    """How many processes share the PID namespace of `init_pid` (counted on the host)."""
    target = os.readlink(f"/proc/{init_pid}/ns/pid")
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.readlink(f"/proc/{name}/ns/pid") == target
            except OSError:
                continue
    return count


def attack(sandbox: BwrapSandbox, command: str, timeout: float) -> tuple[CommandResult, int]:
    """Run `command`; return its result and the most processes its namespace held meanwhile."""
    assert sandbox.execute_command("true").ok  # the namespace runs
    namespace = sandbox._namespace
    assert namespace is not None and namespace.init_pid is not None
    init = namespace.init_pid
    results: list[CommandResult] = []
    worker = threading.Thread(target=lambda: results.append(
        sandbox.execute_command(command, timeout=timeout)))
    worker.start()
    most = 0
    while worker.is_alive():
        most = max(most, in_namespace(init))
        time.sleep(0.02)
    worker.join()
    return results[0], most


def harness_is_healthy(sandbox: BwrapSandbox) -> None:
    assert subprocess.run(["true"], check=False).returncode == 0  # the host can still fork
    after = sandbox.execute_command("ps -e --no-headers | wc -l")
    assert after.ok and int(after.stdout) <= 4, after  # the init, the shell, ps and wc


def test_two_hundred_background_processes_stop_at_the_limit(sandbox: BwrapSandbox) -> None:
    result, most = attack(sandbox, "for i in $(seq 200); do sleep 60 & done; wait", timeout=6)
    assert LIMIT // 2 < most <= LIMIT + 1, most  # the init counts as one
    assert result.timed_out or result.exit_code != 0
    harness_is_healthy(sandbox)


def test_a_fork_bomb_is_bounded_and_killed_by_the_time_limit(sandbox: BwrapSandbox) -> None:
    # The shell stays, so the bomb runs until the time limit kills the command's group.
    result, most = attack(sandbox, ":(){ :|:& };:; sleep 60", timeout=5)
    assert LIMIT // 2 < most <= LIMIT + 1, most
    assert result.timed_out and "Resource temporarily unavailable" in result.stderr
    harness_is_healthy(sandbox)


def test_the_namespaces_cgroup_is_removed_with_it(sandbox: BwrapSandbox) -> None:
    assert sandbox.execute_command("true").ok
    namespace = sandbox._namespace
    assert namespace is not None and namespace.init_pid is not None
    with open(f"/proc/{namespace.init_pid}/cgroup") as membership:
        line = next(entry for entry in membership.read().splitlines()
                    if "pids" in entry.split(":")[1] or entry.startswith("0::"))
    name = line.rsplit("/", 1)[-1]
    assert name.startswith(f"antler-{os.getpid()}-"), line
    settings = sandbox._settings
    assert settings.cgroups is not None
    group = settings.cgroups.parent / name
    assert (group / "pids.max").read_text().strip() == str(LIMIT + 1)
    sandbox.close()
    assert not group.exists()
