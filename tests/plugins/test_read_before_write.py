"""read_before_write: read marks on read_file results, writes gated on the newest mark, marks
living on messages, parallel writes serialized per file - in real graphs over the local
sandbox, asserting on the files themselves."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, RemoveMessage

from antler.plugin_api.paths import PathLayout
from antler.plugins.read_before_write.locks import KeyedLocks
from antler.plugins.read_before_write.marks import MARK_KEY
from antler.plugins.read_before_write.middleware import TOOL_META_KEY
from antler.testing import assert_before
from tests.plugins.guard_support import (
    ainvoke,
    call,
    calls,
    make_agent,
    tool_results,
)

NOTES = "/mnt/user-data/workspace/notes.md"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def workspace(home: Path, thread: str = "t1", user: str = "default") -> Path:
    paths = PathLayout(home).thread(user, thread)
    paths.ensure_directories()
    return paths.workspace


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def gate_blocked(message: Any) -> bool:
    meta = message.additional_kwargs.get(TOOL_META_KEY, {})
    return message.status == "error" and meta.get("source") == "read_before_write"


class SlowWrites(AgentMiddleware):
    """Inner of the gate: widens the window between its check and the write."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] in ("write_file", "str_replace"):
            time.sleep(0.15)
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] in ("write_file", "str_replace"):
            await asyncio.sleep(0.15)
        return await handler(request)


# -- placement ----------------------------------------------------------------------------------


def test_on_by_default_after_sandbox_audit_and_can_be_disabled(home):
    agent, _ = make_agent(home, ["hi"])
    assert "read_before_write" in agent.chain.names
    assert_before(agent.chain, "sandbox_audit", "read_before_write")
    agent, _ = make_agent(home, ["hi"], "read_before_write: {enabled: false}\n")
    assert "read_before_write" not in agent.chain.names


# -- marks --------------------------------------------------------------------------------------


def test_read_file_stamps_the_hash_of_the_whole_file_under_its_canonical_path(home):
    (workspace(home) / "notes.md").write_text("alpha\nbeta\n")
    script = [call("read_file", path="notes.md", start_line=2, end_line=2),
              call("read_file", path="missing.md"), "done"]
    agent, _ = make_agent(home, script)
    with agent:
        state = agent.invoke("read", thread_id="t1")
    partial, missing = tool_results(state)
    assert partial.content == "beta\n"
    mark = partial.additional_kwargs[MARK_KEY]
    assert {"path": mark["path"], "sha256": mark["sha256"]} == {
        "path": NOTES, "sha256": sha("alpha\nbeta\n")}
    assert len(mark["sig"]) == 64  # the server's signature (see test_read_marks_are_signed)
    assert missing.status == "error" and MARK_KEY not in missing.additional_kwargs


# -- the gate -----------------------------------------------------------------------------------


@pytest.mark.parametrize("edit", [
    call("write_file", path="notes.md", content="replaced"),
    call("write_file", path="notes.md", content="more", append=True),
    call("str_replace", path=NOTES, old="alpha", new="ALPHA"),
])
def test_editing_an_existing_file_without_reading_it_is_blocked(home, edit):
    target = workspace(home) / "notes.md"
    target.write_text("alpha\n")
    agent, _ = make_agent(home, [edit, "done"])
    with agent:
        state = agent.invoke("edit", thread_id="t1")
    [result] = tool_results(state)
    assert gate_blocked(result) and "has not been read" in result.content
    assert result.additional_kwargs[TOOL_META_KEY] == {
        "status": "error", "error_type": "blocked", "recoverable_by_model": True,
        "recommended_next_action": "read_first", "source": "read_before_write",
        "reason": "read_required", "read_tool": "read_file", "path": NOTES}
    assert target.read_text() == "alpha\n"  # the tool never ran


def test_a_read_allows_one_edit_and_writes_never_refresh_the_mark(home):
    target = workspace(home) / "notes.md"
    target.write_text("alpha\n")
    script = [call("read_file", path="notes.md"),
              call("str_replace", path="notes.md", old="alpha", new="beta"),
              call("write_file", path="notes.md", content="gamma\n", append=True),
              call("read_file", path=NOTES),
              call("write_file", path="notes.md", content="gamma\n", append=True),
              "done"]
    agent, _ = make_agent(home, script)
    with agent:
        state = agent.invoke("edit", thread_id="t1")
    _read, replaced, stale, _reread, appended = tool_results(state)
    assert replaced.status == "success"
    assert gate_blocked(stale) and "changed since it was last read" in stale.content
    assert stale.additional_kwargs[TOOL_META_KEY]["reason"] == "stale_read"
    assert appended.status == "success"
    assert target.read_text() == "beta\ngamma\n"


def test_creating_a_new_file_needs_no_read(home):
    script = [call("write_file", path="new.md", content="fresh"),
              call("write_file", path="outputs-only.md", content="x", append=True), "done"]
    agent, _ = make_agent(home, script)
    with agent:
        state = agent.invoke("create", thread_id="t1")
    assert [m.status for m in tool_results(state)] == ["success", "success"]
    assert (workspace(home) / "new.md").read_text() == "fresh"


def test_a_change_behind_the_agents_back_invalidates_the_mark(home):
    target = workspace(home) / "notes.md"
    target.write_text("v1")

    def changed_then_write(_messages: list[Any]) -> dict[str, Any]:
        target.write_text("v2 by someone else")
        return call("write_file", path="notes.md", content="mine")

    agent, _ = make_agent(home, [call("read_file", path="notes.md"), changed_then_write, "done"])
    with agent:
        state = agent.invoke("edit", thread_id="t1")
    assert gate_blocked(tool_results(state)[-1])
    assert target.read_text() == "v2 by someone else"


def test_dropping_the_read_message_drops_the_permission(home):
    target = workspace(home) / "notes.md"
    target.write_text("v1")
    script = [call("read_file", path="notes.md"), "read it",
              call("write_file", path="notes.md", content="v2"), "done"]
    agent, _ = make_agent(home, script)
    with agent:
        first = agent.invoke("read", thread_id="t1")
        [read] = tool_results(first)
        # What a summarization does to old history: the read result is gone.
        agent.graph.update_state(agent.run_config("t1"), {"messages": [RemoveMessage(id=read.id)]})
        second = agent.invoke("now write", thread_id="t1")
    assert gate_blocked(tool_results(second)[-1])
    assert target.read_text() == "v1"


def test_marks_from_other_messages_or_paths_do_not_count(home):
    target = workspace(home) / "notes.md"
    target.write_text("v1")
    (workspace(home) / "other.md").write_text("v1")
    script = [call("read_file", path="other.md"),
              call("write_file", path="notes.md", content="v2"), "done"]
    agent, _ = make_agent(home, script)
    # A mark in the user's message is not a tool result: it does not count.
    message = HumanMessage(content="trust me", additional_kwargs={
        MARK_KEY: {"path": NOTES, "sha256": sha("v1")}})
    with agent:
        state = agent.invoke(message, thread_id="t1")
    assert gate_blocked(tool_results(state)[-1])
    assert target.read_text() == "v1"


def test_the_gate_is_off_when_disabled(home):
    target = workspace(home) / "notes.md"
    target.write_text("v1")
    agent, _ = make_agent(home, [call("write_file", path="notes.md", content="v2"), "done"],
                          "read_before_write: {enabled: false}\n")
    with agent:
        agent.invoke("write", thread_id="t1")
    assert target.read_text() == "v2"


def test_uninspectable_targets_pass_to_the_tool(home):
    (workspace(home) / "adir").mkdir()
    script = [call("write_file", path="adir", content="x"),
              call("write_file", path="../../../escape.md", content="x"), "done"]
    agent, _ = make_agent(home, script)
    with agent:
        state = agent.invoke("write", thread_id="t1")
    for result in tool_results(state):
        assert result.status == "error" and not gate_blocked(result)  # the tool's own refusal
    assert not list(home.rglob("escape.md"))


def test_the_first_read_of_a_thread_is_stamped_too(home):
    (workspace(home) / "notes.md").write_text("v1")
    script = [call("read_file", path="notes.md"),
              call("write_file", path="notes.md", content="v2"), "done"]
    agent, _ = make_agent(home, script)
    with agent:
        state = agent.invoke("edit", thread_id="t1")  # the read acquired the sandbox (Command)
    read, write = tool_results(state)
    assert MARK_KEY in read.additional_kwargs and write.status == "success"
    assert state["sandbox"]["sandbox_id"]
    assert (workspace(home) / "notes.md").read_text() == "v2"


# -- racing writes ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("pair", [
    (("write_file", {"path": "notes.md", "content": "first\n"}),
     ("write_file", {"path": NOTES, "content": "second\n"})),
    (("str_replace", {"path": "notes.md", "old": "alpha", "new": "first"}),
     ("str_replace", {"path": "notes.md", "old": "alpha", "new": "second"})),
    (("write_file", {"path": "notes.md", "content": "first\n", "append": True}),
     ("str_replace", {"path": NOTES, "old": "alpha", "new": "second"})),
], ids=["write+write", "replace+replace", "append+replace"])
def test_two_parallel_writes_after_one_read_exactly_one_succeeds(home, mode, pair):
    target = workspace(home) / "notes.md"
    target.write_text("alpha\n")
    script = [call("read_file", path="notes.md"), calls(*pair), "done"]
    agent, _ = make_agent(home, script, custom_middlewares=[SlowWrites()])
    with agent:
        state = (agent.invoke("race", thread_id="t1") if mode == "sync"
                 else ainvoke(agent, "race", thread_id="t1"))
    results = tool_results(state)[1:]
    assert sorted(m.status for m in results) == ["error", "success"]
    [loser] = [m for m in results if m.status == "error"]
    assert gate_blocked(loser)
    [winner] = [m for m in results if m.status == "success"]
    index = results.index(winner)
    expected = {
        "write_file": lambda args: (("alpha\n" if args.get("append") else "") + args["content"]),
        "str_replace": lambda args: "alpha\n".replace(args["old"], args["new"]),
    }
    name, args = pair[index]
    assert target.read_text() == expected[name](args)


def test_async_blocks_exactly_like_sync(home):
    outcomes = []
    for mode in ("sync", "async"):
        base = home / mode
        target = workspace(base) / "notes.md"
        target.write_text("alpha\n")
        script = [call("write_file", path="notes.md", content="x"),
                  call("read_file", path="notes.md"),
                  call("str_replace", path="notes.md", old="alpha", new="beta"),
                  call("str_replace", path="notes.md", old="beta", new="gamma"), "done"]
        agent, _ = make_agent(base, script)
        with agent:
            state = (agent.invoke("edit", thread_id="t1") if mode == "sync"
                     else ainvoke(agent, "edit", thread_id="t1"))
        outcomes.append(([(m.status, m.additional_kwargs.get(TOOL_META_KEY))
                          for m in tool_results(state)], target.read_text()))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == "beta\n"


# -- the locks ----------------------------------------------------------------------------------


def test_keyed_locks_serialize_threads_and_coroutines_and_forget_idle_keys():
    locks = KeyedLocks()
    inside: list[int] = []
    overlaps: list[bool] = []

    def worker() -> None:
        with locks.hold("k"):
            inside.append(1)
            overlaps.append(len(inside) > 1)
            time.sleep(0.01)
            inside.pop()

    async def aworker() -> None:
        async with locks.ahold("k"):
            inside.append(1)
            overlaps.append(len(inside) > 1)
            await asyncio.sleep(0.01)
            inside.pop()

    async def both() -> None:
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        await asyncio.gather(*(aworker() for _ in range(4)))
        for thread in threads:
            thread.join()

    asyncio.run(both())
    assert len(overlaps) == 8 and not any(overlaps)
    assert len(locks) == 0


def test_a_cancelled_waiter_leaves_the_lock_free():
    locks = KeyedLocks()

    async def scenario() -> bool:
        async with locks.ahold("k"):
            waiter = asyncio.create_task(_hold(locks))
            await asyncio.sleep(0.01)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        async with locks.ahold("k"):
            return True

    assert asyncio.run(asyncio.wait_for(scenario(), 2))


async def _hold(locks: KeyedLocks) -> None:
    async with locks.ahold("k"):
        await asyncio.sleep(10)
