"""Plugin tool calls nothing observes skip LangChain's tool run (`antler.runtime.quiettools`).

Through the real chain, fused and unfused: the same turns run once with no handler and
once with a tracer in the run's config. Unobserved, LangChain starts no tool run for
the plugin tools; observed, the tracer sees each tool run. The answers are the same
either way: results, an argument error, a refusal of the path boundary, and the sandbox
state the first call records (a `Command`, which the state-write guard still checks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManager
from langchain_core.messages import ToolMessage

from tests.plugins.support import ToolRuns as _ToolRuns
from tests.plugins.support import make_agent

FUSE = pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])


def _turns() -> list[Any]:
    return [
        {"tool_calls": [{"name": "write_file", "args": {"path": "notes.md",
                                                        "content": "alpha\n"}}]},
        {"tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data/workspace"}},
                        {"name": "read_file", "args": {"path": "/etc/passwd"}}]},
        {"tool_calls": [{"name": "ls", "args": {"path": 7, "extra": True}}]},
        {"tool_calls": [{"name": "bash", "args": {"command": "cat notes.md"}}]},
        "done",
    ]


def _answers(state: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(m.name, m.status, m.content) for m in state["messages"]
            if isinstance(m, ToolMessage)]


@FUSE
def test_plugin_tools_answer_alike_with_and_without_a_tracer(tmp_path: Path, fuse: bool,
                                                             monkeypatch: Any) -> None:
    ran: list[str] = []  # the tool runs LangChain starts, handlers or not
    start = CallbackManager.on_tool_start
    monkeypatch.setattr(CallbackManager, "on_tool_start", lambda self, serialized, *a, **k: (
        ran.append(serialized["name"]), start(self, serialized, *a, **k))[1])
    agent, _ = make_agent(tmp_path / "quiet", _turns(), fuse=fuse,
                          config=_config())
    with agent:
        quiet = agent.invoke("work", thread_id="t1")
    assert ran == []  # no LangChain tool run for a call nothing observes
    tracer = _ToolRuns()
    agent, _ = make_agent(tmp_path / "traced", _turns(), fuse=fuse, config=_config())
    with agent:
        traced = agent.graph.invoke(agent.input("work"), context=agent.context("t1"),
                                    config={**agent.run_config("t1"),
                                            "callbacks": [tracer]})
    assert sorted(ran) == sorted(tracer.names) == ["bash", "ls", "ls", "read_file",
                                                   "write_file"]
    answers = _answers(quiet)
    assert answers == _answers(traced)
    assert [status for _, status, _ in answers] == [
        "success", "success", "error", "error", "success"]
    assert "Input should be a valid string" in answers[3][2]  # the argument error, as is
    assert answers[4][2].strip() == "alpha"
    assert quiet["sandbox"] == traced["sandbox"] and quiet["sandbox"]["sandbox_id"]


def _config() -> Any:
    from antler.chain.config import parse_config
    from antler.plugin_api.registry import discover

    return parse_config("read_before_write: {enabled: false}\n", discover())
