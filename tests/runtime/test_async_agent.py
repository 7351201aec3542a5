"""The async API (`AntlerAgent.ainvoke`, `astream`, `aclose`) through the real chains.

Every run here happens under blockbuster, the blocking-call detector LangGraph's
dev server uses: a blocking call (file I/O, `time.sleep`, a lock wait, a
subprocess wait) made on the event loop's thread raises `BlockingError`. A
plugin's error policy or the tool error handler may turn that error into a
logged skip or an error result, so the tests record every `BlockingError`
raised, caught or not, and require none.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import blockbuster.blockbuster as blockbuster_module
import pytest
from blockbuster import blockbuster_ctx
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from antler.errors import InputError
from antler.plugin_api.context import (
    MEMORY_MODEL,
    MEMORY_QUEUE,
    SANDBOX_PROVIDER,
    TITLE_MODEL,
    RuntimeOptions,
)
from antler.plugin_api.registry import discover
from antler.plugin_api.uploads import stage_upload
from antler.runtime.agent import AntlerAgent, create_agent
from antler.runtime.demo import all_optional_config
from antler.runtime.models import ScriptedChatModel
from antler.runtime.sandbox.local import LocalSandboxProvider
from antler.runtime.storage import StorageError, ThreadBusyError, ThreadOwnershipError
from antler.runtime.tracing import Tracer

THREAD = "t-async"
LANGCHAIN_BUILTINS = "antler.contrib.langchain_builtins"
USER = "alice"
HANG_GUARD = 60
"""Seconds a step that waits on another run may take before the test fails instead of
hanging (a guard only: it says nothing about speed)."""
FILE = "/mnt/user-data/workspace/notes.txt"
# A 1x1 PNG, uploaded so `view_image` has something to show.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5E"
    "rkJggg==")

# One turn that goes through every kind of hook the built-ins have: the file
# tools (read_before_write, the audit, tool_call_log), a shell command, a
# delegated task (the subagent chain), an image, todos, then a final answer.
# Parallel calls keep it within the agent's recursion limit on the unfused full chain.
TURN_ONE: list[Any] = [
    {"content": "", "tool_calls": [
        {"name": "write_file", "args": {"path": FILE, "content": "alpha\nbeta\n"}}]},
    {"content": "", "tool_calls": [
        {"name": "read_file", "args": {"path": FILE}},
        {"name": "ls", "args": {}},
        {"name": "bash", "args": {"command": f"cat {FILE}"}},
        {"name": "task", "args": {"description": "summarize", "prompt": "Say done."}},
        {"name": "view_image", "args": {"image_path": "/mnt/user-data/uploads/pixel.png"}},
        {"name": "write_todos", "args": {"todos": [
            {"content": "check the notes", "status": "completed"}]}}]},
    {"content": "", "tool_calls": [
        {"name": "str_replace", "args": {"path": FILE, "old": "beta", "new": "gamma"}}]},
    "The notes now read alpha and gamma.",
]
TURN_TWO: list[Any] = ["Still alpha and gamma."]
TOOL_RESULTS = {
    "write_file": f"Wrote 11 characters to {FILE}.",
    "read_file": "alpha\nbeta\n",
    "str_replace": f"Replaced 1 occurrence in {FILE}.",
    "bash": "alpha\nbeta",
    "task": "done",
}


class ReleaseLog(LocalSandboxProvider):
    """The local provider, noting each sandbox a run gives back."""

    def __init__(self) -> None:
        super().__init__()
        self.released: list[str] = []

    def release(self, sandbox_id: str) -> None:
        self.released.append(sandbox_id)
        super().release(sandbox_id)


@pytest.fixture
def blocking_calls(monkeypatch) -> list[str]:
    """Every `BlockingError` blockbuster raises while a test runs, swallowed or not."""
    raised: list[str] = []
    original = blockbuster_module.BlockingError.__init__

    def record(self: Any, func: str) -> None:
        raised.append(func)
        original(self, func)

    monkeypatch.setattr(blockbuster_module.BlockingError, "__init__", record)
    return raised


def build(home: Path, *, full: bool, fuse: bool, script: list[Any],
          checkpointer: Any = "memory", tracer: Tracer | None = None) -> AntlerAgent:
    registry = discover()
    config = full_config(registry) if full else None
    services = {TITLE_MODEL: ScriptedChatModel(["Notes edit"] * 3),
                MEMORY_MODEL: ScriptedChatModel(['["The user keeps notes."]'] * 3),
                SANDBOX_PROVIDER: ReleaseLog()}
    return create_agent(
        config, model=ScriptedChatModel(script, model_name="scripted-lead"),
        subagent_model=ScriptedChatModel(["done"] * 3, model_name="scripted-sub"),
        runtime=RuntimeOptions(subagents_enabled=True, plan_mode=True, supports_vision=True,
                               user_id=USER),
        services=services, base_dir=home, registry=registry, checkpointer=checkpointer,
        fuse=fuse, tracer=tracer)


def upload_pixel(agent: AntlerAgent, scratch: Path) -> list[dict[str, Any]]:
    source = scratch / "pixel.png"
    source.write_bytes(PIXEL)
    return [stage_upload(agent.services.get("paths").thread(USER, THREAD), source)]


def results_by_tool(messages: list[Any]) -> dict[str, str]:
    return {str(m.name): str(m.content) for m in messages if isinstance(m, ToolMessage)}


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("full", [False, True], ids=["default", "all-optional"])
def test_two_async_turns_run_every_hook_without_blocking_the_loop(
        tmp_path, blocking_calls, full, fuse):
    tracer = Tracer()
    agent = build(tmp_path / "home", full=full, fuse=fuse, script=TURN_ONE + TURN_TWO,
                  tracer=tracer)
    files = upload_pixel(agent, tmp_path)

    async def conversation() -> tuple[dict[str, Any], list[Any]]:
        with blockbuster_ctx():
            first = await agent.ainvoke("Edit my notes.", thread_id=THREAD, user_id=USER,
                                        files=files)
            chunks = [chunk async for chunk in agent.astream(
                "And now?", thread_id=THREAD, user_id=USER)]
            await agent.aclose()
        return first, chunks

    first, chunks = asyncio.run(conversation())

    assert blocking_calls == []
    # Every plugin of the chain ran at least one of its hooks in these async runs.
    ran = {event.plugin for event in tracer.events}
    assert [name for name in agent.chain.names if name not in ran] == []
    results = results_by_tool(first["messages"])
    for tool, expected in TOOL_RESULTS.items():
        assert results[tool].strip() == expected.strip(), tool
    assert "notes.txt" in results["ls"]
    assert "pixel.png" in results["view_image"]
    assert first["title"] == "Notes edit"
    assert first["messages"][-1].content == "The notes now read alpha and gamma."
    # The second turn saw the first (the checkpoint) and ended with its own answer.
    last_update = [chunk for chunk in chunks if "model" in chunk][-1]["model"]
    assert last_update["messages"][-1].content == "Still alpha and gamma."
    # Run-end handling ran in the async graph: each run gave the thread's sandbox back.
    provider = agent.services.get(SANDBOX_PROVIDER)
    assert provider.released == [first["sandbox"]["sandbox_id"]] * 2


@pytest.mark.parametrize("full", [False, True], ids=["default", "all-optional"])
def test_the_subagent_chain_runs_async_without_blocking_the_loop(tmp_path, blocking_calls, full):
    # A delegated task runs its subagent inside the lead's (sync) `task` tool; the
    # subagent chain's own async hooks are run here, as an agent of their own.
    registry = discover()
    tracer = Tracer()
    script = [
        {"content": "", "tool_calls": [
            {"name": "write_file", "args": {"path": FILE, "content": "sub\n"}}]},
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": f"cat {FILE}"}}]},
        "sub done"]
    agent = create_agent(
        full_config(registry) if full else None, chain="subagent",
        model=ScriptedChatModel(script), base_dir=tmp_path, registry=registry,
        checkpointer="memory", tracer=tracer,
        runtime=RuntimeOptions(supports_vision=True, user_id=USER))

    async def run() -> dict[str, Any]:
        with blockbuster_ctx():
            state = await agent.ainvoke("Do it.", thread_id=THREAD, user_id=USER)
            await agent.aclose()
        return state

    state = asyncio.run(run())
    assert blocking_calls == []
    assert results_by_tool(state["messages"])["bash"].strip() == "sub"
    ran = {event.plugin for event in tracer.events}
    assert [name for name in agent.chain.names if name not in ran] == []


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_astream_yields_the_chunks_stream_yields(tmp_path, fuse):
    script = [{"content": "", "tool_calls": [{"name": "bash", "args": {"command": "echo hi"}}]},
              "said hi"]

    def names(chunks: list[Any]) -> list[str]:
        return [name for chunk in chunks for name in chunk]

    sync_agent = build(tmp_path / "sync", full=False, fuse=fuse, script=list(script))
    with sync_agent:
        expected = names(list(sync_agent.stream("hi", thread_id=THREAD, user_id=USER)))
    async_agent = build(tmp_path / "async", full=False, fuse=fuse, script=list(script))

    async def run() -> list[Any]:
        async with async_agent:
            return [chunk async for chunk in async_agent.astream(
                "hi", thread_id=THREAD, user_id=USER)]

    got = names(asyncio.run(run()))
    assert got == expected
    assert "tools" in got and "SandboxMiddleware.after_agent" in got


def test_ainvoke_refuses_another_users_thread_before_any_step(tmp_path):
    agent = build(tmp_path / "home", full=False, fuse=True, script=["one", "two"])

    async def run() -> None:
        await agent.ainvoke("hi", thread_id=THREAD, user_id=USER)
        with pytest.raises(ThreadOwnershipError, match="belongs to another user"):
            await agent.ainvoke("let me in", thread_id=THREAD, user_id="mallory")
        await agent.aclose()

    asyncio.run(run())
    messages = agent.graph.get_state(agent.run_config(THREAD)).values["messages"]
    assert [m.content for m in messages if isinstance(m, HumanMessage)] == ["hi"]


def full_config(registry: Any) -> Any:
    """Every optional plugin on (`all_optional_config`), but for LangChain's middlewares
    from `antler.contrib.langchain_builtins`, which need settings of their own (fallback
    models, a selector model, approvals) that the scenario here does not give them."""
    config = all_optional_config(registry)
    for spec in registry.specs.values():
        section = config.section(spec.section)
        if spec.factory.startswith(LANGCHAIN_BUILTINS) and section is not None:
            config.sections[spec.section] = section.model_copy(update={"enabled": False})
    return config


def held_model_agent(home: Path, replies: list[str]) -> tuple[AntlerAgent, asyncio.Event,
                                                             asyncio.Event]:
    """An agent whose model call signals `entered`, then waits for `release`."""
    entered, release = asyncio.Event(), asyncio.Event()

    class HeldModel(ScriptedChatModel):
        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            entered.set()
            await release.wait()
            return await super()._agenerate(*args, **kwargs)

    agent = create_agent(model=HeldModel(replies), checkpointer="memory", base_dir=home,
                         services={TITLE_MODEL: ScriptedChatModel(["t"] * 3),
                                   MEMORY_MODEL: ScriptedChatModel(["[]"] * 3)})
    return agent, entered, release


async def until_inside(first: asyncio.Task[Any], entered: asyncio.Event) -> None:
    """Wait until `first` is in its model call; raise what ended it if it never got there
    (a run that failed early would otherwise leave the test waiting forever)."""
    watching = asyncio.ensure_future(entered.wait())
    await asyncio.wait([first, watching], timeout=HANG_GUARD,
                       return_when=asyncio.FIRST_COMPLETED)
    watching.cancel()
    if first.done():
        first.result()
        pytest.fail("the first run ended before its model call")
    if not entered.is_set():
        pytest.fail(f"the first run did not reach its model call in {HANG_GUARD} s")


def test_a_busy_thread_raises_or_waits_in_async_runs(tmp_path):
    agent, entered, release = held_model_agent(tmp_path, ["first", "second"])

    async def run() -> list[str]:
        first = asyncio.create_task(agent.ainvoke("one", thread_id=THREAD, user_id=USER))
        try:
            await until_inside(first, entered)
            # Bounded: a second run let through would wait in the model for a release
            # given only after this refusal, and the test would hang instead of failing.
            try:
                await asyncio.wait_for(agent.ainvoke("two", thread_id=THREAD, user_id=USER),
                                       HANG_GUARD)
            except ThreadBusyError as refused:
                assert "is busy" in str(refused)
            except TimeoutError:
                pytest.fail("a second run of the held thread was let in beside the first")
            else:
                pytest.fail("a second run of the held thread was not refused")
            queued = asyncio.create_task(
                agent.ainvoke("two", thread_id=THREAD, user_id=USER, wait=True))
        finally:
            release.set()
        states = await asyncio.wait_for(asyncio.gather(first, queued), HANG_GUARD)
        await agent.aclose()
        return [state["messages"][-1].content for state in states]

    assert asyncio.run(run()) == ["first", "second"]


def test_a_run_cancelled_while_waiting_for_a_busy_thread_does_not_keep_it(tmp_path):
    agent, entered, release = held_model_agent(tmp_path, ["first", "third"])

    async def run() -> str:
        first = asyncio.create_task(agent.ainvoke("one", thread_id=THREAD, user_id=USER))
        await until_inside(first, entered)
        waiting = asyncio.create_task(
            agent.ainvoke("two", thread_id=THREAD, user_id=USER, wait=True))
        await asyncio.sleep(0.1)  # let it reach the lock (the test passes either way)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await first
        for _attempt in range(200):  # the cancelled waiter gives the lock back when it gets it
            try:
                state = await agent.ainvoke("three", thread_id=THREAD, user_id=USER)
                break
            except ThreadBusyError:
                await asyncio.sleep(0.05)
        else:
            pytest.fail("the thread stayed busy after the cancelled run")
        await agent.aclose()
        return str(state["messages"][-1].content)

    assert asyncio.run(run()) == "third"


def test_async_input_is_checked_like_sync_input(tmp_path):
    agent = build(tmp_path / "home", full=False, fuse=True, script=["one", "two"])

    async def run() -> dict[str, Any]:
        await agent.ainvoke(HumanMessage(content="first", id="m1"), thread_id=THREAD,
                            user_id=USER)
        # A repeated id gets a fresh one instead of replacing the thread's message.
        state = await agent.ainvoke(HumanMessage(content="again", id="m1"),
                                    thread_id=THREAD, user_id=USER)
        with pytest.raises(InputError, match="role 'ai'"):
            await agent.ainvoke(AIMessage(content="I am the model"), thread_id=THREAD,
                                user_id=USER)
        await agent.aclose()
        return state

    state = asyncio.run(run())
    humans = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
    assert humans == ["first", "again"]


def test_async_run_on_a_sync_only_checkpointer_says_what_to_do(tmp_path):
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    connection = sqlite3.connect(str(tmp_path / "caller.sqlite"), check_same_thread=False)
    agent = build(tmp_path / "home", full=False, fuse=True, script=["never"],
                  checkpointer=SqliteSaver(connection))

    async def run() -> None:
        async with agent:
            await agent.ainvoke("hi", thread_id=THREAD, user_id=USER)

    with pytest.raises(StorageError, match="checkpointer='memory'"):
        asyncio.run(run())
    connection.close()


def test_async_run_without_checkpoints_needs_no_storage(tmp_path):
    agent = build(tmp_path / "home", full=False, fuse=False, script=["hello"],
                  checkpointer=None)

    async def run() -> dict[str, Any]:
        async with agent:
            return await agent.ainvoke("hi", thread_id=THREAD, user_id=USER)

    state = asyncio.run(run())
    assert isinstance(state["messages"][-1], AIMessage)
    assert state["messages"][-1].content == "hello"
    assert agent.services.items.get(MEMORY_QUEUE).closed
