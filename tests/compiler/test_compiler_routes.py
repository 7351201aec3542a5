"""The model node's edge takes the route the node worked out, without reading the state again.

When the `after_agent` hooks run inside the model node, the node asks LangChain's edge
where the run goes (on its own view of the state) to know whether the run ends there.
When it does not end, that answer is the edge's; when it does, the edge ends the run
(unless an `after_agent` hook jumped): LangGraph would otherwise copy every channel to
read the state once more and route again. The tools node (`ToolsEnd`) does the same for
the edge after each tool call. What the tools then see must be what they
see in LangChain's graph, and a jump of an `after_agent` hook is still routed.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, NotRequired

import langgraph.pregel._algo as pregel_algo
import pytest
from langchain.agents import create_agent as langchain_create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from antler.compiler import create_fused_agent
from antler.runtime.models import ScriptedChatModel

MODES = ("unfused", "fused")


class TagState(AgentState):
    tag: NotRequired[str]
    log: NotRequired[Annotated[list[str], operator.add]]


class Tagger(AgentMiddleware):
    """Writes the state a tool then reads, in the model node's `after_model`."""

    state_schema = TagState

    def after_model(self, state: Any, runtime: Any) -> Any:
        calls = len([m for m in state["messages"] if m.type == "ai"])
        return {"tag": f"after call {calls}"}

    async def aafter_model(self, state: Any, runtime: Any) -> Any:
        return self.after_model(state, runtime)

    def after_agent(self, state: Any, runtime: Any) -> Any:
        return {"log": [f"ended with tag {state.get('tag')}"]}

    async def aafter_agent(self, state: Any, runtime: Any) -> Any:
        return self.after_agent(state, runtime)


@tool
def read_tag(runtime: ToolRuntime) -> str:
    """Tell the tag the state holds."""
    return f"tag is {runtime.state.get('tag')}"


def _turns() -> list[Any]:
    return [AIMessage(content="", id=f"ai-{i}", tool_calls=[
        {"name": "read_tag", "args": {}, "id": f"call-{i}"}]) for i in range(2)] + [
        AIMessage(content="done", id="ai-final")]


def _graph(mode: str) -> Any:
    kwargs: dict[str, Any] = {"model": ScriptedChatModel(_turns()), "tools": [read_tag],
                              "checkpointer": InMemorySaver()}
    if mode == "unfused":
        return langchain_create_agent(middleware=[Tagger()], **kwargs)
    graph, _plan = create_fused_agent([Tagger()], **kwargs)
    return graph


def _run(mode: str, is_async: bool) -> dict[str, Any]:
    graph = _graph(mode)
    payload = {"messages": [HumanMessage(content="go", id="h")]}
    config: Any = {"configurable": {"thread_id": "t"}}
    if is_async:
        return asyncio.run(graph.ainvoke(payload, config))
    return graph.invoke(payload, config)


def _shown(state: dict[str, Any]) -> tuple[Any, ...]:
    # Tool results get fresh random ids in either graph: compared by their call's id.
    return ([(m.type, m.tool_call_id if m.type == "tool" else m.id, m.content)
             for m in state["messages"]], state.get("tag"), state.get("log"))


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_tools_see_the_state_the_model_node_left_as_in_langchains_graph(is_async: bool) -> None:
    unfused, fused = (_shown(_run(mode, is_async)) for mode in MODES)
    assert fused == unfused
    contents = [content for kind, _id, content in fused[0] if kind == "tool"]
    assert contents == ["tag is after call 1", "tag is after call 2"]
    assert fused[2] == ["ended with tag after call 3"]


def test_a_turn_that_goes_on_does_not_read_the_state_again(monkeypatch: Any) -> None:
    fresh_reads: dict[str, int] = {}
    real = pregel_algo.local_read

    def counted(scratchpad: Any, channels: Any, managed: Any, task: Any, select: Any,
                fresh: bool = False) -> Any:
        if fresh:
            fresh_reads[task.name] = fresh_reads.get(task.name, 0) + 1
        return real(scratchpad, channels, managed, task, select, fresh)

    monkeypatch.setattr(pregel_algo, "local_read", counted)
    reads = {}
    for mode in MODES:
        fresh_reads.clear()
        _run(mode, is_async=False)
        reads[mode] = dict(fresh_reads)
    # LangChain's graph reads the state for the loop's edge (after the after_model node)
    # after each of the three model calls; the compiled one never: the node tells its
    # edge where the run goes, the last time that it ended there, after its after_agent
    # hooks.
    assert reads["unfused"]["Tagger.after_model"] == 3
    assert reads["fused"].get("model", 0) == 0
    # Likewise the edge after each tool call: LangChain's graph reads the state again, the
    # compiled tools node (which runs the after_agent hooks when a lone call ends the run)
    # asks the edge on its view of the state and leaves it the answer.
    assert reads["unfused"]["tools"] == 2
    assert reads["fused"].get("tools", 0) == 0
