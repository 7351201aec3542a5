"""token_usage: usage per model call and per run; subagents' usage merged exactly once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from antler.chain.config import parse_config
from antler.contracts.runcontext import RunContext
from antler.contracts.usage import (
    ATTRIBUTED_KEY,
    SUBAGENT_USAGE_KEY,
    USAGE_KEY,
    describe_usage,
    normalize_usage,
    run_usage_of,
)
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.plugins.token_usage.middleware import TokenUsageMiddleware
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

from .model_guard_support import MODE_IDS, MODES, QUIET, guarded_agent, run


class FakeRuntime:
    def __init__(self, run_id: str = "run-1") -> None:
        self.context = RunContext(thread_id="t", run_id=run_id)


def usage(i: int, o: int) -> dict[str, int]:
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}


def task_call(call_id: str) -> dict[str, Any]:
    return {"name": "task", "args": {"description": call_id, "prompt": "p"}, "id": call_id,
            "type": "tool_call"}


def task_result(call_id: str, sub_usage: Any, **extra: Any) -> ToolMessage:
    return ToolMessage("done", tool_call_id=call_id, name="task", id=f"tm-{call_id}",
                       additional_kwargs={SUBAGENT_USAGE_KEY: sub_usage, **extra})


# -- the contract helpers ------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ({"input_tokens": 3, "output_tokens": 4}, usage(3, 4)),
    ({"input_tokens": 3, "output_tokens": 4, "total_tokens": 9}, {
        "input_tokens": 3, "output_tokens": 4, "total_tokens": 9}),
    ({"input_tokens": -1, "output_tokens": 4}, None),
    ({"input_tokens": "3", "output_tokens": 4}, None),
    ({"input_tokens": True, "output_tokens": 4}, None),
    ({"output_tokens": 4}, None),
    ("12 tokens", None),
    (None, None),
])
def test_usage_values_are_read_strictly(value, expected):
    assert normalize_usage(value) == expected


# -- the hook on its own -------------------------------------------------------------------


def test_each_model_call_is_recorded_and_summed_for_the_run():
    middleware = TokenUsageMiddleware()
    first = AIMessage("a", id="ai-1", usage_metadata=usage(10, 2))
    state: dict[str, Any] = {"messages": [HumanMessage("q"), first]}
    update = middleware.after_model(state, FakeRuntime())
    record = update[USAGE_KEY]
    assert record["calls"] == {"ai-1": usage(10, 2)} and record["total_tokens"] == 12
    state[USAGE_KEY] = record
    assert middleware.after_model(state, FakeRuntime()) is None  # re-running adds nothing
    state["messages"].append(AIMessage("b", id="ai-2", usage_metadata=usage(30, 5)))
    record = middleware.after_model(state, FakeRuntime())[USAGE_KEY]
    assert (record["input_tokens"], record["output_tokens"], record["total_tokens"]) == (
        40, 7, 47)
    assert describe_usage(record) == "47 tokens (40 in, 7 out) over 2 model calls"
    # A new run starts a new record; the thread's earlier replies are not this run's.
    state[USAGE_KEY] = record
    state["messages"].append(AIMessage("c", id="ai-3", usage_metadata=usage(1, 1)))
    record = middleware.after_model(state, FakeRuntime("run-2"))[USAGE_KEY]
    assert record["calls"] == {"ai-3": usage(1, 1)} and record["run_id"] == "run-2"
    assert run_usage_of({USAGE_KEY: record}, "run-1") is None


def test_a_reply_without_usage_records_nothing():
    middleware = TokenUsageMiddleware()
    update = middleware.after_model({"messages": [AIMessage("x", id="a")]}, FakeRuntime())
    assert update[USAGE_KEY]["calls"] == {} and update[USAGE_KEY]["total_tokens"] == 0
    assert middleware.after_model({"messages": [HumanMessage("x")]}, FakeRuntime()) is None


def test_subagent_usage_is_merged_into_the_dispatching_reply_once():
    middleware = TokenUsageMiddleware()
    dispatch = AIMessage("", id="ai-1", tool_calls=[task_call("c1"), task_call("c2")],
                         usage_metadata={**usage(100, 10),
                                         "input_token_details": {"cache_read": 40}})
    state: dict[str, Any] = {"messages": [
        HumanMessage("q"), dispatch, task_result("c1", usage(500, 50)),
        task_result("c2", usage(200, 20)), AIMessage("final", id="ai-2",
                                                     usage_metadata=usage(900, 30))]}
    update = middleware.after_model(state, FakeRuntime())
    merged, first, second = update["messages"]
    assert merged.id == "ai-1" and merged.usage_metadata["total_tokens"] == 110 + 550 + 220
    assert merged.usage_metadata["input_token_details"] == {"cache_read": 40}
    assert first.additional_kwargs[ATTRIBUTED_KEY] and second.additional_kwargs[ATTRIBUTED_KEY]
    assert (first.id, second.id) == ("tm-c1", "tm-c2")
    record = update[USAGE_KEY]
    assert record["subagents"] == {"c1": usage(500, 50), "c2": usage(200, 20)}
    assert record["total_tokens"] == 930 + 770  # the final reply's call plus the subagents
    assert dispatch.usage_metadata["total_tokens"] == 110  # the original is not mutated

    # Re-running the hook on the merged state (a replay) adds nothing.
    replayed = {"messages": [HumanMessage("q"), merged, first, second, state["messages"][-1]],
                USAGE_KEY: record}
    assert middleware.after_model(replayed, FakeRuntime()) is None
    assert asyncio.run(middleware.aafter_model(replayed, FakeRuntime())) is None


def test_malformed_or_unmatched_results_stay_unmarked():
    middleware = TokenUsageMiddleware()
    dispatch = AIMessage("", id="ai-1", tool_calls=[task_call("c1"), task_call("c2")],
                         usage_metadata=usage(1, 1))
    state = {"messages": [
        dispatch, task_result("c1", {"input_tokens": "many"}),
        task_result("c2", None), task_result("elsewhere", usage(5, 5)),
        AIMessage("final", id="ai-2")]}
    update = middleware.after_model(state, FakeRuntime())
    assert "messages" not in update and update[USAGE_KEY]["subagents"] == {}


def test_only_the_results_right_before_the_new_reply_are_considered():
    """A tool call id of an earlier turn cannot pull that turn's results in again."""
    middleware = TokenUsageMiddleware()
    old_dispatch = AIMessage("", id="ai-1", tool_calls=[task_call("c1")])
    state = {"messages": [
        old_dispatch, task_result("c1", usage(5, 5)), AIMessage("ok", id="ai-2"),
        HumanMessage("again"), AIMessage("", id="ai-3", tool_calls=[task_call("c1")]),
        ToolMessage("plain", tool_call_id="c1", name="task", id="tm-x"),
        AIMessage("final", id="ai-4")]}
    update = middleware.after_model(state, FakeRuntime())
    assert "messages" not in update


# -- in a real graph -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry():
    return discover()


def lead_and_subagent(tmp_path, registry, fuse: bool, extra: list[Any] = ()):
    lead = ScriptedChatModel([
        {"tool_calls": [{"name": "task", "args": {"description": "a", "prompt": "do a"}},
                        {"name": "task", "args": {"description": "b", "prompt": "do b"}}],
         "usage": {"input_tokens": 100, "output_tokens": 20}},
        {"content": "Both done.", "usage": {"input_tokens": 300, "output_tokens": 10}},
    ])
    sub = ScriptedChatModel([
        {"content": "a done", "usage": {"input_tokens": 1000, "output_tokens": 100}},
        {"content": "b done", "usage": {"input_tokens": 2000, "output_tokens": 200}},
    ])
    return create_agent(parse_config(QUIET, registry), model=lead, subagent_model=sub,
                        checkpointer="memory", base_dir=tmp_path, registry=registry, fuse=fuse,
                        runtime=RuntimeOptions(subagents_enabled=True),
                        custom_middlewares=list(extra))


class AgainTokenUsage(TokenUsageMiddleware):
    """A second copy of the hook on the same state: it must find nothing left to merge."""


@pytest.mark.parametrize("fuse, use_async", MODES, ids=MODE_IDS)
def test_a_run_records_its_calls_and_its_subagents_once(tmp_path, registry, fuse, use_async):
    with lead_and_subagent(tmp_path, registry, fuse, [AgainTokenUsage()]) as agent:
        assert "token_usage" in agent.chain.names
        state = run(agent, "research a and b", use_async=use_async)
    dispatch = next(m for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert dispatch.usage_metadata == usage(100 + 1000 + 2000, 20 + 100 + 200)
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 2 and all(m.additional_kwargs[ATTRIBUTED_KEY] for m in results)
    record = run_usage_of(state)
    assert len(record["calls"]) == 2 and len(record["subagents"]) == 2
    assert (record["input_tokens"], record["output_tokens"]) == (3400, 330)


def test_the_next_run_starts_a_fresh_record(tmp_path, registry):
    agent, _ = guarded_agent(tmp_path, registry, [
        {"content": "one", "usage": {"input_tokens": 7, "output_tokens": 1}},
        {"content": "two", "usage": {"input_tokens": 9, "output_tokens": 2}}])
    with agent:
        agent.invoke("first", thread_id="t1")
        state = agent.invoke("second", thread_id="t1", run_id="second-run")
    record = run_usage_of(state, "second-run")
    assert record["total_tokens"] == 11 and len(record["calls"]) == 1


def test_switched_off_it_leaves_no_record(tmp_path, registry):
    agent, _ = guarded_agent(tmp_path, registry, ["hi"], config="token_usage: {enabled: false}\n")
    with agent:
        assert "token_usage" not in agent.chain.names
        state = agent.invoke("hello", thread_id="t1")
    assert USAGE_KEY not in state
