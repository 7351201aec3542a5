"""A graph the chain compiler builds runs each run in a `RunScope` of its own.

What a run holds (a thread's sandbox) is let go at its scope's end, and a run with no
scope holds it as a caller outside any run, until a release that a failed run never
makes. `antler.agent.create_agent`'s graphs (the served graph and the subagents' among
them) are scoped where they are built (tests/runtime/test_runscope.py,
tests/runtime/sandbox/test_sandbox_retention.py); `antler.compiler.create_fused_agent`'s
is too, fused into the model node and not, finished and failed.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage

from antler.compiler import create_fused_agent
from antler.compiler.runscope import RunScope, current_run
from antler.runtime.models import ScriptedChatModel


class SeesItsRun(AgentMiddleware):
    """Notes the run scope its `before_agent` hook and its model call see."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.scopes: list[RunScope | None] = []

    def before_agent(self, state: Any, runtime: Any) -> None:
        self.scopes.append(current_run())

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.scopes.append(current_run())
        if self.fail:
            raise RuntimeError("the model call failed")
        return handler(request)


@pytest.mark.parametrize("into_model", [True, False], ids=["into-model", "node-fused"])
def test_each_run_of_a_fused_graph_has_a_scope_that_ends_however_the_run_ends(
        into_model: bool) -> None:
    # Unscoped before: a graph built with the compiler alone ran without a scope, so a
    # sandbox its failed run acquired stayed held for good.
    seen = SeesItsRun()
    graph, _plan = create_fused_agent([seen], into_model=into_model,
                                      model=ScriptedChatModel(["one", "two"]))
    graph.invoke({"messages": [HumanMessage(content="hi")]})
    graph.invoke({"messages": [HumanMessage(content="again")]})
    first, _, second, _ = seen.scopes
    assert first is not None and second is not None and first is not second
    assert seen.scopes == [first, first, second, second] and first.ended and second.ended

    failing = SeesItsRun(fail=True)
    graph, _plan = create_fused_agent([failing], into_model=into_model,
                                      model=ScriptedChatModel(["never"]))
    with pytest.raises(RuntimeError, match="the model call failed"):
        graph.invoke({"messages": [HumanMessage(content="hi")]})
    scope, = set(failing.scopes)
    assert scope is not None and scope.ended
