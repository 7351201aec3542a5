"""How long a provider keeps a thread's sandbox: while a run holds it or something of it runs.

A server serves many threads; the provider's tables must hold the threads running now,
not every thread it ever served, and a thread's next run must find its files again in a
sandbox made anew from the id in its state. Dropping and making sandboxes again must
never give one thread directory two sandboxes at once (parallel runs of one thread, a
caller holding a sandbox across a run's end), nor let an id written into state reach
another thread's files. Each run holds the sandbox until it releases it or ends: one run's
end never drops it under another run of the thread, a cancelled or failed run lets go of it
(its command stopped), and a sandbox only `get` made goes at the provider's next sweep.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda

from antler.compiler.runscope import RUN_SCOPE_KEY, RunScope
from antler.plugin_api.context import SANDBOX_PROVIDER
from antler.plugin_api.paths import PathLayout, ThreadPaths
from antler.plugin_api.sandbox import (
    CommandInterrupted,
    SandboxClosedError,
    SandboxNotFoundError,
)
from antler.runtime.sandbox.host import RunningCommand
from antler.runtime.sandbox.local import LocalSandbox, LocalSandboxProvider
from antler.runtime.sandbox.threaddir import INIT_FILE, record_namespace
from tests.plugins.support import make_agent
from tests.runtime.sandbox.test_sandbox_namespace import alive


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


def tool_results(state: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


class WatchedProvider(LocalSandboxProvider):
    """The local provider, noting how many sandboxes its table holds at each acquire."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.held: list[int] = []

    def acquire(self, thread_paths: ThreadPaths) -> str:
        sandbox_id = super().acquire(thread_paths)
        with self._lock:
            self.held.append(len(self._by_id))
        return sandbox_id


# -- through the real graph -------------------------------------------------------------------


@pytest.mark.parametrize("fuse", [True, False])
def test_many_threads_leave_only_the_threads_in_use_in_the_table(tmp_path: Path,
                                                                  fuse: bool) -> None:
    # Four agents (one model script each) share one provider, as a server's runs do, and
    # run five threads each at the same time: at most four threads are running at any
    # moment, so the table holds at most four sandboxes, and none once all are done. (The
    # old provider kept all 20 until it was shut down.)
    home = tmp_path / "home"
    provider = WatchedProvider(default_timeout=20)
    workers, threads_each = 4, 5
    agents = []
    for worker in range(workers):
        script: list[Any] = []
        for n in range(threads_each):
            script += [call("write_file", path="mine.txt", content=f"w{worker}-t{n}"),
                       call("bash", command="cat mine.txt"), "done"]
        agents.append(make_agent(home, script, services={SANDBOX_PROVIDER: provider},
                                 fuse=fuse)[0])
    outputs: dict[str, list[str]] = {}
    failures: list[BaseException] = []

    def serve(worker: int) -> None:
        try:
            for n in range(threads_each):
                thread = f"w{worker}-t{n}"
                outputs[thread] = tool_results(agents[worker].invoke("go", thread_id=thread))
        except BaseException as error:
            failures.append(error)

    runners = [threading.Thread(target=serve, args=(w,)) for w in range(workers)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(60)
    try:
        assert not failures, failures
        assert len(outputs) == workers * threads_each
        for thread, results in outputs.items():
            assert results[1] == thread  # each thread read its own file
        assert provider.held and max(provider.held) <= workers, provider.held
        assert provider._by_id == {}
    finally:
        for agent in agents:
            agent.close()


@pytest.mark.parametrize("fuse", [True, False])
def test_a_threads_next_turn_after_its_sandbox_was_dropped_sees_its_files(
        tmp_path: Path, fuse: bool) -> None:
    home = tmp_path / "home"
    provider = LocalSandboxProvider(default_timeout=20)
    agent, _ = make_agent(home, [
        call("write_file", path="notes.md", content="turn one\n"),
        call("bash", command="echo from bash > made.txt; mkdir -p d; echo deep > d/f"),
        "done",
        call("read_file", path="notes.md"),
        call("bash", command="cat made.txt d/f"),
        "done"], services={SANDBOX_PROVIDER: provider}, fuse=fuse)
    with agent:
        first = agent.invoke("one", thread_id="t1")
        sandbox_id = first["sandbox"]["sandbox_id"]
        assert sandbox_id == "local:default/t1"
        assert provider._by_id == {}  # released and idle: dropped
        # Still the thread's id (the next run's end releases it: nothing to do), made
        # again only when used.
        assert provider.existing_sandbox_id(PathLayout(home).thread("default", "t1")) == \
            sandbox_id
        assert provider._by_id == {}
        # The id in state still works: `get` makes the thread's sandbox again.
        assert provider.get(sandbox_id).read_file("notes.md") == "turn one\n"
        second = agent.invoke("two", thread_id="t1")
    assert second["sandbox"] == {"sandbox_id": sandbox_id}
    assert tool_results(second)[-2:] == ["turn one\n", "from bash\ndeep"]


@pytest.mark.parametrize("fuse", [True, False])
def test_an_id_written_into_state_does_not_reach_a_dropped_sandbox_of_another_thread(
        tmp_path: Path, fuse: bool) -> None:
    # The victim's sandbox is dropped after its run; the attacker names it in its own
    # state (a thread's owner can write state). The tools take the attacker's own
    # sandbox, and the victim's is not made again on the attacker's behalf.
    home = tmp_path / "home"
    provider = LocalSandboxProvider(default_timeout=20)
    agent, _ = make_agent(home, [
        call("write_file", path="secret.txt", content="victim's secret"), "done",
        call("read_file", path="secret.txt"),
        call("bash", command="cat secret.txt 2>&1; ls /mnt/user-data/workspace"), "done",
    ], services={SANDBOX_PROVIDER: provider}, fuse=fuse)
    with agent:
        agent.invoke("write", thread_id="victim")
        victim = agent.graph.get_state(agent.run_config("victim")).values["sandbox"]
        assert victim == {"sandbox_id": "local:default/victim"}
        assert provider._by_id == {}
        agent.graph.update_state(agent.run_config("attacker"), {"sandbox": victim})
        state = agent.invoke("read", thread_id="attacker")
        results = tool_results(state)
        assert "victim's secret" not in "".join(results), results
        assert "No such file" in results[0] and "No such file" in results[1]
        assert state["sandbox"] == {"sandbox_id": "local:default/attacker"}
        assert set(provider._by_id) == set()  # the victim's was never made for the attacker
    victim_file = PathLayout(home).thread("default", "victim").workspace / "secret.txt"
    assert victim_file.read_text() == "victim's secret"


# -- the provider's ids -----------------------------------------------------------------------


def test_forged_and_stale_ids_get_a_clear_error_and_make_nothing(tmp_path: Path) -> None:
    layout = PathLayout(tmp_path / "home")
    provider = LocalSandboxProvider(default_timeout=10)
    try:
        mine = provider.acquire(layout.thread("alice", "t1"))
        provider.release(mine)
        assert provider._by_id == {}
        other_base = provider.acquire(PathLayout(tmp_path / "other").thread("alice", "t1"))
        assert other_base == "local:alice/t1#2"
        for forged in ["nope", "local:", "local:alice", "local:alice/", "local:/t1",
                       "local:alice/t1#1", "local:alice/t1#3", "local:alice/t1#02",
                       "local:../t1", "local:alice/..", "local:alice/t1/../../bob/t1",
                       "local:alice/t1\x00", "bwrap:alice/t1", "local:bob/t1",
                       "local:alice/t2", " local:alice/t1", "local:alice/t1 "]:
            with pytest.raises(SandboxNotFoundError, match="no such sandbox"):
                provider.get(forged)
            with pytest.raises(SandboxNotFoundError, match="no such sandbox"):
                provider.release(forged)
        # Nothing was made for them: no directory of bob's or alice's t2, no sandbox.
        assert sorted(p.name for p in (layout.base / "users").iterdir()) == ["alice"]
        assert [p.name for p in (layout.base / "users/alice/threads").iterdir()] == ["t1"]
        assert set(provider._by_id) == {other_base}
        # The id of a thread whose directory is gone (the thread was deleted) names nothing.
        subprocess.run(["rm", "-rf", str(layout.thread("alice", "t1").user_data)], check=True)
        with pytest.raises(SandboxNotFoundError, match="no such sandbox: 'local:alice/t1'"):
            provider.get(mine)
        assert provider.existing_sandbox_id(layout.thread("alice", "t1")) is None
        assert provider.existing_sandbox_id(layout.thread("bob", "t1")) is None
        assert provider.existing_sandbox_id(PathLayout(tmp_path / "new").thread("a", "b")) is None
        # Released again (a run that recorded it ends): nothing to do, no error.
        provider.release(other_base)
        provider.release(other_base)
        assert provider._by_id == {}
    finally:
        provider.shutdown()
    with pytest.raises(SandboxNotFoundError, match="shut down"):
        provider.get(mine)


def test_a_dropped_sandbox_is_made_again_with_the_threads_paths(tmp_path: Path) -> None:
    layouts = [PathLayout(tmp_path / "a"), PathLayout(tmp_path / "b")]
    provider = LocalSandboxProvider(default_timeout=10)
    try:
        ids = []
        for layout in layouts:
            for user, thread in [("alice", "t1"), ("bob", "t1"), ("alice", "t2")]:
                paths = layout.thread(user, thread)
                sandbox_id = provider.acquire(paths)
                provider.get(sandbox_id).write_file("who.txt", f"{layout.base.name}/{user}/"
                                                                f"{thread}\n")
                provider.release(sandbox_id)
                ids.append((sandbox_id, paths))
        assert provider._by_id == {}
        assert len({sandbox_id for sandbox_id, _ in ids}) == 6
        for sandbox_id, paths in ids:
            sandbox = provider.get(sandbox_id)
            assert sandbox.thread_paths.user_data == paths.user_data
            result = sandbox.execute_command("cat who.txt; pwd")
            assert result.stdout == (f"{paths.base.name}/{paths.user_id}/{paths.thread_id}"
                                     "\n/mnt/user-data/workspace\n")
            assert provider.acquire(paths) == sandbox_id
            assert provider.get(sandbox_id) is sandbox
    finally:
        provider.shutdown()


# -- races ------------------------------------------------------------------------------------


class Overlaps:
    """Which sandboxes run a command, per thread directory, at the same time."""

    def __init__(self) -> None:
        self.running: dict[Path, dict[int, int]] = defaultdict(dict)
        self.guard = threading.Lock()
        self.found: list[str] = []
        self.made: list[Any] = []

    def starts(self, sandbox: Any) -> None:
        # Called with the sandbox's lock held: it must be the one its provider keeps.
        provider = sandbox._provider
        if provider is not None and provider._by_id.get(sandbox.sandbox_id) is not sandbox:
            self.found.append(f"{sandbox.sandbox_id}: a command in a dropped sandbox")
        with self.guard:
            users = self.running[sandbox.thread_paths.user_data]
            users[id(sandbox)] = users.get(id(sandbox), 0) + 1
            if len(users) > 1:
                self.found.append(f"{sandbox.sandbox_id}: {len(users)} sandboxes at once")

    def ends(self, sandbox: Any) -> None:
        with self.guard:
            users = self.running[sandbox.thread_paths.user_data]
            users[id(sandbox)] -= 1
            if not users[id(sandbox)]:
                del users[id(sandbox)]


class Watched:
    """A sandbox that tells `Overlaps` when each command starts and ends."""

    overlaps: Overlaps

    def _popen(self, command: str) -> RunningCommand:
        self.overlaps.starts(self)
        return super()._popen(command)  # type: ignore[misc]

    def _collect(self, process: RunningCommand, limit: float) -> Any:
        try:
            return super()._collect(process, limit)  # type: ignore[misc]
        finally:
            self.overlaps.ends(self)


class RacedSandbox(Watched, LocalSandbox):
    pass


class RacedProvider(LocalSandboxProvider):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.overlaps = Overlaps()

    def _new_sandbox(self, sandbox_id: str, thread_paths: ThreadPaths) -> LocalSandbox:
        sandbox = RacedSandbox(sandbox_id, thread_paths, default_timeout=self.default_timeout,
                               max_output_bytes=self.max_output_bytes, shell=self.shell)
        sandbox.overlaps = self.overlaps
        self.overlaps.made.append(sandbox)
        return sandbox


def hammer(provider: Any, threads: list[ThreadPaths], seconds: float, workers: int,
           pause: float = 0.0) -> list[str]:
    """`workers` threads acquiring, getting, releasing and running commands in `threads`
    in any order for `seconds` (up to `pause` seconds between two), some through a
    sandbox held across another's release; what went wrong."""
    failures: list[str] = []
    deadline = time.monotonic() + seconds

    def work(seed: int) -> None:
        chance = random.Random(seed)
        held: dict[str, Any] = {}
        while time.monotonic() < deadline:
            paths = chance.choice(threads)
            sandbox_id = provider.acquire(paths)
            try:
                action = chance.random()
                if action < 0.4:
                    sandbox = held.get(sandbox_id) if chance.random() < 0.5 else None
                    sandbox = sandbox or provider.get(sandbox_id)
                    result = sandbox.execute_command("cat name.txt")
                    if result.stdout != paths.thread_id:
                        failures.append(f"{sandbox_id} read {result!r}")
                elif action < 0.6:
                    held[sandbox_id] = provider.get(sandbox_id)  # kept across releases
                elif action < 0.8 and provider.get(sandbox_id).read_file(
                        "name.txt") != paths.thread_id:
                    failures.append(f"{sandbox_id}: another thread's file")
            except Exception as error:
                failures.append(f"{sandbox_id}: {type(error).__name__}: {error}")
            finally:
                provider.release(sandbox_id)
            if pause:
                time.sleep(chance.random() * pause)

    runners = [threading.Thread(target=work, args=(seed,)) for seed in range(workers)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(seconds + 30)
    return failures


def test_parallel_acquire_get_release_never_give_a_thread_two_sandboxes(
        tmp_path: Path) -> None:
    # Eight workers hammer three threads: acquire, get, release and commands in any
    # order, some through a sandbox held across another worker's release (dropped
    # meanwhile). A command runs only in the sandbox the provider keeps for its thread,
    # never in two sandboxes of one directory at once, and each sees the thread's files.
    layout = PathLayout(tmp_path / "home")
    provider = RacedProvider(default_timeout=20)
    threads = [layout.thread("alice", "t1"), layout.thread("alice", "t2"),
               layout.thread("bob", "t1")]
    for paths in threads:
        provider.get(provider.acquire(paths)).write_file("name.txt", paths.thread_id)
        provider.release(provider.acquire(paths))
    try:
        failures = hammer(provider, threads, seconds=2.5, workers=8)
        assert not failures, failures[:5]
        assert not provider.overlaps.found, provider.overlaps.found[:5]
        # Sandboxes were dropped and made again many times.
        assert len(provider.overlaps.made) > 3 * len(threads)
        # Every worker released what it acquired: nothing is held, nothing kept.
        assert provider._by_id == {}
    finally:
        provider.shutdown()


def test_a_sandbox_held_across_the_end_of_a_run_runs_its_command_in_the_kept_one(
        tmp_path: Path) -> None:
    provider = LocalSandboxProvider(default_timeout=10)
    paths = PathLayout(tmp_path).thread("u", "t1")
    try:
        sandbox_id = provider.acquire(paths)
        stale = provider.get(sandbox_id)
        provider.release(sandbox_id)
        assert provider._by_id == {}
        # The thread's next run made a new one; the stale object's command goes to it.
        kept = provider.get(provider.acquire(paths))
        assert kept is not stale
        assert stale.execute_command("echo hi > f; cat f").stdout == "hi\n"
        assert provider.get(sandbox_id) is kept
        # With none kept, the stale object is taken back.
        provider.release(sandbox_id)
        assert stale.execute_command("true").exit_code == 0
        assert provider.get(sandbox_id) is stale
        provider.release(sandbox_id)
    finally:
        provider.shutdown()
    with pytest.raises(SandboxClosedError):
        stale.execute_command("true")


def test_a_running_command_keeps_its_sandbox_past_another_runs_release(
        tmp_path: Path) -> None:
    # Two runs of one thread: the first ends (releases) while the second's command runs.
    # The sandbox is kept until the second run releases it too.
    provider = LocalSandboxProvider(default_timeout=10)
    paths = PathLayout(tmp_path).thread("u", "t1")
    try:
        sandbox_id = provider.acquire(paths)
        sandbox = provider.get(provider.acquire(paths))
        started = threading.Event()
        result: list[Any] = []
        runner = threading.Thread(target=lambda: result.append(sandbox.execute_command(
            f"touch {paths.workspace}/started; sleep 0.5; echo done")))
        runner.start()
        for _ in range(500):
            if (paths.workspace / "started").exists():
                started.set()
                break
            time.sleep(0.01)
        assert started.is_set()
        provider.release(sandbox_id)
        assert provider._by_id.get(sandbox_id) is sandbox  # a command of it runs
        assert provider.get(provider.acquire(paths)) is sandbox  # one sandbox for the thread
        runner.join(10)
        assert result and result[0].stdout == "done\n"
        provider.release(sandbox_id)
        assert provider._by_id == {}
    finally:
        provider.shutdown()


# -- the namespace's init note ----------------------------------------------------------------


class _Noted:
    """A started namespace as `record_namespace` sees it: its init's pid and `on_close`."""

    def __init__(self, pid: int) -> None:
        self.init_pid = pid
        self.callbacks: list[Any] = []

    def on_close(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def close(self) -> None:
        for callback in self.callbacks:
            callback()


def test_an_ended_namespace_removes_its_note_but_never_a_newer_ones(tmp_path: Path) -> None:
    first = subprocess.Popen(["sleep", "30"])
    second = subprocess.Popen(["sleep", "30"])
    note = tmp_path / INIT_FILE
    try:
        old, new = _Noted(first.pid), _Noted(second.pid)
        record_namespace(tmp_path, old)
        assert note.read_text().split()[0] == str(first.pid)
        # The thread's next namespace noted itself before the old one's close was done.
        record_namespace(tmp_path, new)
        old.close()
        assert note.read_text().split()[0] == str(second.pid)
        new.close()
        assert not note.exists()
        new.close()  # a second close (or a deleted directory) finds nothing: no error
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


# -- the bwrap provider: a sandbox is dropped once its namespace has ended ---------------------


def _bwrap_provider(idle_seconds: float) -> Any:
    from antler.runtime.sandbox.bwrap import BwrapSandbox, BwrapSandboxProvider
    from tests.runtime.sandbox.test_sandbox_bwrap import needs_bwrap

    needs_bwrap()

    class WatchedBwrapSandbox(Watched, BwrapSandbox):
        pass

    class WatchedBwrapProvider(BwrapSandboxProvider):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.overlaps = Overlaps()

        def _new_sandbox(self, sandbox_id: str, thread_paths: ThreadPaths) -> BwrapSandbox:
            sandbox = WatchedBwrapSandbox(
                sandbox_id, thread_paths, default_timeout=self.default_timeout,
                max_output_bytes=self.max_output_bytes, shell=self.shell,
                settings=self._settings)
            sandbox.overlaps = self.overlaps
            self.overlaps.made.append(sandbox)
            return sandbox

    return WatchedBwrapProvider(default_timeout=20, idle_seconds=idle_seconds)


def _until(condition: Any, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_bwrap_keeps_the_sandbox_while_its_namespace_lives_then_drops_it(
        tmp_path: Path) -> None:
    provider = _bwrap_provider(idle_seconds=0.5)
    paths = PathLayout(tmp_path / "home").thread("alice", "t1")
    note = paths.user_data.parent / INIT_FILE
    try:
        sandbox_id = provider.acquire(paths)
        sandbox = provider.get(sandbox_id)
        assert sandbox.execute_command("echo kept > f; echo hi").stdout == "hi\n"
        init = int(note.read_text().split()[0])
        provider.release(sandbox_id)
        # Its namespace (and /tmp) waits idle_seconds for the thread's next run.
        assert provider._by_id.get(sandbox_id) is sandbox and alive(init)
        assert _until(lambda: sandbox_id not in provider._by_id)
        assert not alive(init)
        assert not note.exists()  # the ended namespace's note is gone with it
        # The next run: a new sandbox and namespace, the thread's files.
        again = provider.get(provider.acquire(paths))
        assert again is not sandbox
        assert again.execute_command("cat f").stdout == "kept\n"
        assert int(note.read_text().split()[0]) != init
        provider.release(sandbox_id)
    finally:
        provider.shutdown()
    assert provider.overlaps.found == []


def test_bwrap_a_running_command_outlives_another_runs_release_and_the_idle_time(
        tmp_path: Path) -> None:
    # Two runs of one thread: the first ends while the second's command runs past the
    # idle time. Nothing of the sandbox closes under the command; the second run's next
    # command finds the same sandbox, namespace and /tmp.
    provider = _bwrap_provider(idle_seconds=0.2)
    paths = PathLayout(tmp_path / "home").thread("alice", "t1")
    try:
        sandbox_id = provider.acquire(paths)
        sandbox = provider.get(provider.acquire(paths))
        assert sandbox.execute_command("echo tmp > /tmp/mark").exit_code == 0
        result: list[Any] = []
        runner = threading.Thread(target=lambda: result.append(sandbox.execute_command(
            "touch started; sleep 1; cat /tmp/mark")))
        runner.start()
        assert _until(lambda: (paths.workspace / "started").exists())
        provider.release(sandbox_id)
        runner.join(20)
        assert result and result[0].stdout == "tmp\n", result
        assert provider._by_id.get(sandbox_id) is sandbox
        assert provider.get(provider.acquire(paths)) is sandbox
        assert sandbox.execute_command("cat /tmp/mark").stdout == "tmp\n"
        provider.release(sandbox_id)
        assert _until(lambda: sandbox_id not in provider._by_id)
    finally:
        provider.shutdown()
    assert provider.overlaps.found == []


def test_bwrap_parallel_acquire_get_release_never_give_a_thread_two_sandboxes(
        tmp_path: Path) -> None:
    # As for the local provider, with namespaces ending (idle) and starting while workers
    # race: one namespace per thread directory at a time, and a command only in the
    # sandbox the provider keeps.
    provider = _bwrap_provider(idle_seconds=0.05)
    layout = PathLayout(tmp_path / "home")
    threads = [layout.thread("alice", "t1"), layout.thread("bob", "t1")]
    for paths in threads:
        provider.get(provider.acquire(paths)).write_file("name.txt", paths.thread_id)
        provider.release(provider.acquire(paths))
    try:
        failures = hammer(provider, threads, seconds=3.0, workers=4, pause=0.3)
        assert not failures, failures[:5]
        assert not provider.overlaps.found, provider.overlaps.found[:5]
        assert len(provider.overlaps.made) > len(threads)  # dropped and made again
        assert _until(lambda: provider._by_id == {})
        for paths in threads:
            assert not (paths.user_data.parent / INIT_FILE).exists()
    finally:
        provider.shutdown()


# -- who holds a sandbox: each run that acquired it, until it releases it or ends --------------


class Gate(AgentMiddleware):
    """Holds a run before its model's second call (its first command done) until let go."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()
        self.go = threading.Event()

    def before_model(self, state: Any, runtime: Any) -> None:
        if sum(isinstance(m, ToolMessage) for m in state["messages"]) == 1:
            self.reached.set()
            assert self.go.wait(20)


def _provider(kind: str, idle_seconds: float = 0.1) -> Any:
    return RacedProvider(default_timeout=20) if kind == "local" else \
        _bwrap_provider(idle_seconds=idle_seconds)


def _graph_run(agent: Any, thread_id: str) -> dict[str, Any]:
    """A run of the agent's graph itself, as LangGraph Server starts one: nothing holds the
    thread, so runs of one thread can overlap."""
    return dict(agent.graph.invoke({"messages": [HumanMessage("go")]},
                                   config=agent.run_config(thread_id),
                                   context=agent.context(thread_id)))


@pytest.mark.parametrize("kind", ["local", "bwrap"])
@pytest.mark.parametrize("fuse", [True, False])
def test_overlapping_runs_of_a_thread_keep_its_sandbox_until_the_last_lets_go(
        tmp_path: Path, fuse: bool, kind: str) -> None:
    # Run B of a thread holds its sandbox across two runs of A of the same thread: A's
    # first run ends while B's command runs, A's second while B is between two commands
    # (under bwrap, until its namespace has ended after its idle time). B's second
    # command is in the same sandbox: one sandbox for the thread, never made again while
    # a run holds it. (A flag for "in use" was cleared by A's release, and the idle
    # sandbox dropped under B.)
    provider = _provider(kind)
    home = tmp_path / "home"
    gate = Gate()
    workspace = PathLayout(home).thread("default", "t1").workspace
    a, _ = make_agent(home, [call("bash", command="echo a1 >> a.txt"), "done",
                             call("bash", command="echo a2 >> a.txt"), "done"],
                      services={SANDBOX_PROVIDER: provider}, fuse=fuse, checkpointer=None)
    b, _ = make_agent(home, [
        call("bash", command="echo b1 > b.txt; touch started; "
                             "while [ ! -e a-ended ]; do sleep 0.01; done; echo first"),
        call("bash", command="cat b.txt a.txt"), "done"],
        services={SANDBOX_PROVIDER: provider}, fuse=fuse, checkpointer=None,
        custom_middlewares=[gate])
    outcome: list[Any] = []
    runner = threading.Thread(target=lambda: outcome.append(_graph_run(b, "t1")))
    try:
        runner.start()
        assert _until(lambda: (workspace / "started").exists())
        sandbox = provider.get("local:default/t1" if kind == "local" else "bwrap:default/t1")
        assert tool_results(_graph_run(a, "t1")) == ["(no output)"]  # A's first run ended
        assert provider._by_id.get(sandbox.sandbox_id) is sandbox and sandbox.in_use
        sandbox.write_file("a-ended", "")  # through the sandbox: under bwrap an overlay
        assert gate.reached.wait(20)  # B's first command is done; B holds the sandbox
        assert tool_results(_graph_run(a, "t1")) == ["(no output)"]  # A's second run ended
        if kind == "bwrap":  # nothing runs: its namespace ends after its idle time
            assert _until(lambda: sandbox._namespace is None)
        assert provider._by_id.get(sandbox.sandbox_id) is sandbox and sandbox.in_use
    finally:
        gate.go.set()
        runner.join(30)
    try:
        assert outcome, "run B failed"
        assert tool_results(outcome[0]) == ["first", "b1\na1\na2"]
        assert provider.overlaps.made == [sandbox]  # made once, for all three runs
        assert not provider.overlaps.found
        assert _until(lambda: provider._by_id == {})  # B let go: dropped
    finally:
        a.close()
        b.close()


def test_a_double_release_never_lets_go_for_another_run(tmp_path: Path) -> None:
    # Two runs hold one sandbox; the first releases twice (a retried hook). The second
    # still holds it: kept, until the second releases it.
    provider = LocalSandboxProvider(default_timeout=10)
    paths = PathLayout(tmp_path).thread("u", "t1")
    first, second = RunScope(), RunScope()
    try:
        sandbox_id = in_run(first, provider.acquire, paths)
        assert in_run(second, provider.acquire, paths) == sandbox_id
        sandbox = provider.get(sandbox_id)
        in_run(first, provider.release, sandbox_id)
        in_run(first, provider.release, sandbox_id)
        assert sandbox.in_use and provider._by_id.get(sandbox_id) is sandbox
        first.end()  # its end: nothing more to let go
        assert provider._by_id.get(sandbox_id) is sandbox
        in_run(second, provider.release, sandbox_id)
        assert provider._by_id == {}
        second.end()
        assert provider._by_id == {}
    finally:
        provider.shutdown()


def test_a_run_that_ends_holding_the_sandbox_lets_go_and_starts_no_more_commands(
        tmp_path: Path) -> None:
    # A run ends without releasing (its last hook never ran): its end lets go of the
    # sandbox. A tool of that run still going in a worker thread starts no command.
    provider = LocalSandboxProvider(default_timeout=10)
    paths = PathLayout(tmp_path).thread("u", "t1")
    run = RunScope()
    try:
        sandbox = provider.get(in_run(run, provider.acquire, paths))
        assert sandbox.in_use
        run.end()
        assert not sandbox.in_use and provider._by_id == {}
        with pytest.raises(CommandInterrupted, match="run has ended"):
            in_run(run, sandbox.execute_command, "touch late")
        assert not (paths.workspace / "late").exists()
        assert provider._by_id == {}
    finally:
        provider.shutdown()


def in_run(run: RunScope, function: Any, *args: Any) -> Any:
    """`function(*args)` inside a run whose scope is `run`, as hooks and tools run."""
    return RunnableLambda(lambda _: function(*args)).invoke(
        None, {"configurable": {RUN_SCOPE_KEY: run}})


@pytest.mark.parametrize("kind", ["local", "bwrap"])
@pytest.mark.parametrize("fuse", [True, False])
def test_a_run_cancelled_mid_command_lets_go_of_its_sandbox_and_stops_the_command(
        tmp_path: Path, fuse: bool, kind: str) -> None:
    # The run's task is cancelled while its command runs: its last hook (the release)
    # never runs. Its end still lets go of the sandbox and stops the command, and the
    # sandbox is dropped. (It stayed in use, its command running, before.)
    provider = _provider(kind, idle_seconds=0.05)
    home = tmp_path / "home"
    workspace = PathLayout(home).thread("default", "t1").workspace
    agent, _ = make_agent(home, [call("bash", command="echo $$ > pid; exec sleep 30"), "done"],
                          services={SANDBOX_PROVIDER: provider}, fuse=fuse)

    async def cancelled() -> None:
        run = asyncio.create_task(agent.ainvoke("go", thread_id="t1"))
        for _ in range(1000):
            if (workspace / "pid").exists() and (workspace / "pid").read_text():
                break
            await asyncio.sleep(0.01)
        ended_first = run.done()
        run.cancel()
        try:
            state = await run
        except asyncio.CancelledError:
            return
        # Not cancelled: say how the run ended, and whether before the cancel.
        raise AssertionError(
            f"the run was not cancelled (it had ended before the cancel: {ended_first}; "
            f"its command started: {(workspace / 'pid').exists()}): "
            f"{[(m.type, str(m.content)[:200]) for m in state.get('messages', [])]}")

    with agent:
        asyncio.run(cancelled())
        sandbox = provider.overlaps.made[0]
        assert not sandbox.in_use
        assert _until(lambda: provider._by_id == {}, 10)
        if kind == "local":
            assert not alive(int((workspace / "pid").read_text()))
        assert not sandbox._running


def test_a_run_that_fails_or_whose_stream_is_closed_lets_go_of_its_sandbox(
        tmp_path: Path) -> None:
    # One run's model fails after its command (its script runs out), another run's stream
    # is closed after its tools' step: neither reaches after_agent. Both let go.
    provider = LocalSandboxProvider(default_timeout=10)
    home = tmp_path / "home"
    failing, _ = make_agent(home, [call("bash", command="echo one")],
                            services={SANDBOX_PROVIDER: provider})
    closed, _ = make_agent(home, [call("bash", command="echo two"), "done"],
                           services={SANDBOX_PROVIDER: provider})
    with failing, closed:
        with pytest.raises(Exception, match="script"):
            failing.invoke("go", thread_id="t1")
        assert provider._by_id == {}
        chunks = closed.stream("go", thread_id="t2")
        for chunk in chunks:
            if "tools" in chunk:
                assert provider.get("local:default/t2").in_use
                break
        chunks.close()
        assert provider._by_id == {}


# -- a sandbox only `get` made: held by no run, dropped at the provider's next sweep -----------


@pytest.mark.parametrize("kind", ["local", "bwrap"])
def test_a_sandbox_only_get_made_is_dropped_at_the_next_sweep(tmp_path: Path,
                                                              kind: str) -> None:
    provider = _provider(kind, idle_seconds=0.05)
    layout = PathLayout(tmp_path / "home")
    paths, other = layout.thread("alice", "t1"), layout.thread("bob", "t1")
    try:
        sandbox_id = provider.acquire(paths)
        provider.release(sandbox_id)
        assert _until(lambda: provider._by_id == {})
        # A caller outside any run reads the thread's files and runs a command that
        # leaves a process behind: no run holds the sandbox.
        looked_at = provider.get(sandbox_id)
        result = looked_at.execute_command("sleep 30 & echo $! > bg; echo hi")
        assert result.stdout == "hi\n" and not looked_at.in_use
        background = int((paths.workspace / "bg").read_text())
        assert provider.get(sandbox_id) is looked_at  # kept until the sweep
        # Another thread's run ends: the provider sweeps. What the command left is
        # stopped, and the sandbox dropped (under bwrap, once its namespace has ended).
        provider.release(provider.acquire(other))
        assert _until(lambda: provider._by_id == {})
        if kind == "local":
            assert _until(lambda: not alive(background))  # SIGKILL takes effect async
        # The id still works: made again from the thread's paths.
        assert provider.get(sandbox_id).read_file("bg") == f"{background}\n"
    finally:
        provider.shutdown()



def test_bwrap_a_release_looks_only_at_the_sandboxes_that_may_have_become_droppable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server keeps the sandbox of each thread whose namespace still lives (for
    `idle_seconds` after its run): one thread's release must not look at every one of
    them, or each release costs more the more threads ran lately."""
    from antler.runtime.sandbox.bwrap import BwrapSandbox

    provider = _bwrap_provider(idle_seconds=60)
    layout = PathLayout(tmp_path / "home")
    looked_at: list[str] = []
    drop_if_idle = BwrapSandbox._drop_if_idle

    def counted(self: Any) -> bool:
        looked_at.append(self.sandbox_id)
        return drop_if_idle(self)

    try:
        kept = []
        for n in range(8):
            sandbox_id = provider.acquire(layout.thread("alice", f"t{n}"))
            assert provider.get(sandbox_id).execute_command("echo hi").stdout == "hi\n"
            provider.release(sandbox_id)
            kept.append(sandbox_id)
        assert sorted(provider._by_id) == sorted(kept)  # their namespaces live on
        monkeypatch.setattr(BwrapSandbox, "_drop_if_idle", counted)
        done = provider.acquire(layout.thread("bob", "t1"))
        provider.release(done)
        assert looked_at == [done]
        # A sandbox only `get` uses, its command still running, is looked at by each sweep
        # until nothing of it runs; then dropped once its namespace has ended.
        looked_at.clear()
        running = threading.Thread(
            target=lambda: provider.get(kept[0]).execute_command("sleep 0.5"))
        running.start()
        assert _until(lambda: bool(provider._by_id[kept[0]]._running))
        provider.release(provider.acquire(layout.thread("carol", "t1")))
        running.join()
        assert kept[0] in looked_at and not set(looked_at) & set(kept[1:])
        assert set(kept) <= set(provider._by_id)  # their namespaces still live
    finally:
        provider.shutdown()
