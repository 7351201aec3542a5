"""`lonecalls`: a tools node's lone tool call runs in the node's own thread, not a pool's.

Checked through the real `create_agent` graph, fused (`create_fused_agent`) and
unfused (LangChain's graph given the same body, as `antler.agent.create_agent`
gives it), beside LangChain's own graph: the same messages, the call in the
thread that runs the node, its context a copy; parallel calls and errors as before.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest
from langchain.agents import create_agent as langchain_create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.tools import tool
from langchain_core.messages import AIMessage, HumanMessage

from antler.compiler import create_fused_agent
from antler.compiler.lonecalls import LoneCallExecutor, inline_lone_calls
from antler.runtime.models import ScriptedChatModel

SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


class Noted(AgentMiddleware):
    """A before_model hook, so the fused build has a hook to fuse."""

    def before_model(self, state: Any, runtime: Any) -> None:
        return None


def calls(*names: str) -> AIMessage:
    return AIMessage("", id=f"ai-{'-'.join(names)}", tool_calls=[
        {"name": "where", "args": {"label": name}, "id": f"call-{name}"} for name in names])


def build(mode: str, turns: list[Any], threads: dict[str, int]) -> Any:
    @tool
    def where(label: str) -> str:
        """Say which thread ran the call."""
        threads[label] = threading.get_ident()
        SEEN.set(label)  # stays in the call's copy of the context
        if label == "boom":
            raise ValueError("the tool failed")
        return f"ran {label}"

    kwargs: dict[str, Any] = {"model": ScriptedChatModel(turns), "tools": [where]}
    if mode == "fused":
        graph, _plan = create_fused_agent([Noted()], **kwargs)
        return graph
    graph = langchain_create_agent(middleware=[Noted()], **kwargs)
    if mode == "unfused":
        assert inline_lone_calls(graph)
    return graph


def run(mode: str, turns: list[Any], use_async: bool = False) -> tuple[list[Any], dict[str, int]]:
    threads: dict[str, int] = {}
    graph = build(mode, turns, threads)
    request = {"messages": [HumanMessage("go", id="h1")]}
    state = asyncio.run(graph.ainvoke(request)) if use_async else graph.invoke(request)
    return [(type(m).__name__, m.content, getattr(m, "tool_call_id", None))
            for m in state["messages"]], threads


@pytest.mark.parametrize("mode", ["fused", "unfused"])
def test_a_lone_call_runs_in_the_thread_that_runs_the_node(mode):
    # A sync invoke runs a superstep's only task in the caller's thread: so does the call.
    turns = [calls("one"), AIMessage("done", id="ai-done")]
    messages, threads = run(mode, turns)
    assert threads == {"one": threading.get_ident()}
    assert SEEN.get() == "unset"  # the call ran in a copy of the context
    assert messages == run("langchain", turns)[0]


@pytest.mark.parametrize("mode", ["fused", "unfused"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_parallel_calls_answer_as_in_langchains_graph(mode, use_async):
    turns = [calls("a", "b"), AIMessage("done", id="ai-done")]
    messages, threads = run(mode, turns, use_async)
    assert set(threads) == {"a", "b"}
    assert messages == run("langchain", turns, use_async)[0]


@pytest.mark.parametrize("mode", ["fused", "unfused", "langchain"])
def test_a_lone_call_that_raises_fails_the_run_as_in_langchains_graph(mode):
    with pytest.raises(ValueError, match="the tool failed"):
        run(mode, [calls("boom"), AIMessage("done", id="ai-done")])


def test_several_items_go_to_a_pool_and_come_back_in_order():
    main = threading.get_ident()
    with LoneCallExecutor({}) as executor:
        ran = list(executor.map(lambda x, y: (x + y, threading.get_ident()), [1, 2], [10, 20]))
    assert [value for value, _ in ran] == [11, 22]
    assert all(ident != main for _, ident in ran)
    with LoneCallExecutor({}) as executor:
        assert list(executor.map(lambda x: (x, threading.get_ident()), [5])) == [(5, main)]


def test_a_body_that_takes_no_executor_by_name_is_left_alone():
    graph = langchain_create_agent(model=ScriptedChatModel([]), tools=[])
    assert inline_lone_calls(graph) is False  # no tools node at all
