"""The file tools hold against a model that races them with symlink and directory flips.

An attacker's own command (a real process, started through the sandbox's
``bash`` the way a model would start it, so under bwrap it runs inside the
namespace) flips names in the workspace in a tight loop:

* ``r`` between an inside file and symlinks to the host's ``/etc/passwd``, a
  secret file under the base directory, another user's thread file and a file
  outside (absolute and ``..``-relative targets);
* ``w`` between an inside file and symlinks to files outside, to another user's
  thread file and to the base directory's secret (writes and ``str_replace``
  go through it);
* the directory ``d`` between a real directory and symlinks to a directory
  outside and to another user's workspace.

Meanwhile thousands of parallel calls of the real sandbox tools (``read_file``,
``write_file``, ``str_replace``, ``ls``, ``glob``, ``grep``; a thread pool, as
the agent runs one turn's calls) hit those names. Zero escapes: no result
shows host content or an outside name, and nothing outside the thread's files
is created or changed. Both providers; bubblewrap skips when unusable except
under ``CI=true``. The CI form is bounded (a few seconds per provider); the
long form runs with ``-m slow``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from antler.contracts.runcontext import RunContext
from antler.plugin_api import confined
from antler.plugin_api.context import SANDBOX_PROVIDER
from antler.plugin_api.paths import PathLayout, ThreadPaths
from antler.plugin_api.sandbox import load_sandbox_provider
from antler.plugins.sandbox.config import SandboxConfig
from antler.plugins.sandbox.tools import build_tools
from antler.runtime.sandbox.host import HostSandboxProvider
from tests.plugins.support import make_agent
from tests.runtime.sandbox.test_sandbox_bwrap import needs_bwrap

PASSWD_MARK = "root:x:0:0"
BASE_SECRET = "BASE-SECRET-7f3a"
BOB_SECRET = "BOB-SECRET-91c2"
OUTSIDE_SECRET = "OUTSIDE-SECRET-4be1"
OUTSIDE_NAMES = ("only-outside.txt", "bob-only.txt")
MARKS = (PASSWD_MARK, BASE_SECRET, BOB_SECRET, OUTSIDE_SECRET, *OUTSIDE_NAMES)
WS = "/mnt/user-data/workspace"

# Runs inside the sandbox (its working directory is the workspace) until `.stop` appears.
# Arguments: the config's path and the most seconds to run.
FLIPPER = r"""
import json, os, sys, time
cfg = json.load(open(sys.argv[1]))
end = time.time() + float(sys.argv[2])
flips = 0

def put_file(name, text):
    tmp = f".{name}.f{flips}"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, name)

def put_link(name, target):
    tmp = f".{name}.l{flips}"
    os.symlink(target, tmp)
    os.replace(tmp, name)

def dir_real():
    try:
        os.unlink("d")
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        pass
    try:
        os.rename(".d.real", "d")
    except OSError:
        pass

def dir_link(target):
    try:
        os.rename("d", ".d.real")
    except OSError:
        # A file tool made `d` a directory while it was missing: set it aside too.
        if os.path.isdir("d") and not os.path.islink("d"):
            os.rename("d", f".d.made{flips}")
    put_link("d", target)

os.makedirs(".d.real", exist_ok=True)
with open(".d.real/inside.txt", "w") as handle:
    handle.write("inside old\n")
while time.time() < end and not os.path.exists(".stop"):
    for target in cfg["read"]:
        put_file("r", "inside old\n")
        put_link("r", target)
    for target in cfg["write"]:
        put_file("w", "inside old\n")
        put_link("w", target)
    for target in cfg["dirs"]:
        dir_real()
        try:
            dir_link(target)
        except OSError:
            pass
    flips += 1
    with open(".flips.tmp", "w") as handle:  # progress, for a test that waits for flips
        handle.write(str(flips))
    os.replace(".flips.tmp", ".flips")
dir_real()
print(flips)
"""


def snapshot(root: Path, skip: Path) -> dict[str, str]:
    """Every file below ``root`` (but ``skip``) and the SHA-256 of its content (or link)."""
    found: dict[str, str] = {}
    for directory, dirs, files in os.walk(root):
        if Path(directory) == skip or skip in Path(directory).parents:
            dirs[:] = []
            continue
        for name in files + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                found[path] = "link:" + os.readlink(path)
            else:
                found[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        found[directory] = "dir"
    return found


class Arena:
    """The attacker's thread, the victims around it and the snapshot to compare against."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.layout = PathLayout(self.home)
        self.paths: ThreadPaths = self.layout.thread("mallory", "t1")
        self.paths.ensure_directories()
        bob = self.layout.thread("bob", "t2")
        bob.ensure_directories()
        (bob.workspace / "bob-only.txt").write_text(f"old {BOB_SECRET}\n")
        (bob.workspace / "inside.txt").write_text(f"old {BOB_SECRET}\n")
        self.bob_file = bob.workspace / "bob-only.txt"
        keys = self.home / "keys"
        keys.mkdir()
        self.base_secret = keys / "read-marks.key"
        self.base_secret.write_text(f"old {BASE_SECRET}\n")
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        for name in ("only-outside.txt", "inside.txt", "victim.txt"):
            (self.outside / name).write_text(f"old {OUTSIDE_SECRET}\n")
        workspace = str(self.paths.workspace)
        config = {
            "read": ["/etc/passwd", str(self.base_secret), str(self.bob_file),
                     os.path.relpath("/etc/passwd", workspace),
                     os.path.relpath(self.outside / "only-outside.txt", workspace)],
            "write": [str(self.outside / "victim.txt"), str(self.bob_file),
                      str(self.base_secret), os.path.relpath(self.outside / "w-new.txt",
                                                             workspace)],
            "dirs": [str(self.outside), str(bob.workspace),
                     os.path.relpath(self.outside, workspace)],
        }
        # In uploads: out of the way of the searches (the config names host paths).
        (self.paths.uploads / "flip.json").write_text(json.dumps(config))
        (self.paths.uploads / "flipper.py").write_text(FLIPPER)
        self.passwd = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
        self.before = snapshot(tmp_path, self.paths.user_data.parent)
        self.tmp_path = tmp_path

    def assert_nothing_outside_changed(self) -> None:
        after = snapshot(self.tmp_path, self.paths.user_data.parent)
        changed = sorted(path for path in after.keys() | self.before.keys()
                         if after.get(path) != self.before.get(path))
        assert changed == [], f"changed outside the thread's files: {changed}"
        assert hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest() == self.passwd


def calls(count: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """``count`` tool calls cycling over every file tool and every flipping name."""
    rounds = [
        ("read_file", {"path": "r"}),
        ("read_file", {"path": "d/inside.txt"}),
        ("write_file", {"path": "w", "content": "mine old\n"}),
        ("write_file", {"path": "w", "content": "more old\n", "append": True}),
        ("write_file", {"path": "d/new.txt", "content": "new old\n"}),
        ("str_replace", {"path": "w", "old": "old", "new": "NEW"}),
        ("str_replace", {"path": "d/inside.txt", "old": "old", "new": "NEW"}),
        ("ls", {"path": "d"}),
        ("ls", {"path": WS}),
        ("glob", {"pattern": "**/*", "path": f"{WS}/d"}),
        ("glob", {"pattern": "**/*", "path": WS, "include_dirs": True}),
        ("grep", {"pattern": "old|SECRET|root:", "path": WS}),
        ("grep", {"pattern": "old", "path": f"{WS}/d", "glob": "*.txt"}),
        ("read_file", {"path": f"{WS}/r"}),
    ]
    for index in range(count):
        yield rounds[index % len(rounds)]


def text_of(result: Any) -> tuple[str, str]:
    message = result
    if isinstance(result, Command):
        message = result.update["messages"][0]
    assert isinstance(message, ToolMessage)
    return str(message.content), str(message.status)


def start_flipper(provider: HostSandboxProvider, arena: Arena,
                  seconds: float) -> tuple[threading.Thread, dict[str, Any]]:
    """Run the flipper through the attacker's own sandbox ``bash``, in the background."""
    sandbox = provider.get(provider.acquire(arena.paths))
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["result"] = sandbox.execute_command(
            "exec python3 /mnt/user-data/uploads/flipper.py /mnt/user-data/uploads/flip.json "
            f"{seconds}", timeout=seconds + 30)

    def run_and_keep_errors() -> None:
        try:
            run()
        except BaseException as error:  # said by the assertion below, not lost in a thread
            outcome["error"] = repr(error)

    thread = threading.Thread(target=run_and_keep_errors, daemon=True)
    started = time.monotonic()
    thread.start()
    # Wait until the flipper runs: its first flip makes `r` a symlink. The first command
    # of a thread may wait for its namespace (at most 30 s for a source that is starting,
    # 30 s more for the spare it makes): give it all of that on a loaded machine.
    flipping = False
    while not flipping and time.monotonic() - started < 90 and thread.is_alive():
        flipping = os.path.islink(arena.paths.workspace / "r")
        if not flipping:
            threading.Event().wait(0.05)
    assert flipping, (
        f"the flipper did not start in {time.monotonic() - started:.1f} s "
        f"(command thread alive: {thread.is_alive()}): {outcome}")
    return thread, outcome


def stop_flipper(arena: Arena) -> None:
    """Put ``.stop`` in the workspace the way the file tools write (`confined`): under
    bwrap through the namespace's overlay, so the flipper, which has looked for it all
    along, sees it at once."""
    fd = confined.place(arena.paths.mapper, f"{WS}/.stop").open(os.O_WRONLY | os.O_CREAT)
    os.close(fd)


def flips_so_far(arena: Arena) -> int:
    """How many rounds of flips the flipper has finished (it writes `.flips`)."""
    try:
        return int((arena.paths.workspace / ".flips").read_text() or 0)
    except (OSError, ValueError):
        return 0


def race(provider_name: str, tmp_path: Path, count: int) -> None:
    if provider_name == "bwrap":
        needs_bwrap()
    arena = Arena(tmp_path)
    provider = load_sandbox_provider(provider_name, default_timeout=120)
    assert isinstance(provider, HostSandboxProvider)
    tools = {tool.name: tool for tool in build_tools(provider, arena.layout, SandboxConfig())}
    runtime = SimpleNamespace(context=RunContext(thread_id="t1", user_id="mallory"), state={},
                              tool_call_id="call_race")
    try:
        flipper, outcome = start_flipper(provider, arena, seconds=300)

        def one(call: tuple[str, dict[str, Any]]) -> tuple[str, str, str]:
            name, args = call
            content, status = text_of(tools[name].func(runtime=runtime, **args))
            return name, content, status

        # On a loaded machine the flipper may get little CPU: more calls follow (a fifth
        # as many each time, at most five times) until it has flipped during them.
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(one, calls(count)))
            for _ in range(5):
                if flips_so_far(arena) >= 5:
                    break
                results += pool.map(one, calls(max(count // 5, 1)))
        stop_flipper(arena)
        flipper.join(60)
        flips = int(outcome["result"].stdout.strip() or 0)
    finally:
        stop_flipper(arena)
        provider.shutdown()

    escapes = [(name, content[:200]) for name, content, _ in results
               if any(mark in content for mark in MARKS)]
    assert escapes == [], f"{len(escapes)} escapes, e.g. {escapes[:3]}"
    assert "Traceback" not in str(results)
    assert str(arena.home) not in str(results) and str(tmp_path) not in str(results)
    arena.assert_nothing_outside_changed()
    # The race really ran: names flipped throughout, and calls saw both states.
    assert flips >= 5, outcome
    reads = [(content, status) for name, content, status in results if name == "read_file"]
    assert any(status == "success" and "old" in content for content, status in reads)
    assert any("outside" in content for content, status in reads if status == "error")


@pytest.mark.parametrize("provider_name", ["local", "bwrap"])
def test_file_tools_never_escape_under_symlink_and_directory_flips(provider_name, tmp_path):
    race(provider_name, tmp_path, count=5000)


@pytest.mark.slow
@pytest.mark.parametrize("provider_name", ["local", "bwrap"])
def test_file_tools_never_escape_under_a_long_race(provider_name, tmp_path):
    race(provider_name, tmp_path, count=40_000)


@pytest.mark.parametrize("fuse", [True, False])
def test_one_agent_turn_of_parallel_file_calls_never_escapes(tmp_path, fuse):
    """The same race through the real agent: one model turn of 42 parallel file calls."""
    from antler.chain.config import parse_config
    from antler.plugin_api.registry import discover

    arena = Arena(tmp_path)
    provider = load_sandbox_provider("local", default_timeout=120)
    assert isinstance(provider, HostSandboxProvider)
    turn = {"tool_calls": [{"name": name, "args": args, "id": f"call_{index}"}
                           for index, (name, args) in enumerate(calls(42))]}
    agent, _ = make_agent(arena.home, [turn, "done"], services={SANDBOX_PROVIDER: provider},
                          config=parse_config("read_before_write: {enabled: false}", discover()),
                          fuse=fuse)
    try:
        flipper, _ = start_flipper(provider, arena, seconds=120)
        with agent:
            state = agent.invoke("race", thread_id="t1", user_id="mallory")
        stop_flipper(arena)
        flipper.join(60)
    finally:
        stop_flipper(arena)
    # (The run's end stops the flipper with the rest of the thread's commands.)
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 42
    shown = str([m.content for m in results])
    assert not [mark for mark in MARKS if mark in shown]
    assert str(arena.home) not in shown
    assert any(m.status == "success" for m in results)
    arena.assert_nothing_outside_changed()
