"""sandbox: lazy acquisition by the tools, reuse across turns, release, and the path boundary."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from pydantic import ValidationError

from antler.chain.config import parse_config
from antler.contracts.runcontext import RunContext
from antler.plugin_api.context import PATHS, SANDBOX_PROVIDER
from antler.plugin_api.paths import PathLayout
from antler.plugin_api.registry import discover
from antler.plugin_api.sandbox import SandboxClosedError, UnknownSandboxProviderError
from antler.plugins.sandbox.config import SandboxConfig
from antler.plugins.sandbox.tools import TOOL_METADATA, build_tools
from antler.runtime.sandbox.local import LocalSandboxProvider
from tests.plugins.support import make_agent

SANDBOX_TOOLS = ["bash", "ls", "read_file", "glob", "grep", "write_file", "str_replace"]


class CountingProvider(LocalSandboxProvider):
    """The local provider, counting what the plugin asks of it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.acquired: list[str] = []
        self.released: list[str] = []

    def acquire(self, thread_paths: Any) -> str:
        sandbox_id = super().acquire(thread_paths)
        self.acquired.append(sandbox_id)
        return sandbox_id

    def release(self, sandbox_id: str) -> None:
        self.released.append(sandbox_id)
        super().release(sandbox_id)


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


def tool_results(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture
def provider() -> CountingProvider:
    return CountingProvider(default_timeout=10)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_a_chat_turn_touches_neither_disk_nor_provider(home, provider):
    agent, _ = make_agent(home, ["hello"], services={SANDBOX_PROVIDER: provider})
    with agent:
        state = agent.invoke("hi", thread_id="t1")
        assert not home.exists()
    assert "sandbox" not in state or state["sandbox"] is None
    assert provider.acquired == provider.released == []


def test_first_tool_call_creates_the_directories_and_acquires_later_turns_reuse(home, provider):
    script = [call("write_file", path="/mnt/user-data/outputs/a.txt", content="one\n"), "done",
              call("bash", command="cat /mnt/user-data/outputs/a.txt; pwd"), "done again"]
    agent, model = make_agent(home, script, services={SANDBOX_PROVIDER: provider})
    paths = PathLayout(home).thread("default", "t1")
    with agent:
        first = agent.invoke("write", thread_id="t1")
        assert all(d.is_dir() for d in (paths.workspace, paths.uploads, paths.outputs))
        assert first["sandbox"] == {"sandbox_id": "local:default/t1"}
        assert set(provider.acquired) == {"local:default/t1"}
        assert provider.released == ["local:default/t1"]  # after_agent released it
        assert not provider.get("local:default/t1").in_use

        second = agent.invoke("read", thread_id="t1")
    assert second["sandbox"] == first["sandbox"]
    # Acquiring again gives the same sandbox: one for the thread, reused.
    assert set(provider.acquired) == {"local:default/t1"}
    assert provider.released == ["local:default/t1"] * 2
    assert (paths.outputs / "a.txt").read_text() == "one\n"
    wrote, ran = tool_results(second)
    assert wrote.content == "Wrote 4 characters to /mnt/user-data/outputs/a.txt."
    assert ran.content == "one\n/mnt/user-data/workspace"
    assert str(home) not in str([m.content for m in model.calls[-1]])


def test_parallel_tool_calls_share_one_sandbox(home, provider):
    both = {"tool_calls": [
        {"name": "write_file", "args": {"path": "a.txt", "content": "a"}},
        {"name": "write_file", "args": {"path": "b.txt", "content": "b"}},
    ]}
    agent, _ = make_agent(home, [both, "done"], services={SANDBOX_PROVIDER: provider})
    with agent:
        state = agent.invoke("write both", thread_id="t1")
    assert [m.status for m in tool_results(state)] == ["success", "success"]
    assert state["sandbox"] == {"sandbox_id": "local:default/t1"}
    workspace = PathLayout(home).thread("default", "t1").workspace
    assert sorted(p.name for p in workspace.iterdir()) == ["a.txt", "b.txt"]


def test_file_tools_read_write_append_replace_and_list(home):
    script = [
        call("write_file", path="notes.md", content="alpha\nbeta\n"),
        call("write_file", path="notes.md", content="gamma\n", append=True),
        call("str_replace", path="/mnt/user-data/workspace/notes.md", old="beta", new="BETA"),
        call("read_file", path="notes.md", start_line=2, end_line=3),
        call("ls", path="/mnt/user-data/workspace"),
        "done",
    ]
    agent, _ = make_agent(home, script, config=without_read_gate())
    with agent:
        state = agent.invoke("edit", thread_id="t1")
    results = [m.content for m in tool_results(state)]
    assert results == [
        "Wrote 11 characters to /mnt/user-data/workspace/notes.md.",
        "Appended 6 characters to /mnt/user-data/workspace/notes.md.",
        "Replaced 1 occurrence in /mnt/user-data/workspace/notes.md.",
        "BETA\ngamma\n",
        "/mnt/user-data/workspace/notes.md",
    ]
    assert all(m.status == "success" for m in tool_results(state))


def without_read_gate() -> Any:
    """These tests are about the tools themselves; read_before_write has its own tests."""
    from antler.chain.config import parse_config
    from antler.plugin_api.registry import discover

    return parse_config("read_before_write: {enabled: false}", discover())


def test_str_replace_needs_exactly_one_occurrence(home):
    script = [
        call("write_file", path="f.txt", content="x x"),
        call("str_replace", path="f.txt", old="x", new="y"),
        call("str_replace", path="f.txt", old="z", new="y"),
        call("str_replace", path="f.txt", old="", new="y"),
        "done",
    ]
    agent, _ = make_agent(home, script, config=without_read_gate())
    with agent:
        state = agent.invoke("edit", thread_id="t1")
    _, twice, missing, empty = tool_results(state)
    assert "occurs 2 times" in twice.content and twice.status == "error"
    assert "was not found" in missing.content and missing.status == "error"
    assert "`old` is empty" in empty.content
    workspace = PathLayout(home).thread("default", "t1").workspace
    assert (workspace / "f.txt").read_text() == "x x"


def test_escapes_are_refused_and_nothing_is_written_outside(tmp_path, home):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    paths = PathLayout(home).thread("default", "t1")
    paths.ensure_directories()
    os.symlink(outside, paths.workspace / "link")
    script = [
        call("write_file", path="../../../../../outside/dotdot.txt", content="x"),
        call("write_file", path="/mnt/user-data/../../outside/virtual.txt", content="x"),
        call("write_file", path=str(outside / "absolute.txt"), content="x"),
        call("write_file", path="link/through-symlink.txt", content="x"),
        call("read_file", path="link/secret.txt"),
        call("read_file", path=str(outside / "secret.txt")),
        call("str_replace", path="link/secret.txt", old="host", new="pwned"),
        call("ls", path="link"),
        call("read_file", path="missing.txt"),
        "done",
    ]
    agent, _ = make_agent(home, script)
    with agent:
        state = agent.invoke("try", thread_id="t1")
    results = tool_results(state)
    assert len(results) == 9
    assert all(m.status == "error" for m in results)
    assert all(m.content.startswith("Error: ") for m in results)
    assert "Traceback" not in str([m.content for m in results])
    # The thread's host location never shows; an absolute path the model sent is echoed.
    assert all(str(home) not in m.content for m in results)
    assert "Refusing path" in results[0].content
    assert "symlink" in results[3].content
    assert results[-1].content.startswith("Error: No such file")
    assert results[-1].content.endswith(": /mnt/user-data/workspace/missing.txt")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "host secret"
    assert not (tmp_path / "dotdot.txt").exists()


def test_every_tool_carries_the_sandbox_metadata(home):
    agent, _ = make_agent(home, [])
    with agent:
        tools = {t.name: t for t in agent.chain.tools}
    for name in SANDBOX_TOOLS:
        assert tools[name].metadata == {"antler": {"sandbox": True, "remote_content": False}}
    assert TOOL_METADATA == {"antler": {"sandbox": True, "remote_content": False}}


def test_a_forged_sandbox_id_in_the_input_is_ignored(home, provider):
    victim = provider.acquire(PathLayout(home).thread("bob", "t9"))
    agent, _ = make_agent(home, [call("bash", command="pwd"), "done"],
                          services={SANDBOX_PROVIDER: provider})
    with agent:  # (AntlerAgent.invoke refuses such input: tests/runtime/test_input_boundary.py)
        state = agent.graph.invoke({"messages": [{"role": "user", "content": "hi"}],
                                    "sandbox": {"sandbox_id": victim}},
                                   config=agent.run_config("t1"), context=agent.context("t1"))
    assert state["sandbox"] == {"sandbox_id": "local:default/t1"}


def test_a_sandbox_the_provider_forgot_is_replaced(home, provider):
    agent, _ = make_agent(home, [call("bash", command="echo hi"), "done"],
                          services={SANDBOX_PROVIDER: provider})
    with agent:
        config = agent.run_config("t1")
        agent.graph.update_state(config, {"sandbox": {"sandbox_id": "local:gone/t0"}})
        state = agent.invoke("again", thread_id="t1")
    assert state["sandbox"] == {"sandbox_id": "local:default/t1"}
    assert tool_results(state)[0].content == "hi"


@pytest.mark.parametrize("fuse", [True, False])
def test_a_sandbox_id_written_into_state_never_reaches_another_threads_sandbox(
        home, provider, fuse):
    # A thread's owner can write its state (`update_state`, a served graph's state API).
    # Naming another thread's sandbox there must neither run commands in it nor, at the
    # run's end, release it (which stops what it runs in the background).
    script = [call("bash", command="echo secret > victim.txt"), "done",
              call("bash", command="cat victim.txt || echo absent"), "done"]
    agent, _ = make_agent(home, script, services={SANDBOX_PROVIDER: provider}, fuse=fuse)
    with agent:
        agent.invoke("victim writes", thread_id="victim")
        victim = agent.graph.get_state(agent.run_config("victim")).values["sandbox"]
        attacker = agent.run_config("attacker")
        agent.graph.update_state(attacker, {"sandbox": victim})
        provider.released.clear()
        state = agent.invoke("attacker reads", thread_id="attacker")
    read = tool_results(state)[0].content
    assert read.startswith("absent") and "secret" not in read
    assert state["sandbox"] == {"sandbox_id": "local:default/attacker"}
    assert provider.released == ["local:default/attacker"]


@pytest.mark.parametrize("fuse", [True, False])
def test_async_runs_use_the_tools_and_release(home, provider, fuse):
    agent, _ = make_agent(home, [call("write_file", path="a.txt", content="async"), "done"],
                          services={SANDBOX_PROVIDER: provider}, fuse=fuse)
    with agent:
        state = asyncio.run(agent.graph.ainvoke(
            agent.input("go"), config=agent.run_config("t1"), context=agent.context("t1")))
    assert tool_results(state)[0].status == "success"
    assert set(provider.acquired) == {"local:default/t1"}
    assert provider.released == ["local:default/t1"]


# -- configuration and provider sharing -----------------------------------------------------


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_eager_mode_acquires_when_the_run_starts(home, provider, run):
    config = parse_config("sandbox:\n  lazy: false\n", discover())
    agent, _ = make_agent(home, ["hi"], config=config, services={SANDBOX_PROVIDER: provider})
    with agent:
        if run == "invoke":
            state = agent.invoke("hi", thread_id="t1")
        else:
            state = asyncio.run(agent.graph.ainvoke(
                agent.input("hi"), config=agent.run_config("t1"), context=agent.context("t1")))
    assert state["sandbox"] == {"sandbox_id": "local:default/t1"}
    assert PathLayout(home).thread("default", "t1").outputs.is_dir()
    assert set(provider.acquired) == {"local:default/t1"}
    assert provider.released == ["local:default/t1"]


def test_the_loaded_provider_is_shared_and_shut_down_with_the_agent(home):
    config = parse_config("sandbox:\n  provider: local\n  command_timeout: 5\n"
                          "  command_capture_bytes: 2048\n", discover())
    agent, _ = make_agent(home, [call("bash", command="head -c 5000 /dev/zero | tr '\\0' x"),
                                 "done"], config=config)
    with agent:
        provider = agent.services.items[SANDBOX_PROVIDER]
        assert isinstance(provider, LocalSandboxProvider)
        assert (provider.default_timeout, provider.max_output_bytes) == (5.0, 2048)
        state = agent.invoke("run", thread_id="t1")
        assert "[output truncated" in tool_results(state)[0].content
    with pytest.raises(SandboxClosedError):
        provider.acquire(PathLayout(home).thread("default", "t2"))


def test_config_is_validated(home):
    with pytest.raises(ValidationError, match="extra"):
        SandboxConfig.model_validate({"provider": "local", "timeout": 3})
    with pytest.raises(ValidationError, match="command_timeout"):
        SandboxConfig(command_timeout=0)
    with pytest.raises(UnknownSandboxProviderError, match="Did you mean 'local'"):
        make_agent(home, [], config=parse_config("sandbox:\n  provider: locale\n", discover()))


# -- the tools on their own -----------------------------------------------------------------


def tool_runtime(thread_id: str | None, state: dict[str, Any] | None = None) -> Any:
    return SimpleNamespace(context=RunContext(thread_id=thread_id), state=state or {},
                           tool_call_id="call_x")


def test_tools_turn_setup_errors_into_messages(tmp_path):
    tools = {t.name: t for t in build_tools(LocalSandboxProvider(), PathLayout(tmp_path),
                                            SandboxConfig())}
    hostile = tools["write_file"].func(path="a.txt", content="x",  # type: ignore[misc]
                                       runtime=tool_runtime("../t"))
    assert hostile.status == "error" and "Invalid thread id" in hostile.content
    # Outside a graph there is no config to fall back on either.
    missing = tools["ls"].func(runtime=tool_runtime(None))  # type: ignore[misc]
    assert missing.status == "error" and "no thread id" in missing.content
    other = PathLayout(tmp_path).thread("default", "other").as_state()
    mismatch = tools["ls"].func(  # type: ignore[misc]
        runtime=tool_runtime("t1", {"thread_data": other}))
    assert mismatch.status == "error" and "do not match" in mismatch.content
    assert list(tmp_path.iterdir()) == []


def test_tools_have_async_forms(tmp_path):
    tools = {t.name: t for t in build_tools(LocalSandboxProvider(), PathLayout(tmp_path),
                                            SandboxConfig())}
    result = asyncio.run(tools["bash"].coroutine(  # type: ignore[misc]
        command="echo $HOME", runtime=tool_runtime("t1")))
    update = result.update
    assert update["sandbox"] == {"sandbox_id": "local:default/t1"}
    assert update["messages"][0].content == "/mnt/user-data/workspace"


def test_a_tool_call_does_not_copy_the_threads_state(tmp_path):
    """Validating a call's input passes the injected runtime on without dumping its state.

    LangChain dumps the validated input to a dict; with the runtime in it, that would
    serialize every message of the thread on every tool call.
    """
    from langchain.tools import ToolRuntime
    from pydantic import BaseModel, model_serializer

    dumped: list[str] = []

    class Message(BaseModel):
        text: str

        @model_serializer
        def _dump(self) -> dict[str, Any]:
            dumped.append(self.text)
            return {"text": self.text}

    tools = {t.name: t for t in build_tools(LocalSandboxProvider(), PathLayout(tmp_path),
                                            SandboxConfig())}
    state = {"messages": [Message(text=f"m{i}") for i in range(50)]}
    runtime = ToolRuntime(state=state, context=RunContext(thread_id="t1"), config={},
                          stream_writer=None, tool_call_id="call_x", store=None)
    for tool in tools.values():
        parsed = tool._parse_input({**_sample_args(tool.name), "runtime": runtime}, "call_x")
        assert parsed["runtime"] is runtime
        assert "runtime" not in tool.tool_call_schema.model_json_schema()["properties"]
    assert dumped == []


def _sample_args(name: str) -> dict[str, Any]:
    return {"bash": {"command": "true"}, "ls": {}, "read_file": {"path": "a"},
            "write_file": {"path": "a", "content": "x"},
            "str_replace": {"path": "a", "old": "x", "new": "y"},
            "glob": {"pattern": "*", "path": "/mnt/user-data"},
            "grep": {"pattern": "x", "path": "/mnt/user-data"}}[name]


@pytest.mark.parametrize(("run", "fuse"), [("invoke", True), ("ainvoke", False)])
def test_a_lazy_runs_start_readies_a_bwrap_namespace_for_the_first_command(home, run, fuse):
    # The run's start (before the model is called) starts a source of spare namespaces in
    # the background; the chat turn creates no thread directory and no sandbox, and a new
    # thread's first command adopts a spare the source made instead of starting bubblewrap.
    # (Under a
    # base directory no thread has used, a chat turn starts nothing and writes nothing:
    # tests/plugins/test_uploads.py, whose agents use bwrap where it works.)
    from antler.runtime.sandbox.bwrap import BwrapSandboxProvider
    from tests.runtime.sandbox.test_sandbox_bwrap import needs_bwrap

    needs_bwrap()
    provider = BwrapSandboxProvider(default_timeout=20)
    agent, _ = make_agent(home, ["hello", call("bash", command="id -un; pwd"), "done"],
                          services={SANDBOX_PROVIDER: provider}, fuse=fuse)
    layout = agent.services.items[PATHS]
    key = (home / "users", layout.skill_roots)
    (home / "users").mkdir(parents=True)  # a base directory some thread has used before
    spares = provider._settings.spares
    assert spares is not None
    with agent:
        if run == "invoke":
            state = agent.invoke("hi", thread_id="t1")
        else:
            state = asyncio.run(agent.graph.ainvoke(
                agent.input("hi"), config=agent.run_config("t1"), context=agent.context("t1")))
        assert state.get("sandbox") is None
        for _ in range(800):
            if spares.ready(key):
                break
            time.sleep(0.025)
        assert spares.ready(key)
        assert list((home / "users").iterdir()) == []  # no thread's directory
        source = spares._slots[key].namespace
        state = agent.invoke("run it", thread_id="t2")
        assert tool_results(state)[0].content.splitlines() == [
            "sandbox", "/mnt/user-data/workspace"]
        sandbox = provider.get(state["sandbox"]["sandbox_id"])
        namespace = sandbox._namespace
        assert namespace is not None and namespace.init_pid is not None
        # Adopted from the source (its init's child), not started anew.
        assert spares._slots[key].namespace is source and source is not None
        with open(f"/proc/{namespace.init_pid}/stat", "rb") as stat:
            assert int(stat.read().rsplit(b")", 1)[1].split()[1]) == source.init_pid


@pytest.mark.parametrize("fuse", [True, False])
def test_under_bwrap_bash_and_the_file_tools_see_each_others_writes_at_once(home, fuse):
    # The thread's directories are an overlay inside the namespace, which caches what
    # `bash` looked up; the file tools write through it, so nothing they write or `bash`
    # removes is seen late (see the README's "Nothing inside names a host path").
    from antler.plugin_api import confined
    from antler.runtime.sandbox.bwrap import BwrapSandboxProvider
    from tests.runtime.sandbox.test_sandbox_bwrap import needs_bwrap

    needs_bwrap()
    provider = BwrapSandboxProvider(default_timeout=20)
    agent, _ = make_agent(home, [
        call("bash", command="cat notes.md 2>/dev/null || echo absent"),
        call("write_file", path="notes.md", content="kept\n"),
        call("bash", command="cat notes.md; rm notes.md; echo made > made.md"),
        call("read_file", path="notes.md"),
        call("read_file", path="made.md"),
        "done"], services={SANDBOX_PROVIDER: provider}, fuse=fuse)
    try:
        with agent:
            state = agent.invoke("go", thread_id="t1")
            mounted = list(confined._mounts)
        results = [(str(message.content), message.status) for message in tool_results(state)]
    finally:
        provider.shutdown()
    assert results[0] == ("absent", "success"), results
    assert results[2] == ("kept", "success"), results
    assert results[3][1] == "error" and "No such file" in results[3][0], results
    assert results[4] == ("made\n", "success"), results
    # Through the overlay: its root was registered for the thread while the run went on.
    # (Other tests' namespaces in this process may still be registered: only this home's.)
    mine = [path for path in mounted if path.startswith(f"{home}/")]
    assert len(mine) == 1 and mine[0].endswith("/threads/t1/user-data"), mounted
