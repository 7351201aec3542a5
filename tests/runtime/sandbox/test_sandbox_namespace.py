"""The bwrap provider's per-thread namespace: shared by a thread's commands, never by two
threads, and nothing in it outlives a command, a run or the sandbox; nothing inside names a
host path.

Run against real bubblewrap (skipped without it, failed under ``CI=true``), as the
harness's user: root here, the case where a sandbox uid mapped onto root matters.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from antler.plugin_api.paths import PathLayout
from antler.plugin_api.sandbox import CommandInterrupted, CommandResult
from antler.runtime.sandbox.bwrap import BwrapSandbox, BwrapSandboxProvider
from antler.runtime.sandbox.namespace import Namespace
from tests.runtime.sandbox.test_sandbox_bwrap import needs_bwrap, orphans_left, settle
from tests.runtime.test_reliability_processes import running

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="bubblewrap and /proc are Linux only")


@pytest.fixture
def layout(tmp_path: Path) -> PathLayout:
    skill = tmp_path / "skills" / "public" / "data-report"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: data-report\n---\n", encoding="utf-8")
    return PathLayout(tmp_path / "home", skill_roots=(tmp_path / "skills",))


@pytest.fixture
def provider() -> Iterator[BwrapSandboxProvider]:
    needs_bwrap()
    built = BwrapSandboxProvider(default_timeout=20, max_output_bytes=1 << 20)
    yield built
    built.shutdown()


def sandbox_for(provider: BwrapSandboxProvider, layout: PathLayout, thread: str = "t1",
                user: str = "u") -> BwrapSandbox:
    sandbox = provider.get(provider.acquire(layout.thread(user, thread)))
    assert isinstance(sandbox, BwrapSandbox)
    return sandbox


def init_pid(sandbox: BwrapSandbox) -> int | None:
    namespace = sandbox._namespace
    return namespace.init_pid if namespace is not None and namespace.alive else None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def started_at(pid: int) -> int | None:
    """The start time of process `pid`, zombie or not (None once reaped), to tell a reused
    pid from the process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[19])
    except OSError:
        return None


# -- one namespace per thread -----------------------------------------------------------------

def test_a_threads_commands_share_one_namespace_and_threads_never_do(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    mine, other = sandbox_for(provider, layout, "t1"), sandbox_for(provider, layout, "t2")
    first = mine.execute_command("readlink /proc/self/ns/pid; echo kept > /tmp/mark")
    second = mine.execute_command("readlink /proc/self/ns/pid; cat /tmp/mark")
    theirs = other.execute_command("readlink /proc/self/ns/pid; cat /tmp/mark")
    assert first.ok and second.ok, (first, second)
    assert first.stdout.split()[0] == second.stdout.split()[0]  # one PID namespace
    assert second.stdout.split()[1] == "kept"  # and one /tmp
    assert theirs.stdout.split()[0] != first.stdout.split()[0]
    assert "No such file" in theirs.stderr
    assert init_pid(mine) != init_pid(other)


def test_parallel_commands_of_a_thread_each_get_their_own_output_and_exit_code(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    sandbox = sandbox_for(provider, layout)
    results: dict[int, CommandResult] = {}

    def run(index: int) -> None:
        results[index] = sandbox.execute_command(
            f"sleep 0.$((RANDOM % 3)); head -c {1000 * index} /dev/zero | tr '\\0' {index % 10};"
            f" echo err{index} >&2; exit {index}")

    workers = [threading.Thread(target=run, args=(index,)) for index in range(1, 17)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert sorted(results) == list(range(1, 17))
    for index, result in results.items():
        assert result.stdout == str(index % 10) * (1000 * index), index
        assert (result.stderr, result.exit_code) == (f"err{index}\n", index)


def test_commands_start_with_every_signal_at_its_default_as_under_the_local_provider(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    # The init is a Python process, which ignores SIGPIPE and SIGXFSZ: a command must not
    # inherit that, nor a blocked signal.
    sandbox = sandbox_for(provider, layout)
    piped = sandbox.execute_command("yes | head -1; tail -c +2 /dev/zero | head -c 1 >/dev/null")
    assert (piped.exit_code, piped.stdout, piped.stderr) == (0, "y\n", ""), piped
    status = sandbox.execute_command("grep -E '^Sig(Ign|Blk):' /proc/self/status; trap -p")
    assert status.ok, status
    blocked, ignored = (int(line.split()[1], 16) for line in status.stdout.splitlines())
    assert blocked == 0, status.stdout
    # glibc's posix_spawn leaves its two reserved signals (32, 33: never a command's own,
    # and glibc takes them back at every start) ignored; nothing else may be.
    assert ignored & ~(0b11 << 31) == 0, status.stdout  # and `trap -p` printed no line


def test_a_write_past_the_file_size_limit_kills_the_writer(layout: PathLayout) -> None:
    needs_bwrap()
    provider = BwrapSandboxProvider(file_size_mb=1)
    try:
        result = sandbox_for(provider, layout).execute_command(
            "head -c 2000000 /dev/zero > big; echo $?; stat -c %s big")
        # Killed by SIGXFSZ (128 + 25) at the limit, as a plain process is; not an error
        # the writer could ignore and go on.
        assert result.stdout.split() == ["153", str(1 << 20)], result
    finally:
        provider.shutdown()


def test_the_namespaces_pid_1_is_the_init_and_commands_run_as_the_sandbox_user(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    result = sandbox_for(provider, layout).execute_command(
        "tr '\\0' ' ' < /proc/1/cmdline; echo; id -un; ps -o sid= -p $$; echo $$")
    cmdline, user, session, pid = result.stdout.splitlines()
    assert cmdline.split()[1:3] == ["-I", "-S"] and "posix" in cmdline
    assert user == "sandbox"
    assert session.strip() == pid  # a session of its own


def test_commands_cannot_take_the_init_over(provider: BwrapSandboxProvider,
                                           layout: PathLayout) -> None:
    # Same user, but the init is not dumpable: no ptrace, no /proc/1/mem, no environ.
    result = sandbox_for(provider, layout).execute_command(
        "head -c1 /proc/1/mem; cat /proc/1/environ; echo done")
    assert result.stdout == "done\n"
    assert result.stderr.count("Permission denied") == 2, result.stderr


def test_nothing_a_command_started_outlives_it(provider: BwrapSandboxProvider,
                                               layout: PathLayout) -> None:
    sandbox = sandbox_for(provider, layout)
    marker = f"{300 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 1000}"
    left = sandbox.execute_command(f"m={marker}; (setsid sleep $m &); (sleep $m &); "
                                   "(setsid env -i sleep $m >/dev/null 2>&1 &); echo started")
    assert left.stdout == "started\n"
    assert not running(f"sleep {marker}")  # gone by the time the call returns
    after = sandbox.execute_command("ps -e -o pid=,args=")
    pids = [line.split()[0] for line in after.stdout.splitlines()]
    assert len(pids) == 2 and pids[0] == "1", after.stdout  # the init, and ps itself
    assert "sleep" not in after.stdout


def test_the_end_of_a_run_spares_a_parallel_command_and_kills_the_rest(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    sandbox = sandbox_for(provider, layout)
    marker = f"{300 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 1000}"
    results: list[CommandResult] = []
    long = threading.Thread(target=lambda: results.append(sandbox.execute_command(
        f"m={marker}; (setsid sleep ${{m}}1 &); sleep 1.5; echo finished")))
    long.start()
    assert settle(f"sleep {marker}1", present=True)
    sandbox.end_run()  # the long command still runs: only its setsid escapee dies
    assert settle(f"sleep {marker}1", present=False)
    long.join(timeout=20)
    assert results and results[0].stdout == "finished\n", results


def test_a_timeout_kills_the_command_in_the_namespace_and_the_next_runs(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    sandbox = sandbox_for(provider, layout)
    started = time.monotonic()
    # Time enough for the shell to say "before" on a loaded machine.
    result = sandbox.execute_command("echo before; exec >&- 2>&-; sleep 30", timeout=2)
    assert result.timed_out and result.stdout == "before\n"
    assert time.monotonic() - started < 10  # a hang guard, not a speed check
    assert sandbox.execute_command("echo again").stdout == "again\n"


def test_interrupt_stops_a_running_command(provider: BwrapSandboxProvider,
                                           layout: PathLayout) -> None:
    sandbox = sandbox_for(provider, layout)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            sandbox.execute_command("sleep 30")
        except CommandInterrupted as error:
            raised.append(error)

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + 30
    while not sandbox._running:  # interrupt stops commands that run, not one yet to start
        assert worker.is_alive() and time.monotonic() < deadline, raised
        time.sleep(0.01)
    sandbox.interrupt()
    worker.join(timeout=10)
    assert not worker.is_alive() and raised


def test_the_namespace_ends_after_its_idle_time_and_comes_back(layout: PathLayout) -> None:
    needs_bwrap()
    provider = BwrapSandboxProvider(idle_seconds=0.3)
    try:
        sandbox = sandbox_for(provider, layout)
        assert sandbox.execute_command("echo x > /tmp/mark").ok
        pid = init_pid(sandbox)
        assert pid is not None and alive(pid)
        sandbox.end_run()
        for _ in range(100):
            if not alive(pid):
                break
            time.sleep(0.05)
        assert not alive(pid)
        again = sandbox.execute_command("cat /tmp/mark 2>/dev/null || echo fresh")
        assert again.stdout == "fresh\n" and init_pid(sandbox) not in (None, pid)
    finally:
        provider.shutdown()


def test_acquiring_starts_the_namespace_ahead_and_an_unused_one_ends(
        layout: PathLayout) -> None:
    needs_bwrap()
    provider = BwrapSandboxProvider(idle_seconds=1.0)
    try:
        sandbox = sandbox_for(provider, layout)  # acquire, as `lazy: false` does at run start
        for _ in range(400):
            if init_pid(sandbox) is not None and not sandbox._preparing:
                break
            time.sleep(0.025)
        pid = init_pid(sandbox)
        assert pid is not None and alive(pid)  # started, no command asked for it
        for _ in range(200):
            if not alive(pid):
                break
            time.sleep(0.05)
        assert not alive(pid)  # unused, it ended after its idle time
        assert sandbox.execute_command("echo later").stdout == "later\n"
    finally:
        provider.shutdown()


def test_a_killed_init_is_replaced_on_the_next_command(provider: BwrapSandboxProvider,
                                                       layout: PathLayout) -> None:
    sandbox = sandbox_for(provider, layout)
    assert sandbox.execute_command("true").ok
    pid = init_pid(sandbox)
    assert pid is not None
    os.kill(pid, 9)
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.05)
    assert sandbox.execute_command("echo back").stdout == "back\n"
    assert init_pid(sandbox) != pid


def test_an_init_that_does_not_answer_a_kill_ends_with_its_namespace(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    sandbox = sandbox_for(provider, layout)
    assert sandbox.execute_command("true").ok
    pid = init_pid(sandbox)
    assert pid is not None
    born = started_at(pid)
    stopper = threading.Timer(0.2, os.kill, (pid, signal.SIGSTOP))  # it hears nothing now
    stopper.start()
    started = time.monotonic()
    result = sandbox.execute_command("sleep 60", timeout=1)
    assert result.timed_out
    assert time.monotonic() - started < 30  # the grace, then the namespace is ended
    # Gone and reaped by the time the call returns: not dying still, nor a zombie.
    assert born is not None and started_at(pid) != born, pid  # None, or a reused pid
    assert sandbox.execute_command("echo back").stdout == "back\n"


def test_removed_directories_come_back_in_a_new_namespace(provider: BwrapSandboxProvider,
                                                          layout: PathLayout) -> None:
    import shutil

    sandbox = sandbox_for(provider, layout)
    assert sandbox.execute_command("echo one > note").ok
    shutil.rmtree(sandbox.thread_paths.user_data)
    assert sandbox.execute_command("echo two > note").ok
    assert (sandbox.thread_paths.workspace / "note").read_text() == "two\n"


def test_closing_leaves_no_process_and_nothing_for_init_to_reap() -> None:
    needs_bwrap()
    code = """
import tempfile
from antler.plugin_api.paths import PathLayout
from antler.runtime.sandbox.bwrap import BwrapSandboxProvider
provider = BwrapSandboxProvider()
sandbox = provider.get(provider.acquire(PathLayout(tempfile.mkdtemp()).thread("u", "t")))
assert sandbox.execute_command("(setsid sleep 1000 &); sleep 0.1; echo ok").ok
sandbox.end_run()
provider.shutdown()
"""
    assert orphans_left(code) == []


# -- nothing inside names a host path ------------------------------------------------------

_READ_INSIDE = (
    # base64, so the host-to-virtual rewriting of the output cannot hide a leak
    "for f in /proc/mounts /proc/self/environ /proc/self/cgroup /proc/1/cmdline /proc/1/environ "
    "/proc/1/status "
    "/proc/1/maps /proc/1/mountinfo /proc/self/mountinfo /etc/passwd /etc/group; do "
    "  echo \"$f $(base64 -w0 < $f 2>/dev/null)\"; done; "
    "for p in /proc/[0-9]*; do echo \"$p/cmdline $(base64 -w0 < $p/cmdline)\"; done; "
    "echo \"links $(ls -l /proc/1/fd/ /proc/1/cwd /proc/1/root /proc/1/exe | base64 -w0)\"; "
    "echo \"env $(env | base64 -w0)\"")


def read_inside(sandbox: BwrapSandbox) -> dict[str, str]:
    result = sandbox.execute_command(_READ_INSIDE)
    assert result.ok, result.stderr
    found = {}
    for line in result.stdout.splitlines():
        name, _, encoded = line.partition(" ")
        found[name] = base64.b64decode(encoded).decode("utf-8", "replace")
    return found


def host_paths(sandbox: BwrapSandbox, tmp_path: Path) -> list[str]:
    paths = sandbox.thread_paths
    return [str(tmp_path), str(paths.user_data), str(paths.user_data.parent),
            "/users/u/", "/threads/t1/", "antler-bwrap", f"antler-{os.getpid()}",
            f"{os.getpid()}-"]  # the harness's pid: in the cgroup's name, the sweep token


def test_no_file_read_inside_names_a_host_path(provider: BwrapSandboxProvider,
                                               layout: PathLayout, tmp_path: Path) -> None:
    sandbox = sandbox_for(provider, layout)
    seen = read_inside(sandbox)
    assert {"/proc/mounts", "/proc/self/cgroup", "/proc/1/maps", "links", "env"} <= set(seen)
    forbidden = host_paths(sandbox, tmp_path)
    for name, text in seen.items():
        leaked = [path for path in forbidden if path in text]
        assert not leaked, (name, leaked, text)


def test_mountinfo_names_no_host_path_at_all(provider: BwrapSandboxProvider,
                                             layout: PathLayout, tmp_path: Path) -> None:
    """The thread's directories and the skills are mounted from overlays, whose root the
    kernel prints as ``/`` and whose layers are named relative to a directory in the
    spare's view (bind mounts would print the base directory's path, the user and the
    thread); the mount table of the init and of a command, and /proc/mounts, alike."""
    sandbox = sandbox_for(provider, layout)
    seen = read_inside(sandbox)
    forbidden = host_paths(sandbox, tmp_path)
    for name in ("/proc/self/mountinfo", "/proc/1/mountinfo", "/proc/mounts"):
        leaked = [path for path in forbidden if path in seen[name]]
        assert not leaked, (name, leaked, seen[name])
    # Not by luck: the thread's and the skill's mounts are there, overlays of their folders.
    mounted = {line.split()[4]: line for line in seen["/proc/self/mountinfo"].splitlines()}
    for target, root in (("/mnt/user-data/workspace", "/workspace"),
                         ("/mnt/user-data/uploads", "/uploads"),
                         ("/mnt/user-data/outputs", "/outputs"),
                         ("/mnt/skills/public/data-report", "/public/data-report")):
        fields = mounted[target].split()
        assert fields[3] == root and fields[fields.index("-") + 1] == "overlay", mounted[target]
    # The overlay's work directory and lower layer sit beside user-data: nothing shows them.
    listed = sandbox.execute_command("ls -a /mnt/user-data; ls -a /mnt")
    assert listed.stdout.split() == [".", "..", "outputs", "uploads", "workspace",
                                     ".", "..", "skills", "user-data"], listed


def test_an_overlay_cannot_be_steered_by_its_own_attributes(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """The ``user.overlay.*`` attributes a command sets through the overlay (redirects,
    opaque directories, metadata-only copies) are stored escaped: no later overlay of the
    thread's directory reads them as its own."""
    sandbox = sandbox_for(provider, layout)
    planted = sandbox.execute_command(
        "mkdir d; echo keep > d/f; python3 -c \"import os\n"
        "for path in ('d', 'd/f'):\n for name in ('redirect', 'opaque', 'metacopy', 'origin'):"
        "\n  os.setxattr(path, 'user.overlay.' + name, b'/x')\"")
    assert planted.ok, planted
    namespace = sandbox._namespace
    assert namespace is not None
    namespace.close()  # the next command gets a new namespace, with a new overlay
    result = sandbox.execute_command("cat d/f; ls d")
    assert (result.stdout, result.exit_code) == ("keep\nf\n", 0), result
    assert init_pid(sandbox) != namespace.init_pid
    workspace = layout.thread("u", "t1").workspace
    for path in (workspace / "d", workspace / "d" / "f"):
        names = os.listxattr(path)
        assert len(names) == 4 and all(name.startswith("user.overlay.overlay.")
                                       for name in names), names


# -- the file tools and bash see each other's changes ----------------------------------------

WS = "/mnt/user-data/workspace"


def test_bash_sees_a_file_the_file_tools_write_after_it_looked_for_it_in_vain(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """The overlay caches a failed lookup: a write beside it, to the host directory, would
    stay unseen. The file tools write through the overlay while the namespace lives."""
    sandbox = sandbox_for(provider, layout)
    looked = sandbox.execute_command("cat note.txt sub/deep.txt; ls sub; test -e note.txt"
                                     " || echo absent")
    assert "absent" in looked.stdout, looked
    sandbox.write_file(f"{WS}/note.txt", "from the tool\n")
    sandbox.write_file(f"{WS}/sub/deep.txt", "deeper\n")  # its folder made on the way
    result = sandbox.execute_command("cat note.txt sub/deep.txt; ls sub")
    assert (result.stdout, result.exit_code) == ("from the tool\ndeeper\ndeep.txt\n", 0), result
    sandbox.write_file(f"{WS}/note.txt", "appended\n", append=True)
    assert sandbox.execute_command("cat note.txt").stdout == "from the tool\nappended\n"
    # And the other way: what bash changes, the file tools see.
    assert sandbox.execute_command("rm note.txt; echo made > made.txt; mkdir -p a/b;"
                                   " echo deep > a/b/c.txt").ok
    with pytest.raises(FileNotFoundError):
        sandbox.read_file(f"{WS}/note.txt")
    assert sandbox.read_file(f"{WS}/made.txt") == "made\n"
    assert sandbox.read_file(f"{WS}/a/b/c.txt") == "deep\n"
    assert "a/b/c.txt" in "\n".join(sandbox.list_dir(WS, max_depth=3))
    # The host directory holds the same files (the overlay's upper layer is the thread's).
    workspace = layout.thread("u", "t1").workspace
    assert sorted(path.name for path in workspace.iterdir()) == ["a", "made.txt", "sub"]


def test_the_file_tools_see_bashs_changes_through_the_agents_tools(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """The same, through the sandbox tools a model calls (`str_replace` included)."""
    from types import SimpleNamespace

    from antler.contracts.runcontext import RunContext
    from antler.plugins.sandbox.config import SandboxConfig
    from antler.plugins.sandbox.tools import build_tools

    tools = {tool.name: tool for tool in build_tools(provider, layout, SandboxConfig())}
    runtime = SimpleNamespace(context=RunContext(thread_id="t1", user_id="u"), state={},
                              tool_call_id="call_1")

    def call(name: str, **args: object) -> str:
        result = tools[name].func(runtime=runtime, **args)
        message = result.update["messages"][0] if hasattr(result, "update") else result
        return str(message.content)

    assert "absent" in call("bash", command="test -e plan.md || echo absent")
    call("write_file", path="plan.md", content="step one\n")
    assert call("bash", command="cat plan.md") == "step one"
    call("str_replace", path="plan.md", old="one", new="two")
    assert call("bash", command="cat plan.md; rm plan.md") == "step two"
    assert "not found" in call("read_file", path="plan.md").lower() or \
        "no such file" in call("read_file", path="plan.md").lower()


def test_an_upload_staged_while_the_namespace_lives_is_seen_by_bash(
        provider: BwrapSandboxProvider, layout: PathLayout, tmp_path: Path) -> None:
    from antler.plugin_api.uploads import stage_upload

    sandbox = sandbox_for(provider, layout)
    looked = sandbox.execute_command("cat /mnt/user-data/uploads/data.csv || echo absent")
    assert "absent" in looked.stdout, looked
    source = tmp_path / "data.csv"
    source.write_text("a,b\n1,2\n", encoding="utf-8")
    stage_upload(sandbox.thread_paths, source)
    result = sandbox.execute_command("cat /mnt/user-data/uploads/data.csv")
    assert (result.stdout, result.exit_code) == ("a,b\n1,2\n", 0), result


def test_the_overlay_is_reached_only_while_its_namespace_lives(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    from antler.plugin_api import confined

    sandbox = sandbox_for(provider, layout)
    assert sandbox.execute_command("echo one > f").ok
    host = str(sandbox.thread_paths.user_data)
    descriptor = confined._mounts[host]
    namespace = sandbox._namespace
    assert namespace is not None
    namespace.close()  # as after the idle time
    assert host not in confined._mounts
    with pytest.raises(OSError):
        os.fstat(descriptor)  # closed with the namespace
    # The file tools work on the host directory again, and see what bash left.
    assert sandbox.read_file(f"{WS}/f") == "one\n"
    # Nothing of the overlay's work is left beside user-data: the next overlay of the
    # thread would refuse a volatile one's leftovers.
    assert os.listdir(sandbox.thread_paths.user_data.parent / ".overlay") == []
    assert sandbox.execute_command("cat f").stdout == "one\n"  # a new overlay mounts
    sandbox.close()
    assert host not in confined._mounts


def test_closes_from_several_threads_take_turns(provider: BwrapSandboxProvider,
                                               layout: PathLayout) -> None:
    """An adopted namespace closed from four threads at once (an idle time's end, a killed
    command's, the caller's): none fails, and each returns once the init is gone."""
    for thread in ("c1", "c2", "c3"):
        sandbox = sandbox_for(provider, layout, thread)
        assert sandbox.execute_command("true").ok
        namespace = sandbox._namespace
        assert namespace is not None and namespace.init_pid is not None
        pid = namespace.init_pid
        failed: list[BaseException] = []
        left: list[bool] = []
        start = threading.Barrier(4)

        def close(namespace=namespace, pid=pid, failed=failed, left=left,
                  start=start) -> None:
            start.wait()
            try:
                namespace.close(grace=1.0)
            except BaseException as error:  # the test reports any
                failed.append(error)
            left.append(alive(pid))

        closers = [threading.Thread(target=close) for _ in range(4)]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join(60)
        assert not failed and left == [False] * 4, (failed, left)
        sandbox.close()


def test_an_overlays_leftovers_are_removed_whatever_they_hold(tmp_path: Path) -> None:
    """What an unmounted overlay left in its work directory goes, the usual entries one by
    one, and anything else (folders without permissions included) by a walk."""
    from antler.runtime.sandbox.bwrap import _remove_overlay_work

    usual, unusual = tmp_path / "usual", tmp_path / "unusual"
    for work in (usual, unusual):
        (work / "incompat" / "volatile").mkdir(parents=True)
        (work / "incompat" / "volatile" / "dirty").write_text("")
    (unusual / "index" / "deep").mkdir(parents=True)
    (unusual / "index" / "deep" / "file").write_text("x")
    for folder in (unusual / "index" / "deep", unusual / "index", usual / "incompat",
                   unusual / "incompat"):
        folder.chmod(0)
    for work in (usual, unusual, tmp_path / "absent"):
        _remove_overlay_work(work)
        assert not work.exists()


def test_where_no_overlay_can_be_mounted_the_thread_directories_are_bind_mounts(
        provider: BwrapSandboxProvider, layout: PathLayout, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Say so once in the log, and go on with bind mounts: commands and file tools work,
    and see each other's changes (bind mounts cache nothing)."""
    from antler.plugin_api import confined
    from antler.runtime.sandbox import bwrap

    original = BwrapSandbox._overlay_layers

    def refused_layer(self: BwrapSandbox, users: Path) -> tuple[str, str, str, str] | None:
        found = original(self, users)
        return None if found is None else (*found[:3], "no-such-layer")

    monkeypatch.setattr(BwrapSandbox, "_overlay_layers", refused_layer)
    with caplog.at_level("WARNING", logger=bwrap.__name__):
        first = sandbox_for(provider, layout, "t1")
        assert first.execute_command("test -e late || echo absent").stdout == "absent\n"
        second = sandbox_for(provider, layout, "t2")
        assert second.execute_command("true").ok
    said = [record.getMessage() for record in caplog.records if "overlay" in record.getMessage()]
    assert len(said) == 1 and "bind mounts from now on" in said[0], said
    assert not provider._settings.overlays.enabled
    assert str(first.thread_paths.user_data) not in confined._mounts
    first.write_file(f"{WS}/late", "seen\n")
    assert first.execute_command("cat late").stdout == "seen\n"
    mountinfo = read_inside(first)["/proc/self/mountinfo"]
    workspace = next(line for line in mountinfo.splitlines()
                     if line.split()[4] == "/mnt/user-data/workspace")
    assert workspace.split()[3].endswith("/users/u/threads/t1/user-data/workspace"), workspace


# -- spare namespaces -------------------------------------------------------------------------

def spare_key(layout: PathLayout) -> tuple[Path, tuple[Path, ...]]:
    return (layout.base / "users", layout.skill_roots)


def wait_for_spare(provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    spares = provider._settings.spares
    assert spares is not None
    for _ in range(800):
        if spares.ready(spare_key(layout)):
            return
        time.sleep(0.025)
    raise AssertionError("no spare namespace started")


def first_thread_and_its_source(provider: BwrapSandboxProvider, layout: PathLayout,
                                command: str = "true") -> tuple[BwrapSandbox, Namespace]:
    """Thread t1 after one command (its acquisition started the source of spares) and
    that source, once its spare for the next thread is ready."""
    first = sandbox_for(provider, layout, "t1")
    assert first.execute_command(command).ok
    first.end_run()
    wait_for_spare(provider, layout)
    spares = provider._settings.spares
    assert spares is not None
    source = spares._slots[spare_key(layout)].namespace
    assert source is not None and source.init_pid is not None
    return first, source


def host_parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[1])


def test_a_new_thread_adopts_a_spare_made_by_the_source_started_before_it(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    first, source = first_thread_and_its_source(provider, layout)
    spares = provider._settings.spares
    assert spares is not None and source.alive and source.spare
    second = sandbox_for(provider, layout, "t2")
    result = second.execute_command("echo mine > note; cat note; ls /mnt/user-data")
    assert (result.stdout, result.exit_code) == ("mine\noutputs\nuploads\nworkspace\n", 0), \
        result
    namespace = second._namespace
    assert namespace is not None and not namespace.spare and namespace.init_pid is not None
    # Made by the same source (no new bubblewrap): its init is the source init's child.
    assert spares._slots[spare_key(layout)].namespace is source
    assert host_parent(namespace.init_pid) == source.init_pid
    assert namespace.init_pid != init_pid(first)
    assert (layout.thread("u", "t2").workspace / "note").read_text() == "mine\n"
    assert not (layout.thread("u", "t1").workspace / "note").exists()


def test_a_spare_serves_with_descriptors_of_its_own_none_of_its_sources(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """A spare's init serves with its copy of its source's loop: its control socket and
    its SIGCHLD pipe are its own, and it holds no descriptor of its source's (the
    source's control socket would let a command's init ask for spares; a shared pipe
    would take one init's wake-ups from another). Its commands' exits still arrive."""
    _first, source = first_thread_and_its_source(provider, layout)
    second = sandbox_for(provider, layout, "t2")
    assert second.execute_command("sleep 0.1; echo done").stdout == "done\n"
    pid = init_pid(second)
    assert pid is not None and source.init_pid is not None
    assert host_parent(pid) == source.init_pid

    def held(owner: int) -> set[str]:
        """What `owner` holds beyond its standard descriptors (the spare's are its source's:
        /dev/null and bubblewrap's stderr pipe, which the harness closed once ready). The
        source may be making the next spare meanwhile: a descriptor it closes between the
        listing and the read is skipped."""
        links = set()
        for fd in os.listdir(f"/proc/{owner}/fd"):
            if int(fd) > 2:
                with contextlib.suppress(FileNotFoundError):
                    links.add(os.readlink(f"/proc/{owner}/fd/{fd}"))
        return links

    mine, theirs = held(pid), held(source.init_pid)
    assert any(link.startswith("pipe:") for link in mine), mine  # its own wake-up pipe
    assert any(link.startswith("socket:") for link in mine), mine  # its control socket
    shared = {link for link in mine & theirs if link.startswith(("pipe:", "socket:"))}
    assert not shared, (mine, theirs)


def test_the_sources_init_binds_its_functions_at_start_and_no_command_sees_that(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """A source's init resolves every C function when it starts (``LD_BIND_NOW``), so
    that its spares, copies of it, resolve none again; the setting is the init's own: a
    command's environment is the harness's, and holds neither it nor anything else of
    the init's."""
    _first, source = first_thread_and_its_source(provider, layout)
    with open(f"/proc/{source.init_pid}/environ", "rb") as environ:
        assert b"LD_BIND_NOW=1" in environ.read().split(b"\0")
    second = sandbox_for(provider, layout, "t2")
    seen = second.execute_command("env")
    assert seen.ok and "LD_BIND_NOW" not in seen.stdout and "ANTLER" not in seen.stdout, seen
    namespace = second._namespace
    assert namespace is not None and namespace.init_pid is not None
    assert host_parent(namespace.init_pid) == source.init_pid  # a spare, not a whole start


def test_spares_of_one_source_share_no_tmp_dev_processes_or_network(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    first = sandbox_for(provider, layout, "t1")
    second = sandbox_for(provider, layout, "t2")
    # Names made by the shell, so that the second thread's own command line has none of them.
    assert first.execute_command("for d in /tmp /dev/shm; do echo x > $d/m$((40+2)); done;"
                                 " mkdir /tmp/d$((40+2))").ok
    ended = threading.Event()
    workspace = layout.thread("u", "t1").workspace

    def hold() -> None:  # a running command of the first thread, listening on its loopback
        first.execute_command("python3 -c 'import os,socket,time; s=socket.socket();"
                              " s.bind((\"127.0.0.1\", 47000+123)); s.listen();"
                              " open(\"listening\", \"w\").close()\n"
                              "while not os.path.exists(\"release\"): time.sleep(0.02)"
                              "  # held 42'", timeout=60)
        ended.set()

    threading.Thread(target=hold, daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while not (workspace / "listening").exists():  # until the listener is up
            assert not ended.is_set() and time.monotonic() < deadline
            time.sleep(0.02)
        mine = first.execute_command("grep -l 'held 4[2]' /proc/[0-9]*/cmdline")
        assert mine.stdout.endswith("/cmdline\n"), mine  # so a miss below means something
        seen = second.execute_command(
            "ls -A /tmp /dev/shm /dev/pts; grep -l 'held 4[2]' /proc/[0-9]*/cmdline;"
            " python3 -c 'import socket; s=socket.socket(); print(\"connect\","
            " s.connect_ex((\"127.0.0.1\", 47000+123)))'")
        assert not ended.is_set()  # the first thread's command was running meanwhile
    finally:  # through the sandbox: its overlay would not see a file the host adds
        first.execute_command("touch release")
    spares = provider._settings.spares
    assert spares is not None
    source = spares._slots[spare_key(layout)].namespace
    namespaces = [first._namespace, second._namespace]
    # Both came from the one source, and neither sees what the other has.
    assert source is not None and source.init_pid is not None
    assert all(n is not None and n.init_pid is not None
               and host_parent(n.init_pid) == source.init_pid for n in namespaces)
    lines = seen.stdout.splitlines()
    assert "m42" not in lines and "d42" not in lines, seen
    assert not any(line.endswith("/cmdline") for line in lines), seen
    assert "ptmx" in lines and "connect 111" in lines, seen  # its own devpts; refused
    assert ended.wait(60)


def mounts_of(pid: int) -> list[tuple[str, str]]:
    """Process `pid`'s mounts as ``(mount point, optional fields)``, from its mountinfo
    (read from the host: root may)."""
    found = []
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split(" - ")[0].split()
        found.append((fields[4], " ".join(fields[6:])))
    return found


def test_no_mount_of_a_spare_reaches_its_source_another_spare_or_the_host(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """Every mount of a source and of its spares (adopted or made ahead) is private: no
    propagation tag in their mountinfo, so the thread directories an adoption mounts and
    the source's ``/tmp`` it detaches stay in that spare (the source makes its mounts
    private once, before its spares copy them; a spare does not walk its tree again)."""
    first = sandbox_for(provider, layout, "t1")
    second = sandbox_for(provider, layout, "t2")
    assert first.execute_command("true").ok and second.execute_command("true").ok
    first.end_run()
    wait_for_spare(provider, layout)  # one made ahead, not yet adopted
    spares = provider._settings.spares
    assert spares is not None
    slot = spares._slots[spare_key(layout)]
    assert slot.namespace is not None and slot.namespace.init_pid is not None
    assert slot.next is not None and slot.next.namespace is not None
    source, ahead = slot.namespace.init_pid, slot.next.namespace.init_pid
    adopted = [init_pid(first), init_pid(second)]
    assert None not in adopted and ahead is not None
    for pid in (source, ahead, *adopted):
        assert pid is not None
        tagged = [(point, tags) for point, tags in mounts_of(pid)
                  if "shared:" in tags or "master:" in tags or "propagate_from:" in tags]
        assert not tagged, (pid, tagged)
    workspace = "/mnt/user-data/workspace"
    # The source and the spare made ahead keep their view and have no thread's mounts...
    for pid in (source, ahead):
        points = [point for point, _ in mounts_of(pid)]
        assert workspace not in points and "/tmp/.antler-view" in points, points
    # ...and each adopted spare has its own, once, and no view.
    for pid in adopted:
        assert pid is not None
        points = [point for point, _ in mounts_of(pid)]
        assert points.count(workspace) == 1 and "/tmp/.antler-view" not in points, points


_PROBE = """
import ctypes, errno, os, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
plant = sys.argv[1] == "plant"
def said(result):
    return f"{result} {ctypes.get_errno() if result == -1 else 0}"
# A SysV segment, a POSIX message queue and a key in the user keyring outlive the
# process that made them; an abstract socket lives while its process listens.
print("shm", said(libc.shmget(0x4242, 4096, 0o1600 if plant else 0)))
queue = libc.mq_open(b"/antler-probe", (os.O_CREAT | os.O_RDWR) if plant else os.O_RDWR,
                     0o600, None)
print("mq", said(queue))
if os.uname().machine == "x86_64":  # add_key and keyctl(KEYCTL_SEARCH) by number
    key = libc.syscall(248, b"user", b"antler-probe", b"secret", 6, -4) if plant else \
        libc.syscall(250, 10, -4, b"user", b"antler-probe", 0)
    print("key", said(key))
probe = socket.socket(socket.AF_UNIX)
if plant:
    probe.bind("\\0antler-probe")
    probe.listen()
    print("planted", flush=True)
    time.sleep(6)
else:
    print("abstract", probe.connect_ex("\\0antler-probe"))
"""


def test_what_one_threads_commands_leave_no_other_thread_sees(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """A SysV shared memory segment, a POSIX message queue, a key in the user keyring and a
    listening abstract Unix socket made by one thread's commands: found by that thread's
    next command, by no command of a second thread whose spare came from the same source
    (their IPC, network and user namespaces are their own)."""
    for thread in ("t1", "t2"):
        paths = layout.thread("u", thread)
        paths.ensure_directories()
        (paths.workspace / "probe.py").write_text(_PROBE)
    first = sandbox_for(provider, layout, "t1")
    second = sandbox_for(provider, layout, "t2")
    planted: list[CommandResult] = []
    ended = threading.Event()

    def hold() -> None:  # a running command of the first thread, listening meanwhile
        planted.append(first.execute_command("python3 probe.py plant", timeout=20))
        ended.set()

    threading.Thread(target=hold, daemon=True).start()
    for _ in range(100):  # until the listener is up
        if "abstract 0" in first.execute_command("python3 probe.py look").stdout:
            break
        time.sleep(0.1)
    # A look that began before the planter had made all of it may miss what it made
    # first: look again, now that its last (the listener) is up.
    mine = first.execute_command("python3 probe.py look")
    theirs = second.execute_command("python3 probe.py look")
    assert not ended.is_set()  # the first thread's command was listening meanwhile
    ended.wait(20)
    assert planted and "planted" in planted[0].stdout, planted
    # The first thread finds all of it (so a miss below means something).
    found = dict(line.split(" ", 1) for line in mine.stdout.splitlines())
    assert found["abstract"] == "0" and found["shm"].endswith(" 0"), mine
    assert found["mq"].endswith(" 0") and found.get("key", "1 0").endswith(" 0"), mine
    seen = dict(line.split(" ", 1) for line in theirs.stdout.splitlines())
    assert seen["shm"] == f"-1 {errno.ENOENT}" and seen["mq"] == f"-1 {errno.ENOENT}", theirs
    assert seen.get("key", f"-1 {errno.ENOKEY}") == f"-1 {errno.ENOKEY}", theirs
    assert seen["abstract"] == str(errno.ECONNREFUSED), theirs


def test_a_killed_source_takes_its_spares_along_and_is_replaced(
        provider: BwrapSandboxProvider, layout: PathLayout,
        caplog: pytest.LogCaptureFixture) -> None:
    first, source = first_thread_and_its_source(provider, layout, "echo one > note")
    spares = provider._settings.spares
    assert spares is not None
    made = init_pid(first)
    os.kill(source.init_pid, signal.SIGKILL)
    for _ in range(200):
        if made is None or not alive(made):
            break
        time.sleep(0.025)
    assert made is not None and not alive(made)  # the thread's namespace ended with it
    with caplog.at_level("WARNING"):
        again = first.execute_command("cat note; id -un")
        second = sandbox_for(provider, layout, "t2").execute_command("pwd")
    assert again.stdout == "one\nsandbox\n" and second.stdout == "/mnt/user-data/workspace\n"
    replaced = spares._slots[spare_key(layout)].namespace
    assert replaced is not None and replaced is not source and replaced.alive
    assert provider._settings.spares is spares and "started whole" not in caplog.text


def test_an_adopted_namespace_shows_no_other_thread_and_no_privilege(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    # Another user's thread, with a file whose name and content a command must not find.
    theirs = layout.thread("someone-else", "their-thread")
    theirs.ensure_directories()
    (theirs.workspace / "their-secret-name").write_text("their-secret-content")
    provider.warm(layout)  # as a run's start does
    wait_for_spare(provider, layout)
    sandbox = sandbox_for(provider, layout, "t2")
    result = sandbox.execute_command(
        "find / -xdev -name 'their-secret*' 2>/dev/null; find /tmp /mnt /etc 2>/dev/null;"
        " grep -c antler-view /proc/self/mountinfo;"
        " grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status; id -u;"
        " grep pids /proc/self/cgroup; cat /proc/1/status | grep -E '^(Uid|CapEff|CapBnd)';"
        " mount -t tmpfs none /tmp 2>&1 || echo mount-refused;"
        " unshare -m mount -t tmpfs none /tmp 2>&1 || echo unshare-refused")
    lines = result.stdout.splitlines()
    assert not any("their-secret" in line or "someone-else" in line for line in lines), lines
    assert "/tmp/.antler-view" not in lines and "0" in lines, lines  # the view is gone
    # The command's five sets, then the init's effective and bounding sets: all empty.
    caps = [line for line in lines if line.startswith("Cap")]
    assert len(caps) == 7 and all(line.split()[1] == "0000000000000000" for line in caps), caps
    assert "1000" in lines  # the sandbox user
    # Its pids cgroup is the root of its own cgroup namespace: no harness pid shows.
    assert any(line.endswith(":pids:/") for line in lines) or "0::/" in lines, lines
    assert not any("antler-" in line for line in lines if "pids" in line), lines
    assert "mount-refused" in lines and "unshare-refused" in lines, result
    # In a user and mount namespace of its own, the thread's mounts stay locked as set.
    nested = sandbox.execute_command(
        "unshare -rm sh -c 'mount -o remount,bind,rw /mnt/user-data/uploads;"
        " touch /mnt/user-data/uploads/x && echo wrote;"
        " umount /mnt/user-data/workspace && echo unmounted'")
    assert "wrote" not in nested.stdout and "unmounted" not in nested.stdout, nested
    assert "Read-only" in nested.stderr, nested


def test_an_adopted_spares_skills_stay_read_only_to_a_write_and_a_remount(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """A skill folder an adopted spare binds from its overlay of the skill root is
    read-only, nosuid and nodev: a command's write is refused, and so is a remount to
    read-write in a user and mount namespace of the command's own; nothing reaches the
    host's skill folder."""
    layout.thread("u", "t1").ensure_directories()  # a base directory with a thread: warm
    provider.warm(layout)
    wait_for_spare(provider, layout)
    sandbox = sandbox_for(provider, layout, "t2")
    skill = "/mnt/skills/public/data-report"
    result = sandbox.execute_command(
        f"grep ' {skill} ' /proc/self/mountinfo; echo x > {skill}/SKILL.md || echo refused;"
        f" unshare -rm sh -c 'mount -o remount,bind,rw {skill} || echo remount-refused;"
        f" touch {skill}/planted && echo planted'")
    namespace, spares = sandbox._namespace, provider._settings.spares
    assert namespace is not None and namespace.init_pid is not None and spares is not None
    source = spares._slots[spare_key(layout)].namespace
    assert source is not None and host_parent(namespace.init_pid) == source.init_pid
    lines = result.stdout.splitlines()
    mounted = [line.split() for line in lines if f" {skill} " in line]
    assert len(mounted) == 1 and "overlay" in mounted[0], lines  # from the skill's overlay
    assert {"ro", "nosuid", "nodev"} <= set(mounted[0][5].split(",")), mounted
    assert "refused" in lines and "remount-refused" in lines, result
    assert "planted" not in lines and "Read-only file system" in result.stderr, result
    root = layout.skill_roots[0] / "public" / "data-report"
    assert sorted(path.name for path in root.iterdir()) == ["SKILL.md"]
    assert (root / "SKILL.md").read_text(encoding="utf-8").startswith("---")


def test_a_spares_proc_keeps_the_kernels_settings_read_only_and_its_loopback_up(
        provider: BwrapSandboxProvider, layout: PathLayout) -> None:
    """A spare's own /proc has ``sys``, ``sysrq-trigger``, ``irq`` and ``bus`` read-only,
    as bubblewrap leaves its /proc (bound from read-only copies its source made once,
    which nothing inside shows; an entry this kernel lacks, which the source notes and no
    spare looks for, is not there inside either); its loopback is up and serves its own
    commands."""
    layout.thread("u", "t1").ensure_directories()  # a base directory with a thread: warm
    provider.warm(layout)
    wait_for_spare(provider, layout)
    sandbox = sandbox_for(provider, layout, "t2")
    result = sandbox.execute_command(
        "for n in sys sysrq-trigger irq bus; do [ -e /proc/$n ] && echo has /proc/$n; done;"
        " grep -E ' /proc/(sys|sysrq-trigger|irq|bus) ' /proc/self/mountinfo;"
        " ls -A /tmp; grep -c antler-proc /proc/self/mountinfo;"
        " python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen();"
        " c=socket.create_connection(s.getsockname()); print(\"served\", s.accept()[1][0])'")
    lines = result.stdout.splitlines()
    mounts = {line.split()[4]: line.split()[5].split(",") for line in lines
              if line.split()[4:5] and line.split()[4].startswith("/proc/")}
    present = {f"/proc/{name}" for name in ("sys", "sysrq-trigger", "irq", "bus")
               if os.path.exists(f"/proc/{name}")}
    inside = {line.split()[1] for line in lines if line.startswith("has ")}
    assert inside == present and present <= set(mounts), lines
    assert all("ro" in options for options in mounts.values()), mounts
    assert ".antler-proc" not in lines and "0" in lines, lines  # the copies stay outside
    assert "served 127.0.0.1" in lines, result
    # Refused as read-only, not merely for want of permission (the mount table lists the
    # source's covered entries too: the writes say which one a command reaches).
    for path in ("/proc/sys/kernel/hostname", "/proc/sysrq-trigger",
                 "/proc/irq/default_smp_affinity"):
        if os.path.exists(path):
            written = sandbox.execute_command(f"echo x > {path}")
            assert "Read-only file system" in written.stderr, (path, written)


def test_spares_end_with_the_provider_and_leave_nothing() -> None:
    needs_bwrap()
    code = """
import tempfile, time
from antler.plugin_api.paths import PathLayout
from antler.runtime.sandbox.bwrap import BwrapSandboxProvider
layout = PathLayout(tempfile.mkdtemp())
provider = BwrapSandboxProvider()
sandbox = provider.get(provider.acquire(layout.thread("u", "t")))
assert sandbox.execute_command("echo ok").ok
sandbox.end_run()
spares = provider._settings.spares
for _ in range(400):
    if spares.ready((layout.base / "users", ())):
        break
    time.sleep(0.025)
assert spares.ready((layout.base / "users", ()))
provider.shutdown()
"""
    assert orphans_left(code) == []


def test_an_unused_spare_ends_after_the_idle_time(layout: PathLayout) -> None:
    needs_bwrap()
    provider = BwrapSandboxProvider(idle_seconds=0.5)
    try:
        (layout.base / "users").mkdir(parents=True)  # some thread has files here
        provider.warm(layout)
        wait_for_spare(provider, layout)
        spares = provider._settings.spares
        assert spares is not None
        spare = spares._slots[spare_key(layout)].namespace
        assert spare is not None and spare.init_pid is not None
        pid = spare.init_pid
        for _ in range(200):
            if not alive(pid):
                break
            time.sleep(0.05)
        assert not alive(pid) and not spares.ready(spare_key(layout))
    finally:
        provider.shutdown()


def test_where_an_init_cannot_mount_namespaces_start_whole(
        layout: PathLayout, caplog: pytest.LogCaptureFixture) -> None:
    needs_bwrap()
    provider = BwrapSandboxProvider()
    try:
        # A spare started without the capabilities it needs, as a system that refuses them.
        starter = provider._settings.start_spare
        starter._fixed = provider._fixed_arguments([], spare=False)
        with caplog.at_level("WARNING"):
            result = sandbox_for(provider, layout).execute_command("id -un; ls /mnt/user-data")
        assert result.stdout == "sandbox\noutputs\nuploads\nworkspace\n", result
        assert provider._settings.spares is None  # from now on, started whole
        assert "started whole" in caplog.text
        again = sandbox_for(provider, layout, "t2").execute_command("pwd")
        assert again.stdout == "/mnt/user-data/workspace\n"
    finally:
        provider.shutdown()


def test_a_spare_whose_view_was_removed_is_replaced_not_given_up(
        provider: BwrapSandboxProvider, layout: PathLayout,
        caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    layout.thread("u", "t1").ensure_directories()
    provider.warm(layout)
    wait_for_spare(provider, layout)
    shutil.rmtree(layout.base / "users")  # the spare's view now shows a removed folder
    with caplog.at_level("WARNING"):
        result = sandbox_for(provider, layout, "t2").execute_command("echo fine > note; pwd")
    assert result.stdout == "/mnt/user-data/workspace\n", result
    assert (layout.thread("u", "t2").workspace / "note").read_text() == "fine\n"
    assert provider._settings.spares is not None and "started whole" not in caplog.text


# Run in a process of its own, which reaps its orphans (a subreaper); it kills only the
# process group it started. (Never kill(-1) here: outside a PID namespace of its own, as
# root, that reaches every process of the machine.)
_GROUP_KILL_AND_WAIT = """
import posix, sys, time
exec(compile(open(sys.argv[1]).read(), "nsinit", "exec"))
libc = _Libc()
libc("prctl", libc.Int(36), libc.Long(1), libc.Long(0), libc.Long(0), libc.Long(0))
raised = []
def tracer(frame, event, arg):
    if event == "exception":
        raised.append(arg[0].__name__)
    return tracer
shell = posix.posix_spawn("/bin/sh", ["/bin/sh", "-c", "sleep 30 & sleep 30 & wait"], {},
                          setsid=True)
deadline = time.monotonic() + 30
while True:  # until the shell has started both sleeps (a loaded machine may take a while)
    group = sorted(int(name) for name in posix.listdir("/proc")
                   if name.isdigit() and _session(int(name)) == shell)
    if len(group) >= 3 or time.monotonic() > deadline:
        break
    time.sleep(0.01)
sys.settrace(tracer)
killed = _kill(shell, group=True, libc=libc)
reaped = []
while (exited := _wait_any(libc, block=True)) is not None:
    reaped.append(exited)
none_left = _wait_any(libc, block=False)
sys.settrace(None)
print(len(group), killed, sorted(pid for pid, _ in reaped) == group,
      sorted({posix.WTERMSIG(status) for _, status in reaped}), none_left, raised)
"""


def test_the_inits_group_kill_and_wait_reap_everything_and_raise_nothing(
        tmp_path: Path) -> None:
    """An adopted spare's init ends a command through the C library (`nsinit._kill`,
    `_wait_any`): killing the command's group reaches every member, and waiting reaps
    them until no child is left, which is an answer, not an exception (a spare's first
    exception costs it about 0.1 ms of page faults)."""
    import subprocess

    init_source = Path(__file__).parents[3] / "core" / "runtime" / "sandbox" / "nsinit.py"
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    script = tmp_path / "group_kill_and_wait.py"
    script.write_text(_GROUP_KILL_AND_WAIT)
    done = subprocess.run([python, "-I", "-S", str(script), str(init_source)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # The shell and its two sleeps: all killed by SIGKILL and reaped; then no child, and
    # no exception on the way.
    assert done.stdout.splitlines() == ["3 True True [9] None []"], done.stdout


def test_the_inits_kill_of_every_process_is_refused_outside_its_pid_namespace() -> None:
    """`Init.kill_all` signals ``-1``, which in a namespace of its own reaches only the
    namespace's processes. An init started anywhere else (a launch that lost its PID
    namespace, a test that runs the init's code in a plain process) must not send it:
    as root, ``kill(-1)`` reaches every process of the machine. Run here, in pytest's
    process (not PID 1), with the kill recorded instead of sent."""
    init_source = Path(__file__).parents[3] / "core" / "runtime" / "sandbox" / "nsinit.py"
    scope: dict = {"__name__": "nsinit"}
    exec(compile(init_source.read_text(), "nsinit", "exec"), scope)
    sent: list[int] = []

    def recorded_kill(pid: int, group: bool = False, libc: object = None) -> bool:
        sent.append(pid)
        return False

    scope["_kill"] = recorded_kill
    init = scope["Init"].__new__(scope["Init"])
    init.libc = None
    assert os.getpid() != 1
    init.kill_all()
    assert -1 not in sent, "kill(-1) was sent from a process that is not its namespace's PID 1"


# Runs the init's loop pieces in a plain process: no sweep and no kill_all, which outside a
# PID namespace of its own would reach the machine's processes.
_RACES = """
import posix, sys, _socket
exec(compile(open(sys.argv[1]).read(), "nsinit", "exec"))
import posix as real_posix

# A process reaped by its parent between the init's open of /proc/PID/stat and its read.
child = real_posix.fork()
if child == 0:
    real_posix._exit(0)


class ReapedBeforeTheRead:
    def __getattr__(self, name):
        return getattr(real_posix, name)

    def read(self, fd, size):
        real_posix.waitpid(child, 0)
        return real_posix.read(fd, size)


posix = ReapedBeforeTheRead()
print("session", _session(child))
posix = real_posix

control, _harness = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
init = Init(control.detach())


def start(at=None, pair=None):
    mine, theirs = pair or _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    channel = theirs.detach()
    if at is not None:  # the number the init's next request would get: the lowest free
        posix.dup2(channel, at)
        posix.close(channel)
        channel = at
    read, write = posix.pipe()
    devnull = posix.open("/dev/null", posix.O_RDONLY)
    init.run(["/bin/sleep", "30"], {}, [channel, devnull, write, posix.dup(write)])
    pid = init.by_fd[channel]
    return mine, pid, channel


def alive(pid):
    return posix.waitpid(pid, posix.WNOHANG) == (0, 0)


# One poll round reports a kill asked on A's channel; handled earlier in the round, A's
# exit finished A (its channel closed) and a request started B, whose channel got A's
# descriptor number. Then the round comes to A's event.
a_mine, a, a_fd = start()
b_pair = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
a_mine.send(b"kill")
posix.kill(a, 9)
init.finished(*posix.waitpid(a, 0), sweep=False)
b_mine, b, b_fd = start(at=a_fd, pair=b_pair)
init.channel(a_fd)
print("reused", b_fd == a_fd, "b alive", alive(b))
# A round's event for a channel finished earlier in it, its number not reused.
c_mine, c, c_fd = start()
c_mine.send(b"kill")
posix.kill(c, 9)
init.finished(*posix.waitpid(c, 0), sweep=False)
init.channel(c_fd)
print("stale event ignored")
# A real kill on B's channel still kills B.
b_mine.send(b"kill")
init.channel(b_fd)
print("b killed", posix.WTERMSIG(posix.waitpid(b, 0)[1]))
"""


def test_the_inits_loop_survives_a_reaped_process_and_a_stale_channel_event(
        tmp_path: Path) -> None:
    """The init serves every command of a thread: an exception in its loop ends it, and
    with it every running command (seen as exit -9 with all of a command's output there,
    when sixteen commands ran at once on a busy machine). Two races it must take: a
    process its sweep lists may be reaped by its parent between the open of its
    ``/proc`` entry and the read (ESRCH), and one poll round may report an event for a
    channel whose command an earlier event of the round finished, its descriptor number
    given to a new command's channel meanwhile (that command must not be killed)."""
    import subprocess

    init_source = Path(__file__).parents[3] / "core" / "runtime" / "sandbox" / "nsinit.py"
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    script = tmp_path / "races.py"
    script.write_text(_RACES)
    done = subprocess.run([python, "-I", "-S", str(script), str(init_source)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "session None", "reused True b alive True", "stale event ignored", "b killed 9"], \
        done.stdout
