"""The model-call budget of a run (`agent.max_model_calls`) and the step limit it sets.

Through the real `create_agent` graph, unfused (one graph step per hook) and
fused: a run of many model calls is not cut short by a fixed step limit, and a
run that needs more calls than its budget stops with a `ModelCallBudgetError`
that names the setting, keeping what it saved.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from langchain.tools import tool
from langchain_core.messages import ToolMessage

from antler.chain.config import parse_config
from antler.cli import cli
from antler.errors import ModelCallBudgetError
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

FUSE = pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])


@tool
def note(text: str) -> str:
    """Write a note."""
    return f"noted {text}"


def rounds(calls: int) -> list[Any]:
    """A script of `calls` model calls: `calls - 1` tool calls, then the answer."""
    return [{"content": "", "tool_calls": [{"name": "note", "args": {"text": f"step {i}"}}]}
            for i in range(calls - 1)] + ["finished"]


def budget(calls: int) -> Any:
    return parse_config(f"agent: {{max_model_calls: {calls}}}\n", discover())


@FUSE
def test_a_lead_run_of_a_dozen_model_calls_completes_under_the_default_budget(tmp_path, fuse):
    model = ScriptedChatModel(rounds(12))
    with create_agent(model=model, tools=[note], checkpointer="memory", base_dir=tmp_path,
                      fuse=fuse) as agent:
        state = agent.invoke("go", thread_id="t1")
    assert state["messages"][-1].content == "finished"
    assert len(model.calls) == 12
    assert agent.max_model_calls == 50


@FUSE
def test_a_run_within_its_budget_completes_and_one_call_more_is_refused(tmp_path, fuse):
    with create_agent(budget(3), model=ScriptedChatModel(rounds(3)), tools=[note],
                      checkpointer="memory", base_dir=tmp_path / "a", fuse=fuse) as agent:
        assert agent.invoke("go", thread_id="t1")["messages"][-1].content == "finished"

    model = ScriptedChatModel(rounds(6))
    with create_agent(budget(3), model=model, tools=[note], checkpointer="memory",
                      base_dir=tmp_path / "b", fuse=fuse) as agent:
        with pytest.raises(ModelCallBudgetError) as raised:
            agent.invoke("go", thread_id="t1")
        saved = agent.state("t1")["messages"]
    message = str(raised.value)
    assert "budget of 3 model calls" in message and "agent.max_model_calls" in message
    assert raised.value.max_model_calls == 3
    # The step limit lands within the call after the budget: its reply is not acted on.
    assert len(model.calls) in (3, 4)
    # The tool results of the calls within the budget are saved in the thread.
    assert [m.content for m in saved if isinstance(m, ToolMessage)] == [
        "noted step 0", "noted step 1", "noted step 2"]


@FUSE
def test_the_async_run_and_the_stream_raise_the_same_error(tmp_path, fuse):
    def agent(name: str) -> Any:
        return create_agent(budget(2), model=ScriptedChatModel(rounds(6)), tools=[note],
                            checkpointer="memory", base_dir=tmp_path / name, fuse=fuse)

    refused = pytest.raises(ModelCallBudgetError, match="budget of 2 model calls")
    with agent("a") as first, refused:
        asyncio.run(first.ainvoke("go", thread_id="t1"))
    refused = pytest.raises(ModelCallBudgetError, match="budget of 2 model calls")
    with agent("b") as second, refused:
        list(second.stream("go", thread_id="t1"))


@FUSE
def test_a_subagent_over_its_budget_fails_the_task_and_the_lead_goes_on(tmp_path, fuse):
    lead = ScriptedChatModel([
        {"content": "", "tool_calls": [
            {"name": "task", "args": {"description": "dig", "prompt": "dig deep"}}]},
        "the lead's answer",
    ])
    sub = ScriptedChatModel(rounds(6))
    with create_agent(budget(2), model=lead, subagent_model=sub, tools=[note],
                      checkpointer="memory", base_dir=tmp_path, fuse=fuse,
                      runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        state = agent.invoke("go", thread_id="t1")
    result = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert result.status == "error"
    assert result.additional_kwargs["subagent_status"] == "failed"
    assert "ModelCallBudgetError" in result.content
    assert "agent.max_model_calls" in result.content
    assert len(sub.calls) in (2, 3)
    assert state["messages"][-1].content == "the lead's answer"


def test_a_budget_below_one_is_refused_with_its_place():
    with pytest.raises(Exception, match="max_model_calls"):
        parse_config("agent: {max_model_calls: 0}\n", discover())


def test_antler_run_prints_the_budget_error_without_a_traceback(tmp_path):
    script = tmp_path / "script.yaml"
    config = tmp_path / "antler.yaml"
    config.write_text("title: {enabled: false}\nmemory: {enabled: false}\n"
                      "agent: {max_model_calls: 2}\n", encoding="utf-8")
    script.write_text(yaml.safe_dump([
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": f"echo {i}"}}]}
        for i in range(3)] + ["finished"]), encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", "go", "--model", f"scripted:{script}",
                                      "--home", str(tmp_path / "home"),
                                      "--config", str(config)])
    assert result.exit_code != 0
    assert "budget of 2 model calls" in result.stderr
    assert "agent.max_model_calls" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_run_started_on_the_graph_itself_has_the_same_step_limit(tmp_path):
    """LangGraph Server runs the graph directly: the budget is the graph's default."""
    from langgraph.errors import GraphRecursionError

    from antler.runtime.agent import steps_for_model_calls

    with create_agent(budget(2), model=ScriptedChatModel(rounds(6)), tools=[note],
                      checkpointer=None, base_dir=tmp_path, fuse=False) as agent:
        assert agent.recursion_limit == steps_for_model_calls(agent.graph, 2)
        with pytest.raises(GraphRecursionError):
            agent.graph.invoke({"messages": [{"role": "user", "content": "go"}]},
                               context=agent.context("t1"))
