"""Tool functions' postponed annotations are evaluated, and signatures recorded, at build.

LangChain reads a tool function's type hints on every call (to pass a
`RunnableConfig` parameter its config); this module's annotations are strings
(postponed), as in every Antler module, so they would be compiled each call.
"""

from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, tool

from antler.plugin_api.toolargs import with_resolved_signatures

SEEN: list[str] = []


def _tagged() -> Any:
    """A fresh tool (its function's annotations still strings)."""

    @tool
    def tagged(text: Annotated[str, "the text"], config: RunnableConfig) -> str:
        """Echo the text with the run's tag."""
        SEEN.append(str((config.get("metadata") or {}).get("tag")))
        return text

    return tagged


def _unresolvable(text: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
    return text


def test_hints_are_resolved_to_what_typing_resolves_them_to() -> None:
    tagged = _tagged()
    expected = typing.get_type_hints(tagged.func, include_extras=True)
    parameters = list(inspect.signature(tagged.func).parameters)
    assert all(isinstance(v, str) for v in tagged.func.__annotations__.values())
    with_resolved_signatures([tagged])
    assert tagged.func.__annotations__ == expected
    assert not any(isinstance(v, str) for v in tagged.func.__annotations__.values())
    # The signature is recorded (`inspect.signature` returns it as it is), with the same
    # parameters and the evaluated annotations.
    recorded = tagged.func.__signature__
    assert inspect.signature(tagged.func) is recorded
    assert list(recorded.parameters) == parameters == ["text", "config"]
    assert recorded.parameters["config"].annotation is RunnableConfig


def test_a_tool_whose_hints_do_not_resolve_is_left_as_it_is() -> None:
    broken = StructuredTool(name="broken", description="d", func=_unresolvable,
                            args_schema={"type": "object", "properties": {
                                "text": {"type": "string"}}})
    with_resolved_signatures([broken])
    assert _unresolvable.__annotations__["text"] == "NoSuchType"


def test_a_config_parameter_still_gets_the_config_through_the_agent() -> None:
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    SEEN.clear()
    tagged = _tagged()
    model = ScriptedChatModel([
        AIMessage(content="", id="a1", tool_calls=[
            {"name": "tagged", "args": {"text": "hi"}, "id": "c1"}]),
        AIMessage(content="done", id="a2")])
    agent = create_agent(model=model, tools=[tagged], checkpointer=False)
    config: Any = {"metadata": {"tag": "run-7"}}
    agent.graph.invoke({"messages": [HumanMessage(content="go")]}, config=config,
                       context=agent.context("t-hints", "u"))
    assert SEEN == ["run-7"]
    assert not any(isinstance(v, str) for v in tagged.func.__annotations__.values())


class _TaggedTool(BaseTool):
    """A tool class with its own `_run` (this module's annotations are strings)."""

    name: str = "tagged_class"
    description: str = "Echo the text with the run's tag."

    def _run(self, text: str, config: RunnableConfig) -> str:
        SEEN.append(str((config.get("metadata") or {}).get("tag")))
        return text


def test_the_tool_class_run_hints_are_resolved_too() -> None:
    """LangChain reads `type(tool)._run`'s hints on every call, to find a config parameter."""
    expected = typing.get_type_hints(_TaggedTool._run, include_extras=True)
    assert all(isinstance(v, str) for v in _TaggedTool._run.__annotations__.values())
    structured = typing.get_type_hints(StructuredTool._run, include_extras=True)
    with_resolved_signatures([_TaggedTool(), _tagged()])
    assert _TaggedTool._run.__annotations__ == expected
    assert StructuredTool._run.__annotations__ == structured
    assert not any(isinstance(v, str) for v in StructuredTool._run.__annotations__.values())
    assert inspect.signature(_TaggedTool._run) is _TaggedTool._run.__signature__
    # LangChain still finds the config parameter, and the tool gets the run's config.
    SEEN.clear()
    assert _TaggedTool().invoke({"text": "hi"}, config={"metadata": {"tag": "run-8"}}) == "hi"
    assert SEEN == ["run-8"]
