"""The bwrap sandbox provider: what its boundary adds over the local provider, and parity.

The escape attempts run under both providers: they must fail under bwrap and
succeed under local (commands there reach the host), which is what the
boundary adds. Everything the tools rely on (virtual paths, time limits,
output caps, the saved long output, the demo) behaves the same under both.

Without a usable bubblewrap these tests skip with the reason, except under
``CI=true``, where they fail: CI installs bubblewrap.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from antler.chain.config import parse_config
from antler.contracts.tooloutput import TOOL_OUTPUT_KEY
from antler.plugin_api.context import SANDBOX_PROVIDER
from antler.plugin_api.paths import PathLayout
from antler.plugin_api.registry import discover
from antler.plugin_api.sandbox import load_sandbox_provider
from antler.runtime.demo import THREAD_ID, USER_ID, run_demo
from antler.runtime.sandbox import choice
from antler.runtime.sandbox.bwrap import BwrapSandboxProvider, BwrapStatus, bwrap_status
from antler.runtime.sandbox.choice import IsolationRequiredError, choose_provider
from antler.runtime.sandbox.host import HostSandbox, HostSandboxProvider
from antler.runtime.sandbox.local import LocalSandboxProvider
from tests.machine import require
from tests.plugins.support import make_agent
from tests.runtime.test_reliability_processes import running

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="bubblewrap and /proc are Linux only")

PROVIDERS = ["local", "bwrap"]
UNUSABLE = BwrapStatus(False, "bubblewrap is not installed (test)")


def needs_bwrap() -> None:
    """Skip with the reason when bubblewrap is not usable; under CI, fail instead."""
    status = bwrap_status()
    if not status.usable:
        require(f"bubblewrap is not usable here: {status.reason}",
                "the bwrap provider's tests need it")


@pytest.fixture(params=PROVIDERS)
def provider_name(request: pytest.FixtureRequest) -> str:
    if request.param == "bwrap":
        needs_bwrap()
    return str(request.param)


@pytest.fixture
def skills_root(tmp_path: Path) -> Path:
    skill = tmp_path / "skills" / "public" / "data-report"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: data-report\ndescription: d\n---\nSteps.\n",
                                    encoding="utf-8")
    return tmp_path / "skills"


@pytest.fixture
def layout(tmp_path: Path, skills_root: Path) -> PathLayout:
    return PathLayout(tmp_path / "home", skill_roots=(skills_root,))


@pytest.fixture
def provider(provider_name: str) -> Iterator[HostSandboxProvider]:
    built = load_sandbox_provider(provider_name, default_timeout=20, max_output_bytes=4096)
    assert isinstance(built, HostSandboxProvider)
    yield built
    built.shutdown()


def sandbox_for(provider: HostSandboxProvider, layout: PathLayout, thread: str = "t1"
                ) -> HostSandbox:
    return provider.get(provider.acquire(layout.thread("u", thread)))


@pytest.fixture
def sandbox(provider: HostSandboxProvider, layout: PathLayout) -> HostSandbox:
    return sandbox_for(provider, layout)


@contextlib.contextmanager
def bwrap_sandbox(layout: PathLayout, **options: Any) -> Iterator[HostSandbox]:
    """Thread t1's sandbox in a bwrap provider built with `options` (skips without bwrap)."""
    needs_bwrap()
    provider = BwrapSandboxProvider(**options)
    try:
        yield sandbox_for(provider, layout)
    finally:
        provider.shutdown()


def settle(marker: str, *, present: bool, tries: int = 100) -> bool:
    """Whether processes with `marker` are (or are no longer) in the table, within a while."""
    for _ in range(tries):
        if bool(running(marker)) == present:
            return True
        time.sleep(0.05)
    return False


# -- escape attempts: fail under bwrap, succeed under local -----------------------------------

def test_etc_passwd_shows_no_host_users(sandbox: HostSandbox, provider_name: str) -> None:
    result = sandbox.execute_command("cat /etc/passwd")
    seen = {line.split(":")[0] for line in result.stdout.splitlines() if line}
    host = {line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines() if line}
    if provider_name == "bwrap":
        assert seen == {"sandbox"}
        assert sandbox.execute_command("id -un").stdout.strip() == "sandbox"
    else:  # the local provider shows the host's users: no boundary
        assert seen == host


def test_writing_outside_the_mounts_fails(sandbox: HostSandbox, provider_name: str,
                                          tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    result = sandbox.execute_command(
        f"echo pwned > {outside}/planted; echo pwned > /planted-{uuid.uuid4().hex}; "
        "echo pwned > /usr/planted")
    if provider_name == "bwrap":
        assert not (outside / "planted").exists()
        assert result.stderr.count("Read-only file system") + result.stderr.count(
            "No such file or directory") == 3, result.stderr
    else:
        assert (outside / "planted").read_text() == "pwned\n"


def test_another_threads_files_are_not_visible(provider: HostSandboxProvider, layout: PathLayout,
                                               provider_name: str) -> None:
    other = sandbox_for(provider, layout, "t2")
    other.write_file("/mnt/user-data/workspace/secret.txt", "t2's secret")
    host_secret = layout.thread("u", "t2").workspace / "secret.txt"
    mine = sandbox_for(provider, layout, "t1")
    result = mine.execute_command(
        f"cat {host_secret}; cat ../../../t2/user-data/workspace/secret.txt; "
        "find / -name secret.txt 2>/dev/null")
    if provider_name == "bwrap":
        assert "t2's secret" not in result.stdout
        assert "secret.txt" not in result.stdout
    else:
        assert "t2's secret" in result.stdout


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on the host's loopback; yields its port and what it received."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            with connection:
                received.append(connection.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join()
    server.close()


def test_the_network_is_unreachable(sandbox: HostSandbox, provider_name: str,
                                    listener: tuple[int, list[bytes]]) -> None:
    port, received = listener
    result = sandbox.execute_command(f"echo knock > /dev/tcp/127.0.0.1/{port} && echo connected")
    if provider_name == "bwrap":
        assert "connected" not in result.stdout and "Connection refused" in result.stderr
        assert received == []
    else:
        assert result.stdout.strip() == "connected"
        assert settle_received(received)


def settle_received(received: list[bytes]) -> bool:
    for _ in range(100):
        if received:
            return received == [b"knock\n"]
        time.sleep(0.02)
    return False


def test_network_true_lets_bwrap_commands_out(layout: PathLayout,
                                              listener: tuple[int, list[bytes]]) -> None:
    port, received = listener
    with bwrap_sandbox(layout, network=True) as sandbox:
        result = sandbox.execute_command(
            f"echo knock > /dev/tcp/127.0.0.1/{port} && echo connected; test -f /etc/resolv.conf"
            " && echo resolv")
    assert result.stdout.split() == ["connected", "resolv"]
    assert settle_received(received)


_HARNESS = """
import sys
from antler.plugin_api.paths import PathLayout
from antler.plugin_api.sandbox import load_sandbox_provider
provider = load_sandbox_provider(sys.argv[1])
sandbox = provider.get(provider.acquire(PathLayout(sys.argv[2]).thread("u", "t")))
sandbox.execute_command(sys.argv[3], timeout=60)
"""


def test_kill_9_of_the_harness_leaves_no_sandbox_process(provider_name: str,
                                                          tmp_path: Path) -> None:
    marker = f"{300 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 1000}"
    # A process that leaves the command's session and clears its environment
    # escapes the local provider's group kill, parent-death signal and sweep.
    # The markers are spelt out only in the sleeps' arguments, not in the command
    # text that the harness's and the shell's command lines show.
    command = f"m={marker}; (setsid env -i sleep ${{m}}1 >/dev/null 2>&1 &); sleep ${{m}}2"
    harness = subprocess.Popen([sys.executable, "-c", _HARNESS, provider_name, str(tmp_path),
                                command], stdout=subprocess.DEVNULL)
    try:
        assert settle(f"sleep {marker}1", present=True, tries=400)
        assert settle(f"sleep {marker}2", present=True, tries=400)
        harness.kill()
        harness.wait(timeout=30)
        if provider_name == "bwrap":
            assert settle(f"sleep {marker}", present=False)
        else:  # the escaped process outlives the harness
            assert settle(f"sleep {marker}2", present=False)
            assert running(f"sleep {marker}1")
    finally:
        for pid in running(f"sleep {marker}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


# -- skills -----------------------------------------------------------------------------------

def test_skills_are_readable_by_commands_and_read_only_under_bwrap(
        sandbox: HostSandbox, provider_name: str, skills_root: Path) -> None:
    read = sandbox.execute_command("cat /mnt/skills/public/data-report/SKILL.md")
    assert read.ok and "name: data-report" in read.stdout
    write = sandbox.execute_command("echo changed > /mnt/skills/public/data-report/NEW.md")
    with pytest.raises(PermissionError, match="read-only"):
        sandbox.write_file("/mnt/skills/public/data-report/NEW.md", "x")  # file tools: both
    if provider_name == "bwrap":
        assert not write.ok and "Read-only file system" in write.stderr
        assert not (skills_root / "public" / "data-report" / "NEW.md").exists()
    else:  # a local command writes wherever the host user may
        assert (skills_root / "public" / "data-report" / "NEW.md").exists()
    listing = sandbox.execute_command("ls /mnt/skills/public; echo /mnt/skills/public/*")
    assert listing.stdout.split() == ["data-report", "/mnt/skills/public/data-report"]


def test_the_first_skill_root_holding_a_skill_wins_in_commands(
        provider: HostSandboxProvider, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for root, text in ((first, "from the first root"), (second, "from the second root")):
        (root / "public" / "shared").mkdir(parents=True)
        (root / "public" / "shared" / "SKILL.md").write_text(text, encoding="utf-8")
    (second / "custom" / "only-second").mkdir(parents=True)
    (second / "custom" / "only-second" / "SKILL.md").write_text("second only", encoding="utf-8")
    layout = PathLayout(tmp_path / "home", skill_roots=(first, second))
    result = sandbox_for(provider, layout).execute_command(
        "cat /mnt/skills/public/shared/SKILL.md; echo; cat /mnt/skills/custom/only-second/SKILL.md;"
        " echo; cd /mnt/skills/public/shared && ls")
    assert result.stdout.splitlines() == ["from the first root", "second only", "SKILL.md"]


def test_a_skill_folder_linking_outside_its_root_is_not_mounted(
        layout: PathLayout, skills_root: Path, tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir()
    (private / "key").write_text("secret", encoding="utf-8")
    (skills_root / "public" / "sneaky").symlink_to(private)
    with bwrap_sandbox(layout) as sandbox:
        result = sandbox.execute_command("ls /mnt/skills/public; cat /mnt/skills/public/sneaky/key")
    assert result.stdout.split() == ["data-report"] and "secret" not in result.stdout


# -- parity: the same tool semantics under both providers ------------------------------------

def test_commands_see_the_same_virtual_paths(sandbox: HostSandbox, layout: PathLayout) -> None:
    paths = layout.thread("u", "t1")
    (paths.uploads / "in.csv").write_text("a,b\n", encoding="utf-8")
    result = sandbox.execute_command(
        "pwd; echo $HOME; cat /mnt/user-data/uploads/in.csv; echo out > /mnt/user-data/outputs/o;"
        " echo ws > note; ls /mnt/user-data; echo t > /tmp/kept-$$ && echo tmp-ok")
    assert result.stdout.splitlines() == [
        "/mnt/user-data/workspace", "/mnt/user-data/workspace", "a,b", "outputs", "uploads",
        "workspace", "tmp-ok"]
    assert (paths.outputs / "o").read_text() == "out\n"
    assert (paths.workspace / "note").read_text() == "ws\n"


def test_uploads_are_read_only_to_bwrap_commands(layout: PathLayout) -> None:
    with bwrap_sandbox(layout) as sandbox:
        result = sandbox.execute_command("echo x > /mnt/user-data/uploads/new")
    assert "Read-only file system" in result.stderr
    assert not (layout.thread("u", "t1").uploads / "new").exists()


def test_a_timeout_kills_the_whole_tree(sandbox: HostSandbox) -> None:
    marker = f"{300 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 1000}"
    started = time.monotonic()
    result = sandbox.execute_command(f"m={marker}; (sleep $m &); sleep $m", timeout=0.5)
    assert result.timed_out and not result.ok
    assert "[command timed out after 0.5s and was killed]" in result.stderr
    assert time.monotonic() - started < 15  # a hang guard, not a speed check
    sandbox.end_run()
    assert settle(f"sleep {marker}", present=False)


def test_output_is_capped_the_same_way(sandbox: HostSandbox) -> None:
    result = sandbox.execute_command("head -c 10000 /dev/zero | tr '\\0' x; echo err >&2")
    assert result.stdout == "x" * 4096 + "\n[output truncated: 5904 more bytes not shown]"
    assert result.stderr == "err\n"
    failed = sandbox.execute_command("exit 3")
    assert (failed.exit_code, failed.timed_out) == (3, False)


def test_rlimits_hold_and_cannot_be_raised(layout: PathLayout) -> None:
    with bwrap_sandbox(layout, memory_mb=512, processes=64, cpu_seconds=7,
                       file_size_mb=1) as sandbox:
        limits = sandbox.execute_command("ulimit -Hv; ulimit -Hu; ulimit -Ht; ulimit -Hf")
        raised = sandbox.execute_command("ulimit -v unlimited")
        big = sandbox.execute_command("head -c 2000000 /dev/zero > big")
    assert limits.stdout.split() == [str(512 * 1024), "64", "7", "1024"]
    assert not raised.ok and "Operation not permitted" in raised.stderr
    assert not big.ok
    assert (layout.thread("u", "t1").workspace / "big").stat().st_size == 1024 * 1024


# -- through the real agent -------------------------------------------------------------------

def sandbox_config(provider_name: str, extra: str = "") -> Any:
    return parse_config(f"sandbox:\n  provider: {provider_name}\n{extra}", discover())


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_five_megabytes_of_output_are_saved_whole(provider_name: str, tmp_path: Path,
                                                  fuse: bool) -> None:
    home = tmp_path / "home"
    command = "head -c 5000000 /dev/zero | tr '\\0' y"
    script = [{"tool_calls": [{"name": "bash", "args": {"command": command}}]}, "done"]
    agent, _ = make_agent(home, script, config=sandbox_config(provider_name), fuse=fuse)
    with agent:
        assert type(agent.services.items[SANDBOX_PROVIDER]).name == provider_name
        state = agent.invoke("go", thread_id="t1")
    result = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    saved = result.additional_kwargs[TOOL_OUTPUT_KEY]
    host = PathLayout(home).thread("default", "t1").mapper.to_host(saved["path"])
    assert host.read_text() == "y" * 5_000_000
    assert saved["chars"] == 5_000_000 and len(result.content) < 20_000


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_the_demo_runs_under_both_providers(provider_name: str, tmp_path: Path,
                                            fuse: bool) -> None:
    config = sandbox_config(provider_name, f"chain:\n  fuse: {str(fuse).lower()}\n")
    demo = run_demo(tmp_path / "demo", config)
    messages = demo.turns[0]["messages"]
    bash = next(m for m in messages if isinstance(m, ToolMessage) and m.name == "bash")
    assert bash.content == "4 /mnt/user-data/uploads/sales.csv"
    assert demo.turns[0]["sandbox"]["sandbox_id"] == f"{provider_name}:{USER_ID}/{THREAD_ID}"
    assert demo.turns[1]["messages"][-1].name == "ask_clarification"


# -- choosing the provider --------------------------------------------------------------------

def test_auto_picks_bwrap_when_usable() -> None:
    needs_bwrap()
    picked = choose_provider("auto")
    assert (picked.name, picked.isolated, picked.warning) == ("bwrap", True, None)
    assert picked.reason.startswith("auto: bubblewrap works here")


def test_auto_falls_back_to_local_with_one_warning_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(choice, "bwrap_status", lambda: UNUSABLE)
    with caplog.at_level(logging.WARNING):
        agent, _ = make_agent(tmp_path, ["hi"])
    with agent:
        assert isinstance(agent.services.items[SANDBOX_PROVIDER], LocalSandboxProvider)
    # Its own logger's records: a loaded machine may add a slow-import warning naming a
    # plugin (`sandbox_audit`, say).
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                and r.name == choice.__name__]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "bubblewrap is not installed (test)" in warnings[0]
    assert "without isolation" in warnings[0]


@pytest.mark.parametrize("section", [
    "  provider: auto\n  require_isolation: true\n",
    "  provider: bwrap\n",
])
def test_isolation_that_cannot_be_had_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path, section: str) -> None:
    monkeypatch.setattr(choice, "bwrap_status", lambda: UNUSABLE)
    config = parse_config("sandbox:\n" + section, discover())
    with pytest.raises(IsolationRequiredError, match=r"bubblewrap is not usable: bubblewrap is "
                       r"not installed \(test\)\. Install bubblewrap"):
        make_agent(tmp_path, ["hi"], config=config)


def test_bad_sandbox_settings_name_the_field(tmp_path: Path) -> None:
    from antler.errors import AntlerError

    for text, field in (("  limits: {memory: 512}\n", "memory"),
                        ("  limits: {processes: 0}\n", "processes"),
                        ("  network: maybe\n", "network")):
        with pytest.raises(AntlerError, match=field):
            parse_config("sandbox:\n" + text, discover())


def test_local_with_require_isolation_is_refused() -> None:
    with pytest.raises(IsolationRequiredError, match=r"'local'.*require_isolation"):
        choose_provider("local", require_isolation=True)
    third_party = choose_provider("acme-vm", require_isolation=True)
    assert (third_party.name, third_party.isolated) == ("acme-vm", None)


def _antler_json(*args: str) -> dict[str, Any]:
    """`antler ARGS --json` through the real command, in this process (Antler is imported
    here already; a fresh `antler doctor` would spend a CPU-second and a half importing it)."""
    import json

    from click.testing import CliRunner

    from antler.cli import cli

    done = CliRunner().invoke(cli, [*args, "--json"])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return {"code": done.exit_code, **json.loads(done.stdout)}


def test_chain_show_and_doctor_say_which_provider_and_why(tmp_path: Path) -> None:
    needs_bwrap()
    shown = _antler_json("chain", "show")
    assert shown["sandbox"]["provider"] == "bwrap" and shown["sandbox"]["isolated"] is True
    checked = _antler_json("doctor")
    assert checked["code"] == 0 and checked["ok"] is True
    assert [c["name"] for c in checked["checks"]][:4] == ["config", "plugins", "imports",
                                                           "sandbox"]
    assert checked["sandbox"]["command"] == {"ok": True, "detail": "ran a command"}
    refusing = tmp_path / "refuse.yaml"
    refusing.write_text("sandbox:\n  provider: local\n  require_isolation: true\n")
    refused = _antler_json("doctor", "--config", str(refusing))
    assert refused["code"] == 1 and refused["ok"] is False
    [refusal] = [c for c in refused["checks"] if c["name"] == "sandbox"]
    assert refusal["status"] == "fail" and "require_isolation" in refusal["detail"]
    local = tmp_path / "local.yaml"
    local.write_text("sandbox:\n  provider: local\n")
    warned = _antler_json("doctor", "--config", str(local))
    [warning] = [c for c in warned["checks"] if c["name"] == "sandbox"]
    assert warned["code"] == 0 and warning["status"] == "warn"
    assert "NOT isolated" in warning["detail"]


# -- nothing left for init to reap ------------------------------------------------------------

_ORPHANS = """
import ctypes, json, os, sys, time
# This process adopts its orphaned descendants, as a container's init would (and
# might never reap them): whatever is left defunct under it was orphaned.
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
exec(sys.argv[1])
time.sleep(0.3)
left = []
for name in os.listdir("/proc"):
    try:
        stat = open(f"/proc/{name}/stat").read()
    except OSError:
        continue
    fields = stat.rsplit(")", 1)[-1].split()
    if name.isdigit() and int(fields[1]) == os.getpid():
        with open(f"/proc/{name}/cmdline", "rb") as cmdline:
            if b"antler-watchdog" in cmdline.read():
                continue  # the reaper's watchdog: a child of this process, not adopted
        left.append(stat.split(")")[0] + ") " + fields[0])
print(json.dumps(left))
"""


def orphans_left(code: str) -> list[str]:
    """The processes `code` left behind for a subreaper (its adopted, unreaped descendants).

    A hang guard of minutes: `antler doctor` imports every plugin (two CPU-seconds), which
    a loaded machine may stretch past one."""
    done = subprocess.run([sys.executable, "-c", _ORPHANS, code], capture_output=True,
                          text=True, timeout=180, check=True)
    return list(json.loads(done.stdout))


def test_the_availability_probe_leaves_no_defunct_process() -> None:
    needs_bwrap()
    code = ("from antler.runtime.sandbox.bwrap import bwrap_status\n"
            "assert bwrap_status().usable")
    assert orphans_left(code) == []


def test_a_cli_call_that_runs_a_command_leaves_no_defunct_process() -> None:
    # `antler doctor` probes bubblewrap and runs a command in it: the probe, the
    # namespace and the reaper's watchdog are all reaped before the process exits.
    needs_bwrap()
    code = ("import subprocess, sys\n"
            "done = subprocess.run([sys.executable, '-m', 'antler', 'doctor'],\n"
            "                      capture_output=True, text=True)\n"
            "assert done.returncode == 0, done.stdout + done.stderr")
    assert orphans_left(code) == []
