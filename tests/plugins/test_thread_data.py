"""thread_data: the thread's paths in state, validated ids, and no disk writes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from antler.contracts.runcontext import RunContext
from antler.errors import BuildError
from antler.plugin_api.context import MODEL, PATHS, Services
from antler.plugin_api.paths import InvalidIdentifierError, PathLayout
from antler.plugins.thread_data.middleware import (
    MissingThreadIdError,
    ThreadDataMiddleware,
    build,
)
from antler.runtime.models import ScriptedChatModel
from tests.plugins.support import make_agent


def files_under(path: Path) -> list[Path]:
    return sorted(path.rglob("*")) if path.exists() else []


def test_a_chat_turn_records_the_thread_paths_and_writes_nothing(tmp_path):
    home = tmp_path / "home"
    agent, _ = make_agent(home, ["Hello!"])
    with agent:
        state = agent.invoke("hi", thread_id="t1")
        assert files_under(home) == []
    expected = PathLayout(home).thread("default", "t1")
    assert state["thread_data"] == expected.as_state()
    assert state["thread_data"]["workspace_path"].endswith(
        "users/default/threads/t1/user-data/workspace")


def test_paths_live_in_the_bucket_of_the_run_context_user(tmp_path):
    home = tmp_path / "home"
    agent, _ = make_agent(home, ["one", "two"])
    with agent:
        alice = agent.invoke("hi", thread_id="t1", user_id="alice")["thread_data"]
        bob = agent.invoke("hi", thread_id="t2", user_id="bob")["thread_data"]
    assert "/users/alice/threads/t1/" in alice["uploads_path"]
    assert "/users/bob/threads/t2/" in bob["uploads_path"]


@pytest.mark.parametrize("thread_id", ["../escape", "a/b", "..", "t\x00", "t\n1", "x" * 200])
def test_hostile_thread_ids_are_refused_with_a_clear_error(tmp_path, thread_id):
    home = tmp_path / "home"
    agent, model = make_agent(home, ["never"])
    with agent, pytest.raises(InvalidIdentifierError, match="Invalid thread id"):
        agent.invoke("hi", thread_id=thread_id)
    assert model.calls == []  # refused before the model saw anything
    assert files_under(home) == []
    assert not (tmp_path / "escape").exists()


def test_a_hostile_user_id_is_refused(tmp_path):
    agent, _ = make_agent(tmp_path / "home", ["never"])
    with agent, pytest.raises(InvalidIdentifierError, match="Invalid user id"):
        agent.invoke("hi", thread_id="t1", user_id="../../root")


def test_a_run_without_any_thread_id_is_a_clear_error(tmp_path):
    agent, _ = make_agent(tmp_path / "home", ["never"], checkpointer=None)
    with agent, pytest.raises(MissingThreadIdError, match="no thread id"):
        agent.graph.invoke({"messages": [HumanMessage("hi")]}, context=RunContext())


def test_the_thread_id_falls_back_to_the_checkpointer_config(tmp_path):
    home = tmp_path / "home"
    agent, _ = make_agent(home, ["ok"])
    with agent:
        state = agent.graph.invoke({"messages": [HumanMessage("hi")]},
                                   config={"configurable": {"thread_id": "from-config"}})
    assert state["thread_data"] == PathLayout(home).thread("default", "from-config").as_state()


def test_thread_data_in_the_graph_input_is_ignored(tmp_path):
    home = tmp_path / "home"
    agent, _ = make_agent(home, ["ok"])
    forged = {"workspace_path": "/etc", "uploads_path": "/etc", "outputs_path": "/etc"}
    with agent:  # (AntlerAgent.invoke refuses such input: tests/runtime/test_input_boundary.py)
        state = agent.graph.invoke({"messages": [HumanMessage("hi")], "thread_data": forged},
                                   config=agent.run_config("t1"), context=agent.context("t1"))
    assert state["thread_data"] == PathLayout(home).thread("default", "t1").as_state()


@pytest.mark.parametrize("fuse", [True, False])
def test_async_runs_record_the_same_paths(tmp_path, fuse):
    home = tmp_path / "home"
    agent, _ = make_agent(home, ["ok"], fuse=fuse)
    with agent:
        state = asyncio.run(agent.graph.ainvoke(
            agent.input("hi"), config=agent.run_config("t1"), context=agent.context("t1")))
    assert state["thread_data"] == PathLayout(home).thread("default", "t1").as_state()
    assert files_under(home) == []


# -- the middleware on its own ----------------------------------------------------------------


def runtime(thread_id: str | None, user_id: str = "default") -> Any:
    return SimpleNamespace(context=RunContext(thread_id=thread_id, user_id=user_id))


def test_an_unchanged_record_is_not_written_again(tmp_path):
    middleware = ThreadDataMiddleware(PathLayout(tmp_path))
    update = middleware.before_agent({"messages": []}, runtime("t1"))
    assert update is not None
    state = {"messages": [], **update}
    assert middleware.before_agent(state, runtime("t1")) is None
    assert asyncio.run(middleware.abefore_agent(state, runtime("t1"))) is None
    assert list(tmp_path.iterdir()) == []


def test_the_factory_needs_a_path_layout(antler_build, tmp_path):
    built = antler_build(services={PATHS: PathLayout(tmp_path), MODEL: ScriptedChatModel([])})
    entry = built.entries[built.names.index("thread_data")]
    assert isinstance(entry.middleware, ThreadDataMiddleware)
    assert entry.hooks == ["before_agent"]
    context = SimpleNamespace(services=Services({PATHS: "not a layout"}))
    with pytest.raises(TypeError, match="PathLayout"):
        build(context)  # type: ignore[arg-type]
    with pytest.raises((BuildError, KeyError), match="paths"):
        antler_build(services={})
