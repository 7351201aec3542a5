"""A caller's tool that takes `runtime: ToolRuntime` runs without its runtime being dumped.

LangChain dumps a tool's validated input on every call. A bare `ToolRuntime`
annotation (the form LangChain documents) declares a context of type None;
dumping the runtime serialized the whole state and made pydantic warn, on
every call, that Antler's `RunContext` is not None.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from antler.plugin_api import RunContext
from antler.plugin_api.toolargs import without_runtime_dump


def _script(*calls: dict[str, Any]) -> list[AIMessage]:
    return [AIMessage(content="", id="a1", tool_calls=[
        {**call, "id": f"c{i}"} for i, call in enumerate(calls)]),
        AIMessage(content="done", id="a2")]


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_a_bare_tool_runtime_is_not_dumped_and_raises_no_warning(fuse: bool) -> None:
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    seen: list[Any] = []

    @tool
    def lookup(query: str, runtime: ToolRuntime) -> str:
        """Look something up."""
        seen.append((query, runtime.context, len(runtime.state["messages"])))
        return "found"

    model = ScriptedChatModel(_script({"name": "lookup", "args": {"query": "q"}}))
    agent = create_agent(model=model, tools=[lookup], checkpointer=False,
                         fuse=fuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = agent.invoke("go", thread_id="t-runtime", run_id="r1")

    assert [str(w.message) for w in caught if "Pydantic serializer" in str(w.message)] == []
    [(query, context, history)] = seen
    assert query == "q" and isinstance(context, RunContext) and context.thread_id == "t-runtime"
    assert history >= 2                # the runtime's state was passed on, not dropped
    assert state["messages"][-1].text == "done"
    # The caller's tool schema still offers the model only the model's arguments.
    assert set(lookup.tool_call_schema.model_json_schema()["properties"]) == {"query"}


def test_marking_is_idempotent_and_leaves_other_fields_alone() -> None:
    @tool
    def lookup(query: str, runtime: ToolRuntime) -> str:
        """Look something up."""
        return query

    first = without_runtime_dump(lookup).args_schema
    assert first.model_fields["runtime"].exclude and not first.model_fields["query"].exclude
    assert without_runtime_dump(lookup).args_schema is first
