"""The `after_agent` hooks inside the tools node when a lone `return_direct` call ends the run.

Each test runs one hand-written chain as LangChain's `create_agent` wires it and with
`create_fused_agent`, and compares what the other compiler tests compare (final state,
message ids and order, model requests, tool executions, errors), plus what this case is
for: the compiled graph ends the run in the tools node, one superstep and one checkpoint
fewer, and runs each `after_agent` hook exactly as often as LangChain's graph does.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NotRequired

import pytest
from langchain.agents import create_agent as langchain_create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.tools import tool
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from antler.compiler import (
    asking_for_hook_events,
    create_fused_agent,
    expand_fused_updates,
    stream_modes_for,
)
from antler.runtime.models import ScriptedChatModel
from tests.compiler.test_compiler import Outcome, counted_ids, describe

MODES = ("unfused", "fused")
CONFIG: Any = {"configurable": {"thread_id": "t"}}


class LogState(AgentState):
    log: NotRequired[Annotated[list[str], operator.add]]


class EndLog(AgentMiddleware):
    """An `after_agent` hook that records what it saw and writes to the state."""

    state_schema = LogState

    def __init__(self, name: str, calls: list[str], fail_times: int = 0) -> None:
        super().__init__()
        self._name = name
        self.calls = calls
        self.fail_times = fail_times

    @property
    def name(self) -> str:
        return self._name

    def after_agent(self, state: Any, runtime: Any) -> Any:
        self.calls.append(f"{self._name}:{state['messages'][-1].type}")
        if self.fail_times:
            self.fail_times -= 1
            raise RuntimeError(f"{self._name} failed")
        return {"log": [f"{self._name} saw {len(state['messages'])} messages"]}

    async def aafter_agent(self, state: Any, runtime: Any) -> Any:
        return self.after_agent(state, runtime)


class EndJumper(EndLog):
    @hook_config(can_jump_to=["model"])
    def after_agent(self, state: Any, runtime: Any) -> Any:
        return super().after_agent(state, runtime)


def ask(*ids: str) -> AIMessage:
    return AIMessage(content="", id=f"ai-{'-'.join(ids)}", tool_calls=[
        {"name": "ask", "args": {"question": f"q {i}"}, "id": i} for i in ids])


def echo_call(i: str) -> AIMessage:
    return AIMessage(content="", id=f"ai-echo-{i}", tool_calls=[
        {"name": "echo", "args": {"text": i}, "id": i}])


Make = Callable[[list[str]], Sequence[AgentMiddleware]]


def build(make: Make, mode: str, turns: Sequence[Any], calls: list[str],
          executed: list[str]) -> tuple[Any, Any, ScriptedChatModel, list[int]]:
    @tool(return_direct=True)
    def ask(question: str) -> str:
        """Ask the user and stop."""
        executed.append(f"ask {question}")
        return question

    @tool
    def echo(text: str) -> str:
        """Echo the text."""
        executed.append(f"echo {text}")
        return text

    saver = InMemorySaver()
    puts = [0]
    put = saver.put

    def counted(*args: Any, **kwargs: Any) -> Any:
        puts[0] += 1
        return put(*args, **kwargs)

    saver.put = counted  # type: ignore[method-assign]
    model = ScriptedChatModel(list(turns))
    kwargs: dict[str, Any] = {"model": model, "tools": [ask, echo], "checkpointer": saver}
    plan = None
    if mode == "fused":
        graph, plan = create_fused_agent(list(make(calls)), **kwargs)
    else:
        graph = langchain_create_agent(middleware=list(make(calls)), **kwargs)
    return graph, plan, model, puts


def run(make: Make, mode: str, turns: Sequence[Any], *, use_async: bool = False,
        attempts: int = 1) -> tuple[Outcome, list[str], int]:
    calls: list[str] = []
    executed: list[str] = []
    graph, _plan, model, puts = build(make, mode, turns, calls, executed)
    error = None
    inputs: Any = {"messages": [HumanMessage("hello", id="user-1")]}
    with counted_ids():
        for _ in range(attempts):
            try:
                if use_async:
                    asyncio.run(graph.ainvoke(inputs, CONFIG))
                else:
                    graph.invoke(inputs, CONFIG)
                error = None
                break
            except RuntimeError as exc:
                error = type(exc).__name__
                inputs = None  # resume the failed run from its last checkpoint
        values = dict(graph.get_state(CONFIG).values) if error is None else None
    requests = [describe(r.messages) for r in model.requests]
    # Parallel calls finish in either order: the executions are compared as a set.
    return Outcome(values, error, requests, sorted(executed), 0), calls, puts[0]


def both(make: Make, turns: Sequence[Any], **kwargs: Any) -> dict[str, tuple[Any, ...]]:
    results = {mode: run(make, mode, turns, **kwargs) for mode in MODES}
    assert results["fused"][0].comparable() == results["unfused"][0].comparable()
    assert results["fused"][1] == results["unfused"][1]  # each hook ran as often, on the same
    return results


def two_hooks(calls: list[str]) -> list[AgentMiddleware]:
    return [EndLog("first", calls), EndLog("second", calls)]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_lone_return_direct_call_ends_the_run_in_the_tools_node(use_async):
    results = both(two_hooks, [ask("c1")], use_async=use_async)
    outcome, calls, fused_puts = results["fused"]
    assert outcome.tools == ["ask q c1"]
    # LangChain runs after_agent hooks in reverse order, after the tool's result.
    assert calls == ["second:tool", "first:tool"]
    assert outcome.values["log"] == ["second saw 3 messages", "first saw 3 messages"]
    # LangChain's graph gives each after_agent hook a superstep (and a checkpoint) after
    # the tools node; the compiled graph ends in the tools node.
    assert fused_puts == results["unfused"][2] - 2


def test_the_plan_says_where_the_hooks_also_run():
    _graph, plan, _model, _puts = build(two_hooks, "fused", [ask("c1")], [], [])
    assert plan.ends_in_tools == ("second", "first")  # in the order they run
    assert "inside the tools node" in plan.render()
    assert plan.as_dict()["after_agent_in_tools"] == ["second", "first"]
    assert "tools" in plan.streamed_nodes


def test_parallel_return_direct_calls_leave_the_hooks_to_their_node():
    # Two calls are two tasks of the tools node: each edge ends the run, and the graph
    # runs the after_agent node once. Inside the tools node they would run twice.
    outcome, calls, _puts = both(two_hooks, [ask("c1", "c2")])["fused"]
    assert sorted(outcome.tools) == ["ask q c1", "ask q c2"]
    assert calls == ["second:tool", "first:tool"]


def test_a_call_that_goes_back_to_the_model_runs_the_hooks_at_the_final_answer():
    outcome, calls, _puts = both(two_hooks, [echo_call("e1"), AIMessage("done", id="ai-done")])[
        "fused"]
    assert outcome.tools == ["echo e1"]
    assert calls == ["second:ai", "first:ai"]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_reply_mixing_a_return_direct_call_with_another_goes_back_to_the_model(use_async):
    # Each call's edge is decided inside the tools node, on the state its own result
    # leaves: not every executed tool returns directly, so both go back to the model.
    mixed = AIMessage(content="", id="ai-mixed", tool_calls=[
        {"name": "ask", "args": {"question": "q m1"}, "id": "m1"},
        {"name": "echo", "args": {"text": "m2"}, "id": "m2"}])
    outcome, calls, _puts = both(two_hooks, [mixed, ask("c1")], use_async=use_async)["fused"]
    assert sorted(outcome.tools) == ["ask q c1", "ask q m1", "echo m2"]
    assert calls == ["second:tool", "first:tool"]  # once, after the lone call that ends it


def test_a_failing_hook_resumed_does_not_run_the_tool_again():
    def failing(calls: list[str]) -> list[AgentMiddleware]:
        return [EndLog("first", calls), EndLog("second", calls, fail_times=1)]

    results = both(failing, [ask("c1")], attempts=2)
    outcome, calls, _puts = results["fused"]
    assert outcome.error is None
    assert outcome.tools == ["ask q c1"]  # once, in both graphs
    assert calls == ["second:tool", "second:tool", "first:tool"]


def test_hooks_that_may_jump_keep_to_their_node_after_the_tools():
    def jumping(calls: list[str]) -> list[AgentMiddleware]:
        return [EndJumper("first", calls), EndLog("second", calls)]

    _graph, plan, _model, _puts = build(jumping, "fused", [ask("c1")], [], [])
    assert plan.ends_in_tools == ()
    assert "tools" not in plan.streamed_nodes
    _outcome, calls, _puts = both(jumping, [ask("c1")])["fused"]
    assert calls == ["second:tool", "first:tool"]


def test_updates_expanded_per_hook_match_the_unfused_graph():
    streams = {}
    for mode in MODES:
        graph, plan, _model, _puts = build(two_hooks, mode, [ask("c1")], [], [])
        inputs = {"messages": [HumanMessage("hello", id="user-1")]}
        with counted_ids():
            if mode == "fused":
                chunks = expand_fused_updates(
                    graph.stream(inputs, asking_for_hook_events(CONFIG, plan),
                                 stream_mode=stream_modes_for("updates")),
                    plan, "updates")
            else:
                chunks = graph.stream(inputs, CONFIG, stream_mode="updates")
            streams[mode] = [{node: _plain(update) for node, update in chunk.items()}
                             for chunk in chunks]
    assert streams["fused"] == streams["unfused"]
    assert [next(iter(chunk)) for chunk in streams["fused"]][-3:] == [
        "tools", "second.after_agent", "first.after_agent"]


def _plain(update: Any) -> Any:
    if isinstance(update, dict):
        return {k: describe(v) if k == "messages" else v for k, v in update.items()}
    return update
