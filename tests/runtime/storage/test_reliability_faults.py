"""Storage faults against the real component (issue 31): processes setting up the shared
store together, a full file system, a PostgreSQL restart between and during runs, a
crash right after a tool result was shown, a model provider that cannot be reached.

PostgreSQL is the server of $ANTLER_TEST_POSTGRES_URL (`.ci/postgres up`), restarted
with its own `pg_ctl`; without one those tests skip here and fail under CI=true (see
conftest.py). The timeouts only stop a hung test; they assert nothing about speed.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain.tools import tool

from antler.plugin_api.paths import PathLayout
from antler.plugins._lib.memory import MemoryStore
from antler.runtime.storage import StorageError, open_store
from tests.memory_writers import BARRIER_GUARD, first_use, writers
from tests.processes import read_stderr_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="real processes and file systems of Linux")
HANG_GUARD = 120


# -- the shared SQLite store: first use by many processes at once -------------------------------

# Four processes meet the fresh store at once in `make test`; the twenty-process form
# (forked from one server that imported the stores, tests/memory_writers.py) runs with the
# slow checks.
@pytest.mark.parametrize("count", [4, pytest.param(20, marks=pytest.mark.slow)])
def test_processes_setting_up_a_fresh_store_at_once_keep_every_fact(tmp_path, count):
    context = writers()
    barrier = context.Barrier(count)
    workers = [context.Process(target=first_use, args=(str(tmp_path), w, barrier))
               for w in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(BARRIER_GUARD)
    assert [worker.exitcode for worker in workers] == [0] * count
    store = open_store("sqlite", tmp_path)
    try:
        facts = {fact.content for fact in MemoryStore(store).facts("u")}
    finally:
        store.close()
    assert facts == {f"fact of worker {w}" for w in range(count)}


def test_a_damaged_shared_store_is_called_the_shared_store(tmp_path):
    (tmp_path / "store.sqlite").write_bytes(b"not a database at all" * 100)
    store = open_store("sqlite", tmp_path)
    with pytest.raises(StorageError) as caught:
        MemoryStore(store).add_facts("u", ["a fact"])
    message = str(caught.value)
    assert message.startswith(f"the shared store {tmp_path / 'store.sqlite'} is damaged")
    assert "checkpoint" not in message


# -- a full disk, found when the database is opened and when a run writes -----------------------

FILE_SIZE_LIMIT = 16 * 1024
"""The fallback's RLIMIT_FSIZE: below the database's size, so nothing of it can grow."""


@dataclass
class NoSpace:
    """A base directory whose file system can be made full.

    A small tmpfs mounted for the test (we are root) is the real thing; where
    mounting is not permitted the fallback is a file-size limit (RLIMIT_FSIZE) on
    the processes started after `exhaust()`, which makes every write that grows a
    file fail as a full disk does, with EFBIG instead of ENOSPC.
    """

    home: Path
    mount: Path | None

    @property
    def reason(self) -> str:
        """What the messages must say is wrong."""
        return "the disk is full" if self.mount else "the file size limit"

    def exhaust(self) -> None:
        if self.mount is None:
            self._limited = True
            return
        fd = os.open(self.mount / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, bytes(1 << 16))
        except OSError as exc:
            assert exc.errno == 28, exc  # ENOSPC: the file system is full
        finally:
            os.close(fd)

    def preexec(self) -> Callable[[], None] | None:
        """What a process started now runs first: the size limit, once exhausted."""
        if self.mount is not None or not getattr(self, "_limited", False):
            return None
        return lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                          (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


@pytest.fixture
def no_space(tmp_path) -> Iterator[NoSpace]:
    mount = tmp_path / "small"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        print(f"cannot mount a tmpfs ({mounted.stderr.strip()}): using a file-size limit")
        yield NoSpace(tmp_path / "home", None)
        return
    try:
        yield NoSpace(mount / "home", mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def script(path: Path, turns: list[Any]) -> str:
    path.write_text(yaml.safe_dump(turns), encoding="utf-8")
    return f"scripted:{path}"


def antler_run(*args: object, home: Path, preexec: Callable[[], None] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "antler", "run", *map(str, args),
                           "--home", str(home)], capture_output=True, text=True,
                          timeout=HANG_GUARD, preexec_fn=preexec)


def test_a_full_disk_found_when_the_database_is_opened_says_free_space(tmp_path, no_space):
    # The thread's first turn, in this process (an `antler run` would spend two
    # CPU-seconds importing Antler): what the second run opens is what a run left.
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    with create_agent(model=ScriptedChatModel(["first", "A title"]),
                      base_dir=no_space.home) as agent:
        agent.invoke("one", thread_id="t1")
    assert (no_space.home / "checkpoints.sqlite").is_file()
    no_space.exhaust()
    second = antler_run("two", "--model", script(tmp_path / "b.yaml", ["second"]),
                        "--thread", "t1", home=no_space.home, preexec=no_space.preexec())
    assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr
    assert f"the checkpoint database {no_space.home / 'checkpoints.sqlite'} cannot grow: " \
        f"{no_space.reason}" in second.stderr
    assert "`antler threads prune`" in second.stderr
    assert "cannot be opened or read" not in second.stderr


SECOND_TURN_ON_A_FULL_DISK = """
import resource, sys
from pathlib import Path
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage import StorageError

agent = create_agent(model=ScriptedChatModel(["first", "second"]), base_dir=Path(sys.argv[1]),
                     fuse=sys.argv[2] == "fused")
with agent:
    agent.invoke("one", thread_id="t1")
    limit = int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        agent.invoke("x" * 200_000, thread_id="t1")
    except StorageError as exc:
        print(exc)
        sys.exit(3)
"""


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_disk_that_fills_between_runs_stops_the_next_write_with_free_space(tmp_path, no_space,
                                                                             fuse):
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    if no_space.mount is None:  # the limit is set inside the process, after its first turn
        done = subprocess.run([sys.executable, "-c", SECOND_TURN_ON_A_FULL_DISK,
                               str(no_space.home), "fused" if fuse else "unfused",
                               str(FILE_SIZE_LIMIT)],
                              capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == 3, done.stderr
        message = done.stdout
    else:
        with create_agent(model=ScriptedChatModel(["first", "second"]),
                          base_dir=no_space.home, fuse=fuse) as agent:
            agent.invoke("one", thread_id="t1")
            no_space.exhaust()
            with pytest.raises(StorageError) as raised:
                agent.invoke("x" * 200_000, thread_id="t1")
        message = str(raised.value)
    assert message.startswith(f"the checkpoint database {no_space.home / 'checkpoints.sqlite'} "
                              f"cannot grow: {no_space.reason}"), message
    assert "`antler threads prune`" in message


# -- PostgreSQL restarts ------------------------------------------------------------------------

CI_POSTGRES = Path(__file__).resolve().parents[3] / ".ci" / "postgres"
QUIET = {"title": {"enabled": False}, "memory": {"enabled": False}}


@pytest.fixture
def restart_postgres(postgres_url) -> Callable[[], None]:
    """Restart the test server as an operator would: `pg_ctl -m fast` ends every session."""
    from tests.conftest import in_ci

    served = subprocess.run([str(CI_POSTGRES), "url"], capture_output=True, text=True)
    if served.stdout.strip() != postgres_url or not os.environ.get("ANTLER_PG_DIR"):
        message = (f"$ANTLER_TEST_POSTGRES_URL ({postgres_url}) is not the server of "
                   f"`.ci/postgres` in $ANTLER_PG_DIR, which these tests restart; start it "
                   f"with `eval \"$(.ci/postgres up)\"`")
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)

    def restart() -> None:
        done = subprocess.run([str(CI_POSTGRES), "restart"], capture_output=True, text=True,
                              timeout=HANG_GUARD)
        assert done.returncode == 0, done.stderr

    return restart


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def postgres_config(url: str, **storage: Any) -> Any:
    from antler.chain.config import parse_config
    from antler.plugin_api.registry import discover

    return parse_config(yaml.safe_dump({**QUIET, "storage": {"checkpointer": url, **storage}}),
                        discover())


def texts(messages: list[Any]) -> list[str]:
    return [m.content for m in messages if m.type in ("human", "ai") and m.content]


@pytest.mark.slow  # restarts the shared server: runs apart, in the serial `make test-slow`
@pytest.mark.postgres
@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_restart_between_invokes_of_an_agent_built_once_goes_unnoticed(
        tmp_path, postgres_url, restart_postgres, fuse):
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    thread = fresh("t")
    model = ScriptedChatModel([f"answer {n}" for n in range(5)])
    config = postgres_config(postgres_url, pool={"min": 3, "max": 4})
    with create_agent(config, model=model, base_dir=tmp_path, fuse=fuse) as agent:
        agent.invoke("question 0", thread_id=thread)
        restart_postgres()  # every pooled connection is now dead
        for n in range(1, 4):
            agent.invoke(f"question {n}", thread_id=thread)
        assert texts(agent.state(thread)["messages"]) == [
            text for n in range(4) for text in (f"question {n}", f"answer {n}")]


@pytest.mark.slow  # restarts the shared server: runs apart, in the serial `make test-slow`
@pytest.mark.postgres
def test_a_restart_between_async_invokes_goes_unnoticed(tmp_path, postgres_url,
                                                        restart_postgres):
    import asyncio

    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    thread = fresh("t")
    model = ScriptedChatModel([f"answer {n}" for n in range(4)])
    config = postgres_config(postgres_url, pool={"min": 3, "max": 4})
    with create_agent(config, model=model, base_dir=tmp_path) as agent:
        async def turns() -> list[Any]:
            run_config, context = agent.run_config(thread), agent.context(thread)
            await agent.graph.ainvoke(agent.input("question 0"), config=run_config,
                                      context=context)
            await asyncio.to_thread(restart_postgres)
            for n in range(1, 4):
                await agent.graph.ainvoke(agent.input(f"question {n}"), config=run_config,
                                          context=context)
            return (await agent.graph.aget_state(run_config)).values["messages"]

        messages = asyncio.run(turns())
    assert texts(messages) == [text for n in range(4) for text in (f"question {n}",
                                                                   f"answer {n}")]




def bash_turn(command: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": "bash", "args": {"command": command}}]}


@pytest.mark.slow  # restarts the shared server: runs apart, in the serial `make test-slow`
@pytest.mark.postgres
def test_a_restart_under_a_run_stops_it_before_it_writes_and_the_thread_stays_one_run(
        tmp_path, postgres_url, restart_postgres):
    thread = fresh("t")
    config = tmp_path / "antler.yaml"
    config.write_text(yaml.safe_dump({**QUIET, "storage": {"checkpointer": "${RUN_DB}"}}),
                      encoding="utf-8")
    env = {**os.environ, "RUN_DB": postgres_url}
    # The command waits for a file of its workspace (what a bwrap sandbox sees of the host),
    # listing the folder: an overlay keeps a name it looked up and missed as missing when
    # another program creates it on the host (README, sandbox).
    go = PathLayout(tmp_path / "home").thread("default", thread).workspace / "go"

    def antler(prompt: str, turns: list[Any], name: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "antler", "run", prompt, "--config", str(config),
             "--model", script(tmp_path / f"{name}.yaml", turns), "--thread", thread,
             "--home", str(tmp_path / "home")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    first = antler("run A", [bash_turn("until ls | grep -qx go; do sleep 0.05; done; "
                                       "echo A-done"), "A finished"], "a")
    try:
        read_stderr_until(first, "-> bash")  # A is inside its tool, holding the thread
        restart_postgres()  # A's session, and the lock with it, are gone
        second = antler("run B", ["B finished"], "b")
        out, err = second.communicate(timeout=HANG_GUARD)
        assert second.returncode == 0, err
        assert "B finished" in out
    finally:
        go.touch()
        _out, first_err = first.communicate(timeout=HANG_GUARD)
    lines = [line for line in first_err.splitlines() if line.strip()]
    assert first.returncode == 1, first_err
    assert lines[-1].startswith(f"error: thread {thread!r} lost its run lock"), first_err
    assert "run the thread again to resume it" in lines[-1]
    assert [line for line in lines if line.startswith("error:")] == lines[-1:]
    assert "<- bash: A-done [not saved: the thread will not have this result]" in lines
    assert "Traceback" not in first_err and "psycopg" not in first_err
    assert "discarding" not in first_err

    # A wrote nothing after the restart: its tool result never reached the thread.
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    with create_agent(postgres_config(postgres_url), model=ScriptedChatModel(["C finished"]),
                      base_dir=tmp_path / "home") as agent:
        messages = agent.state(thread)["messages"]
        assert not any(m.type == "tool" and "A-done" in str(m.content) for m in messages)
        assert texts(messages)[-2:] == ["run B", "B finished"]
        resumed = agent.invoke("run C", thread_id=thread)  # the thread is resumable
    assert texts(resumed["messages"])[-2:] == ["run C", "C finished"]


RESTARTS: list[Callable[[], None]] = []


@tool
def restart_database(reason: str) -> str:
    """Restart the database server."""
    RESTARTS[-1]()
    return f"restarted: {reason}"


@pytest.mark.slow  # restarts the shared server: runs apart, in the serial `make test-slow`
@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["fused", "unfused", "async"])
def test_a_run_whose_lock_ended_stops_before_its_next_write(tmp_path, postgres_url,
                                                            restart_postgres, mode):
    import asyncio

    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel
    from antler.runtime.storage import RunLockLostError

    RESTARTS.append(restart_postgres)
    thread = fresh("t")
    model = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "restart_database", "args": {"reason": "x"},
                                        "id": "r1"}]},
        "answer to again"])
    with create_agent(postgres_config(postgres_url), model=model, tools=[restart_database],
                      base_dir=tmp_path, fuse=mode != "unfused") as agent:
        with pytest.raises(RunLockLostError, match=f"thread {thread!r} lost its run lock"):
            if mode == "async":
                asyncio.run(agent.ainvoke("go", thread_id=thread))
            else:
                agent.invoke("go", thread_id=thread)
        assert len(model.calls) == 1  # stopped before the model saw the tool result
        messages = agent.state(thread)["messages"]
        assert not any(m.type == "tool" for m in messages)  # the result was not written
        state = agent.invoke("again", thread_id=thread)  # resumable; the call is interrupted
    assert texts(state["messages"])[-2:] == ["again", "answer to again"]


# -- `antler run` shows a tool result only once the thread has it --------------------------------

def test_a_result_shown_by_antler_run_survives_kill_9_right_after_the_line(tmp_path):
    import queue
    import sqlite3
    import threading
    import time

    home = tmp_path / "home"
    workspace = PathLayout(home).thread("default", "t1").workspace
    model = script(tmp_path / "s.yaml", [
        {"content": "", "tool_calls": [
            {"name": "bash", "args": {"command": "touch started; until ls | grep -qx go; do sleep "
                                                 "0.05; done; echo quick"}, "id": "q"},
            {"name": "bash", "args": {"command": "sleep 600"}, "id": "slow"}]},
        "never"])
    process = subprocess.Popen(
        [sys.executable, "-m", "antler", "run", "go", "--model", model, "--thread", "t1",
         "--home", str(home)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stderr or ()],
                     daemon=True).start()

    def line_with(text: str, timeout: float) -> str | None:
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if text in line:
                return line
        return None

    try:
        for _ in range(HANG_GUARD * 20):  # the tools' step has begun: its checkpoint is written
            if (workspace / "started").exists():
                break
            time.sleep(0.05)
        # Another process writes to the database: the result's save waits for it.
        other = sqlite3.connect(str(home / "checkpoints.sqlite"), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        (workspace / "go").touch()
        early = line_with("<- bash: quick", timeout=2.0)
        if early is not None:
            process.kill()  # the line is out: a crash now must not lose the result
        other.execute("ROLLBACK")
        other.close()
        if early is None:
            assert line_with("<- bash: quick", timeout=HANG_GUARD) is not None
            process.kill()
        process.wait(HANG_GUARD)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(HANG_GUARD)
    resumed = subprocess.run(
        [sys.executable, "-m", "antler", "run", "and now?", "--home", str(home), "--model",
         script(tmp_path / "r.yaml", ["back", "A title"]), "--thread", "t1"],
        capture_output=True, text=True, timeout=HANG_GUARD)
    assert resumed.returncode == 0, resumed.stderr
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    with create_agent(model=ScriptedChatModel([]), base_dir=home) as agent:
        results = {m.tool_call_id: m.content for m in agent.state("t1")["messages"]
                   if m.type == "tool"}
    assert results.get("q") == "quick"  # shown, so kept


# -- a model provider that cannot be reached ----------------------------------------------------

def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


REPOSITORY = Path(__file__).resolve().parents[3]


def test_a_provider_that_cannot_be_reached_is_named_with_its_host(tmp_path):
    pytest.importorskip("openai")
    port = closed_port()
    config = {
        **QUIET,
        "models": {"default": "main", "named": {"main": {
            "use": "tests.fixtures.chat_models:OpenAICompatibleModel",
            "base_url": f"http://127.0.0.1:{port}/v1"}}},
        # the same three attempts, without the real waits between them
        "llm_error_handling": {"retry_base_delay_ms": 1, "retry_cap_delay_ms": 1},
    }
    (tmp_path / "antler.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "antler", "run", "hi", "--config", str(tmp_path / "antler.yaml"),
         "--home", str(tmp_path / "home")], capture_output=True, text=True, timeout=HANG_GUARD,
        cwd=REPOSITORY)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert (f"[error] The model call failed after 3 attempts: cannot reach 127.0.0.1:{port} "
            "(connection refused). Check the network" in done.stderr), done.stderr
    assert "attempt 3 of 3" in done.stderr  # the retry policy is unchanged
    assert "kept failing" not in done.stderr


def test_an_escaping_provider_error_names_the_host_it_could_not_reach():
    pytest.importorskip("openai")
    from antler.plugin_api.modelerrors import describe_provider_error
    from tests.fixtures.chat_models import OpenAICompatibleModel

    port = closed_port()
    model = OpenAICompatibleModel(base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(Exception) as raised:
        model.invoke("hi")
    assert describe_provider_error(raised.value) == (
        f"model provider error (openai {type(raised.value).__name__}): cannot reach "
        f"127.0.0.1:{port} (connection refused); check the network, a proxy and the model's "
        "`base_url`")
