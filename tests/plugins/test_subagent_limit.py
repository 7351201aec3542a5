"""subagent_limit: per-response concurrency and per-run totals of `task` delegations."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from pydantic import ValidationError

from antler.chain.config import parse_config
from antler.contracts.runcontext import RunContext
from antler.errors import ConfigError
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.plugins.subagent_limit.config import SubagentsConfig
from antler.plugins.subagent_limit.middleware import (
    RUN_TOTAL_ATTRIBUTE,
    SubagentLimitMiddleware,
    limit_note,
)
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

QUIET = "title: {enabled: false}\nmemory: {enabled: false}\n"


# -- config --------------------------------------------------------------------------------


@pytest.mark.parametrize("given, expected", [(-5, 1), (0, 1), (1, 1), (3, 3), (4, 4), (99, 4)])
def test_max_concurrent_is_clamped_to_1_to_4(given, expected):
    assert SubagentsConfig(max_concurrent=given).max_concurrent == expected


@pytest.mark.parametrize("given, expected", [(0, 1), (1, 1), (6, 6), (50, 50), (500, 50)])
def test_max_total_per_run_is_clamped_to_1_to_50(given, expected):
    assert SubagentsConfig(max_total_per_run=given).max_total_per_run == expected


def test_defaults_and_the_clamp_are_documented():
    config = SubagentsConfig()
    assert (config.max_concurrent, config.max_total_per_run) == (3, 6)
    schema = SubagentsConfig.model_json_schema()["properties"]
    assert "Clamped to 1-4" in schema["max_concurrent"]["description"]
    assert "Clamped to 1-50" in schema["max_total_per_run"]["description"]
    assert RUN_TOTAL_ATTRIBUTE in schema["max_total_per_run"]["description"]


@pytest.mark.parametrize("bad", [{"max_concurrent": "3"}, {"max_concurrent": True},
                                 {"max_total_per_run": 2.5}, {"max_parallel": 2}])
def test_non_integers_and_unknown_keys_are_refused(bad):
    with pytest.raises(ValidationError):
        SubagentsConfig(**bad)


def test_the_operator_section_is_subagents(registry):
    config = parse_config("subagents: {max_concurrent: 9, max_total_per_run: 0}", registry)
    section = config.section("subagents")
    assert (section.max_concurrent, section.max_total_per_run) == (4, 1)
    with pytest.raises(ConfigError, match="max_concurent"):
        parse_config("subagents: {max_concurent: 2}", registry)


# -- the hook on its own -------------------------------------------------------------------


class FakeRuntime:
    def __init__(self, run_id: str | None = "run-1", **attributes: Any) -> None:
        self.context = RunContext(thread_id="t", run_id=run_id, attributes=attributes)


def calls(*names: str) -> list[dict[str, Any]]:
    return [{"name": name, "args": {"n": i}, "id": f"c{i}", "type": "tool_call"}
            for i, name in enumerate(names)]


def test_excess_task_calls_are_dropped_keeping_the_first_and_other_tools():
    middleware = SubagentLimitMiddleware(max_concurrent=2, max_total_per_run=10)
    message = AIMessage("Delegating.", id="ai-1",
                        tool_calls=calls("task", "bash", "task", "task", "read_file", "task"))
    update = middleware.after_model({"messages": [HumanMessage("go"), message]}, FakeRuntime())
    [edited] = update["messages"]
    assert edited.id == "ai-1"
    assert [c["id"] for c in edited.tool_calls] == ["c0", "c1", "c2", "c4"]
    assert edited.content == "Delegating."  # concurrency alone adds no note
    assert set(update) == {"messages"}  # durable_context records what is dispatched


def test_nothing_changes_within_the_limits():
    middleware = SubagentLimitMiddleware()
    assert middleware.after_model({"messages": [AIMessage("hi", id="a")]}, FakeRuntime()) is None
    message = AIMessage("", id="a", tool_calls=calls("bash", "bash", "bash", "bash"))
    assert middleware.after_model({"messages": [message]}, FakeRuntime()) is None
    within = AIMessage("", id="a", tool_calls=calls("task", "task"))
    assert middleware.after_model({"messages": [within]}, FakeRuntime()) is None


def test_raw_provider_payloads_of_dropped_calls_are_removed_too():
    middleware = SubagentLimitMiddleware(max_concurrent=1, max_total_per_run=10)
    raw = [{"id": f"c{i}", "type": "function",
            "function": {"name": name, "arguments": "{}"}}
           for i, name in enumerate(["task", "task", "bash"])]
    message = AIMessage(
        content=[{"type": "text", "text": "Working."},
                 {"type": "tool_use", "id": "c0", "name": "task", "input": {}},
                 {"type": "tool_use", "id": "c1", "name": "task", "input": {}},
                 {"type": "tool_use", "id": "c2", "name": "bash", "input": {}}],
        tool_calls=calls("task", "task", "bash"), id="ai-1",
        additional_kwargs={"tool_calls": raw, "other": 1})
    [edited] = middleware.after_model({"messages": [message]}, FakeRuntime())["messages"]
    assert [c["id"] for c in edited.additional_kwargs["tool_calls"]] == ["c0", "c2"]
    assert edited.additional_kwargs["other"] == 1
    assert [b.get("id") for b in edited.content] == [None, "c0", "c2"]
    assert message.additional_kwargs["tool_calls"] == raw  # the original is not mutated


def test_raw_payloads_without_ids_are_matched_by_position():
    middleware = SubagentLimitMiddleware(max_concurrent=1)
    raw = [{"function": {"name": "task"}}, {"function": {"name": "task"}}]
    message = AIMessage("", id="a", tool_calls=calls("task", "task"),
                        additional_kwargs={"tool_calls": raw})
    [edited] = middleware.after_model({"messages": [message]}, FakeRuntime())["messages"]
    assert edited.additional_kwargs["tool_calls"] == [raw[0]]


def dispatched(*ids: str, run_id: str = "run-1") -> list[dict[str, Any]]:
    """`delegations` entries, as durable_context records them, of `task` calls `ids`."""
    return [{"id": i, "description": i, "status": "completed", "run_id": run_id} for i in ids]


def test_an_exhausted_budget_strips_tasks_stops_and_says_so():
    middleware = SubagentLimitMiddleware(max_concurrent=3, max_total_per_run=4)
    ledger = dispatched("x1", "x2", "x3", "x4")
    message = AIMessage("", id="ai-2", tool_calls=calls("task", "task"),
                        response_metadata={"finish_reason": "tool_calls", "model": "m"},
                        additional_kwargs={"tool_calls": [{"id": "c0"}, {"id": "c1"}]})
    update = middleware.after_model({"messages": [message], "delegations": ledger}, FakeRuntime())
    [edited] = update["messages"]
    assert edited.tool_calls == []
    assert "tool_calls" not in edited.additional_kwargs
    assert edited.response_metadata == {"finish_reason": "stop", "model": "m"}
    assert edited.content == limit_note(4, 2)
    assert "at most 4 subagent tasks, so 2 more tasks were not started" in edited.content
    assert update["antler_stop_reason"]["reason"] == "subagent_limit_capped"


def test_a_partly_spent_budget_keeps_what_fits_and_notes_the_rest():
    middleware = SubagentLimitMiddleware(max_concurrent=3, max_total_per_run=4)
    ledger = dispatched("x1", "x2", "x3")
    message = AIMessage("Next batch.", id="a", tool_calls=calls("task", "task", "task"))
    update = middleware.after_model({"messages": [message], "delegations": ledger}, FakeRuntime())
    [edited] = update["messages"]
    assert [c["id"] for c in edited.tool_calls] == ["c0"]
    assert edited.content == "Next batch.\n\n" + limit_note(4, 2)
    assert "finish_reason" not in edited.response_metadata  # a call is still pending


def test_a_new_run_gets_a_fresh_budget_and_reentry_does_not_double_count():
    middleware = SubagentLimitMiddleware(max_concurrent=3, max_total_per_run=3)
    message = AIMessage("", id="a", tool_calls=calls("task", "task"))
    spent = {"messages": [message], "delegations": dispatched("x1", "x2", "x3", run_id="old")}
    assert middleware.after_model(spent, FakeRuntime()) is None
    # The hook running again once this message's calls are recorded changes nothing.
    state = {"messages": [message], "delegations": dispatched("x1", "c0", "c1")}
    assert middleware.after_model(state, FakeRuntime()) is None
    assert asyncio.run(middleware.aafter_model(state, FakeRuntime())) is None
    # ... while a third earlier call of this run leaves room for none of them.
    state["delegations"] = dispatched("x1", "x2", "x3", "c0")
    [edited] = middleware.after_model(state, FakeRuntime())["messages"]
    assert [c["id"] for c in edited.tool_calls] == []


def test_the_run_context_attribute_overrides_the_total_clamped():
    middleware = SubagentLimitMiddleware(max_concurrent=4, max_total_per_run=6)
    assert middleware.total_limit(FakeRuntime(**{RUN_TOTAL_ATTRIBUTE: 2})) == 2
    assert middleware.total_limit(FakeRuntime(**{RUN_TOTAL_ATTRIBUTE: 900})) == 50
    assert middleware.total_limit(FakeRuntime(**{RUN_TOTAL_ATTRIBUTE: 0})) == 1
    for ignored in ("2", True, 2.0, None):
        assert middleware.total_limit(FakeRuntime(**{RUN_TOTAL_ATTRIBUTE: ignored})) == 6


# -- in a real graph -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry():
    return discover()


@pytest.fixture
def ran() -> list[str]:
    return []


@pytest.fixture
def task_tool(ran):
    @tool
    def task(description: str, prompt: str) -> str:
        """Delegate a task to a subagent."""
        ran.append(description)
        return f"result of {description}"

    return task


@pytest.fixture
def lookup_tool(ran):
    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        ran.append(f"lookup:{query}")
        return "found"

    return lookup


def task_turn(*descriptions: str, extra: list[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task", "args": {"description": d, "prompt": "do it"}}
                           for d in descriptions] + list(extra)}


def make_agent(tmp_path, registry, script, tools, config="", **kwargs):
    model = ScriptedChatModel(script)
    agent = create_agent(parse_config(QUIET + config, registry), model=model,
                         checkpointer="memory", base_dir=tmp_path, tools=tools,
                         runtime=RuntimeOptions(subagents_enabled=True), registry=registry,
                         **kwargs)
    return agent, model


def test_parallel_task_calls_beyond_max_concurrent_never_run(tmp_path, registry, ran,
                                                             task_tool, lookup_tool):
    agent, model = make_agent(tmp_path, registry, [
        task_turn("a", "b", "c", "d", "e",
                  extra=[{"name": "lookup", "args": {"query": "q"}, "id": "lk"}]),
        "Summary of a, b, c.",
    ], [task_tool, lookup_tool])
    with agent:
        assert "subagent_limit" in agent.chain.names
        state = agent.invoke("Research five things", thread_id="t1")
    assert sorted(ran) == ["a", "b", "c", "lookup:q"]
    dispatch = next(m for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert [c["args"].get("description") for c in dispatch.tool_calls] == ["a", "b", "c", None]
    assert len([m for m in state["messages"] if isinstance(m, AIMessage)]) == 2  # replaced
    assert state["messages"][-1].content == "Summary of a, b, c."
    assert model.remaining == 0


def test_the_total_cap_spans_model_turns_and_the_next_turn_starts_fresh(
        tmp_path, registry, ran, task_tool):
    agent, model = make_agent(tmp_path, registry, [
        task_turn("a1", "a2", "a3"),   # 3 of 4
        task_turn("b1", "b2", "b3"),   # 1 fits: b1 runs, the note says 2 were not started
        task_turn("c1", "c2"),         # budget spent: stripped, the run ends here
        task_turn("d1", "d2", "d3"),   # next user turn: a fresh budget of 4
        "Done.",
    ], [task_tool], config="subagents: {max_concurrent: 3, max_total_per_run: 4}\n")
    with agent:
        state = agent.invoke("Big research", thread_id="t1")
        assert sorted(ran) == ["a1", "a2", "a3", "b1"]
        final = state["messages"][-1]
        assert isinstance(final, AIMessage) and final.tool_calls == []
        assert final.response_metadata["finish_reason"] == "stop"
        assert final.content == limit_note(4, 2)
        noted = [m for m in state["messages"] if isinstance(m, AIMessage)][1]
        assert [c["args"]["description"] for c in noted.tool_calls] == ["b1"]
        assert noted.content.endswith(limit_note(4, 2))
        assert model.remaining == 2

        ran.clear()
        state = agent.invoke("More research", thread_id="t1")
    assert sorted(ran) == ["d1", "d2", "d3"]
    assert state["messages"][-1].content == "Done."


def test_async_runs_are_limited_the_same_way(tmp_path, registry, ran, task_tool):
    agent, _ = make_agent(tmp_path, registry, [task_turn("a", "b", "c"), "ok"], [task_tool],
                              config="subagents: {max_concurrent: 2}\n")

    async def run() -> dict[str, Any]:
        return await agent.graph.ainvoke(agent.input("go"), config=agent.run_config("t1"),
                                         context=agent.context("t1"))

    with agent:
        asyncio.run(run())
    assert sorted(ran) == ["a", "b"]


def test_a_run_context_override_lowers_the_total_for_one_run(tmp_path, registry, ran,
                                                             task_tool):
    agent, _ = make_agent(tmp_path, registry, [task_turn("a", "b", "c"), "ok"], [task_tool])
    with agent:
        state = agent.invoke("go", thread_id="t1", attributes={RUN_TOTAL_ATTRIBUTE: 1})
    assert ran == ["a"]
    dispatch = next(m for m in state["messages"] if isinstance(m, AIMessage))
    assert dispatch.content == limit_note(1, 2)
    assert state["messages"][-1].content == "ok"


class CompactHistory(AgentMiddleware):
    """Stands in for summarization: before the third model call, forget the history."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def before_model(self, state, runtime):
        self.calls += 1
        if self.calls != 3:
            return None
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES),
                             HumanMessage("Summary: two research tasks already ran.")]}


def test_compacting_the_history_does_not_restore_the_budget(tmp_path, registry, ran,
                                                            task_tool):
    agent, model = make_agent(tmp_path, registry, [
        task_turn("a", "b"), task_turn("c"), task_turn("d", "e"), "Final answer.",
    ], [task_tool], config="subagents: {max_total_per_run: 3}\n",
        custom_middlewares=[CompactHistory()])
    with agent:
        state = agent.invoke("Research", thread_id="t1")
    assert sorted(ran) == ["a", "b", "c"]
    assert not any(isinstance(m, ToolMessage) and m.name == "task"
                   for m in state["messages"])  # the history really was compacted
    assert state["messages"][-1].content == limit_note(3, 2)
    assert model.remaining == 1


def test_the_plugin_stays_out_without_subagents(tmp_path, registry, task_tool):
    model = ScriptedChatModel(["hi"])
    with create_agent(parse_config(QUIET, registry), model=model, checkpointer="memory",
                      base_dir=tmp_path, tools=[task_tool], registry=registry) as agent:
        assert "subagent_limit" not in agent.chain.names
