"""How a fused node calls its members' hooks: directly when nothing listens, else as runnables.

A hook of the usual form (`state, runtime`) is called directly by the fused node
when no callback handler listens (`Step.direct`); any other form, and every hook
when a tracer or LangGraph's `messages` stream listens, goes through LangGraph's
`RunnableCallable` as in an unfused graph. Either way a hook must see what it
would see as a node of its own: the same runtime, the config a runnable it calls
inherits (naming the member's own node), and a returned runnable is run.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, NotRequired

import pytest
from langchain.agents import create_agent as langchain_create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver

from antler.compat import runnable_callable
from antler.compiler import create_fused_agent
from antler.compiler.steps import _direct
from antler.runtime.models import ScriptedChatModel
from tests.compiler.test_compiler_model_node import Named

MODES = ("unfused", "fused")


class SeenState(AgentState):
    seen: NotRequired[Annotated[list[str], operator.add]]


def _node_of_inherited_config(label: str) -> str:
    """What a runnable called inside a hook inherits as its node's name."""
    return RunnableLambda(lambda _, config: f"{label} ran in {config['metadata']['langgraph_node']}"
                          ).invoke(None)


class Recorder(Named):
    """`before_model` of the usual form: records the runtime's context and its node."""

    state_schema = SeenState

    def before_model(self, state: Any, runtime: Any) -> Any:
        return {"seen": [f"{self._name} user={runtime.context['user']}",
                         _node_of_inherited_config(self._name)]}

    async def abefore_model(self, state: Any, runtime: Any) -> Any:
        return self.before_model(state, runtime)


class ReturnsRunnable(AgentMiddleware):
    """`after_model` whose result is a runnable: LangGraph runs it on the hook's input."""

    state_schema = SeenState

    def after_model(self, state: Any, runtime: Any) -> Any:
        return RunnableLambda(lambda s: {"seen": [f"runnable saw {len(s['messages'])}"]})

    async def aafter_model(self, state: Any, runtime: Any) -> Any:
        return self.after_model(state, runtime)


class TakesConfig(AgentMiddleware):
    """`before_model` with a `config` parameter, which LangGraph fills in: never direct."""

    state_schema = SeenState

    def before_model(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        return {"seen": [f"config names {config['metadata']['langgraph_node']}"]}

    async def abefore_model(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        return self.before_model(state, runtime, config)


def _agent(mode: str) -> Any:
    turns = [AIMessage(content="first", id="ai-1"), AIMessage(content="second", id="ai-2")]
    middlewares = [Recorder("alpha"), ReturnsRunnable(), TakesConfig(), Recorder("omega")]
    kwargs: dict[str, Any] = {"model": ScriptedChatModel(turns), "tools": [],
                              "checkpointer": InMemorySaver(), "context_schema": dict}
    if mode == "unfused":
        return langchain_create_agent(middleware=middlewares, **kwargs)
    graph, _plan = create_fused_agent(middlewares, **kwargs)
    return graph


class _Listener(BaseCallbackHandler):
    def __init__(self) -> None:
        self.chains = 0

    def on_chain_start(self, *args: Any, **kwargs: Any) -> None:
        self.chains += 1


def _run(mode: str, *, is_async: bool, listen: bool) -> list[str]:
    graph = _agent(mode)
    config: Any = {"configurable": {"thread_id": "t"}}
    if listen:
        config["callbacks"] = [_Listener()]
    payload = {"messages": [HumanMessage(content="hi", id="h-1")]}
    if is_async:
        state = asyncio.run(graph.ainvoke(payload, config, context={"user": "ada"}))
    else:
        state = graph.invoke(payload, config, context={"user": "ada"})
    return list(state["seen"])


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("listen", [False, True], ids=["quiet", "listened"])
def test_fused_members_see_what_their_own_nodes_see(is_async: bool, listen: bool) -> None:
    unfused, fused = (_run(mode, is_async=is_async, listen=listen) for mode in MODES)
    assert fused == unfused
    # The facts themselves, not only their equality: each hook had its own node's config
    # and runtime, and the runnable one hook returned was run.
    assert "alpha ran in alpha.before_model" in fused
    assert "omega ran in omega.before_model" in fused
    assert "alpha user=ada" in fused
    assert "config names TakesConfig.before_model" in fused
    assert "runnable saw 2" in fused


def test_only_hooks_of_the_usual_form_are_called_directly() -> None:
    RunnableCallable = runnable_callable()

    def usual(state: Any, runtime: Any) -> Any:
        return None

    def with_config(state: Any, runtime: Any, config: RunnableConfig) -> Any:
        return None

    def state_only(state: Any) -> Any:
        return None

    assert _direct(RunnableCallable(usual, trace=False), usual) is usual
    assert _direct(RunnableCallable(with_config, trace=False), with_config) is None
    assert _direct(RunnableCallable(state_only, trace=False), state_only) is None
    assert _direct(RunnableCallable(usual, trace=False), None) is None
