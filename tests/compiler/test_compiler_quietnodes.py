"""Quiet nodes run as LangGraph's `RunnableSeq` runs them, without the callback run no one hears.

`antler.compiler.quietnodes`: through a real compiled agent (`create_fused_agent`,
hooks in the input step and the model node, a tool), sync and async, a run with
no listener opens no callback run for any node and ends in the same state as the
same graph with LangGraph's own nodes; a context variable a hook sets stays inside
its node, and the hook reads its node's config through `get_config`; with a
callback handler every node's run is reported as before, named as the node, and
so it is when LangSmith tracing is on; a node LangGraph rebuilds is plain again. A quiet
node tells its steps that tracing was off (`tracing.UNTRACED`), and tracing turned on inside
it still reaches a nested agent.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any
from uuid import UUID

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain.tools import tool
from langchain_core.callbacks import AsyncCallbackManager, BaseCallbackHandler, CallbackManager
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.config import get_config

from antler.compat import langgraph_private
from antler.compiler import create_fused_agent
from antler.compiler.quietnodes import quiet_nodes, quiet_seq_class
from antler.plugin_api.tracing import UNTRACED
from antler.runtime.models import ScriptedChatModel
from tests.compiler.test_compiler_wraps import counted_traced_setups

RunnableSeq = langgraph_private("langgraph._internal._runnable", "RunnableSeq")
SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="outside")


@tool
def lookup(term: str) -> str:
    """Look a term up."""
    return f"found {term}"


class Hooks(AgentMiddleware):
    """Hooks in the input step and the model node, each leaving a trace in the state."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[str] = []

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        SEEN.set("before_agent")  # must not leak out of the node
        self.nodes.append(get_config()["metadata"]["langgraph_node"])
        return {"messages": [HumanMessage("noted", id="note-agent")]}

    def before_model(self, state: Any, runtime: Any) -> None:
        SEEN.set("before_model")
        self.nodes.append(get_config()["metadata"]["langgraph_node"])

    def after_model(self, state: Any, runtime: Any) -> None:
        self.nodes.append(get_config()["metadata"]["langgraph_node"])


def turns() -> list[Any]:
    return [AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {"term": "x"},
                                                  "id": "call-1"}]),
            AIMessage("done", id="a2")]


def build(quiet: bool = True) -> tuple[Any, Hooks]:
    hooks = Hooks()
    graph, _plan = create_fused_agent([hooks], model=ScriptedChatModel(turns()),
                                      tools=[lookup])
    if not quiet:  # LangGraph's own nodes, as built before `quiet_nodes`
        for node in graph.nodes.values():
            node.__dict__.pop("node", None)
    return graph, hooks


def described(state: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(type(m).__name__, m.content, getattr(m, "tool_calls", None))
            for m in state["messages"]]


class Starts(BaseCallbackHandler):
    """Counts the chain runs opened, by name."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID,
                       **kwargs: Any) -> None:
        self.names.append(kwargs.get("name") or "")


@pytest.fixture
def chain_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of every callback run opened, handler or not."""
    opened: list[str] = []
    original = CallbackManager.on_chain_start
    aoriginal = AsyncCallbackManager.on_chain_start

    def counting(self: Any, serialized: Any, inputs: Any, run_id: Any = None,
                 **kwargs: Any) -> Any:
        opened.append(kwargs.get("name") or "")
        return original(self, serialized, inputs, run_id, **kwargs)

    async def acounting(self: Any, serialized: Any, inputs: Any, run_id: Any = None,
                        **kwargs: Any) -> Any:
        opened.append(kwargs.get("name") or "")
        return await aoriginal(self, serialized, inputs, run_id, **kwargs)

    monkeypatch.setattr(CallbackManager, "on_chain_start", counting)
    monkeypatch.setattr(AsyncCallbackManager, "on_chain_start", acounting)
    return opened


def test_every_node_with_a_body_is_quiet():
    graph, _ = build()
    kinds = {name: type(node.node) for name, node in graph.nodes.items()}
    assert kinds["__start__"] is quiet_seq_class()
    assert kinds["model"] is quiet_seq_class()
    assert kinds["tools"] is quiet_seq_class()
    assert quiet_nodes(graph) == []  # already quiet: nothing to do again


@pytest.mark.parametrize("use_async", [False, True])
def test_a_run_nobody_listens_to_opens_no_node_run_and_ends_as_before(chain_starts, use_async):
    def go(quiet: bool) -> tuple[dict[str, Any], list[str], list[str]]:
        graph, hooks = build(quiet)
        chain_starts.clear()
        request = {"messages": [HumanMessage("hi", id="h1")]}
        state = asyncio.run(graph.ainvoke(request)) if use_async else graph.invoke(request)
        return state, list(chain_starts), hooks.nodes

    quiet_state, quiet_starts, quiet_nodes_seen = go(True)
    plain_state, plain_starts, plain_nodes_seen = go(False)
    assert described(quiet_state) == described(plain_state)
    assert [m.content for m in quiet_state["messages"]] == [
        "hi", "noted", "", "found x", "done"]
    assert quiet_nodes_seen == plain_nodes_seen  # each hook saw its own node's config
    assert quiet_nodes_seen == ["Hooks.before_agent", *["Hooks.before_model",
                                                        "Hooks.after_model"] * 2]
    assert "model" in plain_starts and "tools" in plain_starts  # LangGraph's nodes open runs
    assert quiet_starts == ["LangGraph"]  # only the graph's own run
    assert SEEN.get() == "outside"  # the hooks' context stayed in their nodes


@pytest.mark.parametrize("use_async", [False, True])
def test_a_listener_hears_every_node_run_as_before(use_async):
    def heard(quiet: bool) -> list[str]:
        graph, _ = build(quiet)
        handler = Starts()
        config = {"callbacks": [handler]}
        request = {"messages": [HumanMessage("hi", id="h1")]}
        if use_async:
            asyncio.run(graph.ainvoke(request, config))
        else:
            graph.invoke(request, config)
        return handler.names

    quiet, plain = heard(True), heard(False)
    assert quiet == plain
    assert {"__start__", "model", "tools"} <= set(quiet)


def test_tracing_on_keeps_the_node_runs(chain_starts, monkeypatch):
    from langsmith import tracing_context

    graph, _ = build()
    chain_starts.clear()
    # Tracing on, with nothing to send to: the client is never asked to post.
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    with tracing_context(enabled=True, client=_NoClient()):
        graph.invoke({"messages": [HumanMessage("hi", id="h1")]})
    assert {"model", "tools"} <= set(chain_starts)


class _NoClient:
    """A LangSmith client that accepts runs and sends nothing."""

    tracing_queue = None

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def test_a_rebuilt_node_is_langgraphs_own_again():
    graph, _ = build()
    node = graph.nodes["model"]
    rebuilt = node.copy({})
    assert type(rebuilt.node) is RunnableSeq
    state = graph.invoke({"messages": [HumanMessage("hi", id="h1")]})
    assert state["messages"][-1].content == "done"


class TracingSeen(AgentMiddleware):
    """Records, in each hook kind and tool call, whether the untraced flag is set."""

    def __init__(self, seen: list[tuple[str, bool]]) -> None:
        super().__init__()
        self.seen = seen

    def before_model(self, state: Any, runtime: Any) -> None:
        self.seen.append(("before_model", UNTRACED.get()))

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(("wrap_model_call", UNTRACED.get()))
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(("wrap_model_call", UNTRACED.get()))
        return await handler(request)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(("wrap_tool_call", UNTRACED.get()))
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(("wrap_tool_call", UNTRACED.get()))
        return await handler(request)


def _quiet_langsmith(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """LangSmith's traced runs counted (`_setup_run`), none of them sent anywhere."""
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    return counted_traced_setups(monkeypatch)


@pytest.mark.parametrize("use_async", [False, True])
def test_a_quiet_node_tells_its_steps_that_tracing_was_off(monkeypatch, use_async):
    # A quiet node asked LangSmith whether tracing is on when it started: its steps (hooks,
    # the fused wrap layers, tool calls) are told, so their own checks skip the question.
    # A run something could observe (a handler, tracing on) never sets the flag, and the
    # flag never leaves the node.
    from langsmith import tracing_context

    _quiet_langsmith(monkeypatch)
    seen: list[tuple[str, bool]] = []
    graph, _plan = create_fused_agent([TracingSeen(seen)], model=ScriptedChatModel(turns() * 3),
                                      tools=[lookup])

    def run(config: dict[str, Any] | None = None) -> list[tuple[str, bool]]:
        seen.clear()
        request = {"messages": [HumanMessage("hi", id="h1")]}
        if use_async:
            asyncio.run(graph.ainvoke(request, config))
        else:
            graph.invoke(request, config)
        return list(seen)

    kinds = [("before_model", True), ("wrap_model_call", True), ("wrap_tool_call", True),
             ("before_model", True), ("wrap_model_call", True)]
    assert run() == kinds
    assert UNTRACED.get() is False
    listened = [(kind, False) for kind, _ in kinds]
    assert run({"callbacks": [BaseCallbackHandler()]}) == listened
    with tracing_context(enabled=True, client=_NoClient()):
        assert run() == listened


def test_tracing_turned_on_inside_a_quiet_node_reaches_a_nested_agent(monkeypatch):
    # A tool of a quiet run turns tracing on around an agent of its own (a subagent): the
    # nested agent's nodes get LangChain's tracer as a handler, so they are observed, tell
    # their steps nothing, and the nested wrap layer is traced, as before the flag existed.
    from langsmith import tracing_context

    setups = _quiet_langsmith(monkeypatch)
    inner_seen: list[tuple[str, bool]] = []
    inner, _plan = create_fused_agent([TracingSeen(inner_seen)],
                                      model=ScriptedChatModel([AIMessage("inner", id="i1")]))

    @tool
    def delegate(task: str) -> str:
        """Hand a task to the nested agent."""
        with tracing_context(enabled=True, client=_NoClient()):
            state = inner.invoke({"messages": [HumanMessage(task, id="t1")]})
        return str(state["messages"][-1].content)

    outer_seen: list[tuple[str, bool]] = []
    outer, _plan = create_fused_agent(
        [TracingSeen(outer_seen)], tools=[delegate], model=ScriptedChatModel([
            AIMessage("", id="o1", tool_calls=[{"name": "delegate", "args": {"task": "x"},
                                                "id": "call-d"}]),
            AIMessage("done", id="o2")]))
    state = outer.invoke({"messages": [HumanMessage("go", id="g1")]})
    assert [m.content for m in state["messages"]] == ["go", "", "inner", "done"]
    assert ("wrap_tool_call", True) in outer_seen  # the outer run is quiet
    assert inner_seen == [("before_model", False), ("wrap_model_call", False)]
    assert "wrap_model_call" in setups  # the nested layer ran under `traceable`
