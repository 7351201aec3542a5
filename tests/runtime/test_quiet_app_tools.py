"""The application's tools (`create_agent(tools=...)`) take the quiet path too
(`antler.runtime.quiettools.quiet_tools`) when nothing observes a call.

Through the real chain, fused and unfused: the same turns once with no handler and
once with a tracer in the run's config. Unobserved, LangChain starts a tool run only
for the tools that must keep it (one that handles its own errors, one whose function
takes `callbacks`, one with a content-and-artifact response); observed, the tracer
sees every tool run. The answers are the same either way: results, the injected call
id, an argument error, a raised exception, a handled error and an artifact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import CallbackManager
from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool, ToolException, tool

from antler.runtime.quiettools import quiet_tools
from tests.plugins.support import ToolRuns as _ToolRuns
from tests.plugins.support import make_agent

FUSE = pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])


@tool
def forecast(city: str, days: int = 1) -> str:
    """The weather in `city` for the next `days` days."""
    return f"{city}: sunny for {days} day(s)"


@tool
def whoami(call_id: Annotated[str, InjectedToolCallId]) -> str:
    """The id of this call."""
    return f"call {call_id}"


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


def _handled(reason: str) -> str:
    raise ToolException(f"handled: {reason}")


handled = StructuredTool.from_function(_handled, name="handled", description="Fails, handled.",
                                       handle_tool_error=True)


@tool
def nested(text: str, callbacks: Any = None) -> str:
    """Takes LangChain's callbacks."""
    return f"nested {text} {type(callbacks).__name__}"


@tool(response_format="content_and_artifact")
def artifact(text: str) -> tuple[str, dict[str, str]]:
    """Content and an artifact."""
    return f"content {text}", {"raw": text}


APP_TOOLS = [forecast, whoami, explode, handled, nested, artifact]
LOUD = ["artifact", "handled", "nested"]  # keep LangChain's run, observed or not


def _turns() -> list[Any]:
    return [
        {"tool_calls": [{"name": "forecast", "args": {"city": "Oslo", "days": 2}},
                        {"name": "whoami", "args": {}, "id": "call_who"}]},
        {"tool_calls": [{"name": "forecast", "args": {"city": 3, "extra": True}},
                        {"name": "explode", "args": {"reason": "x"}}]},
        {"tool_calls": [{"name": "handled", "args": {"reason": "y"}},
                        {"name": "nested", "args": {"text": "z"}},
                        {"name": "artifact", "args": {"text": "w"}}]},
        "done",
    ]


def _answers(state: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(m.name, m.status, m.content, m.tool_call_id, m.artifact)
            for m in state["messages"] if isinstance(m, ToolMessage)]


@FUSE
def test_app_tools_answer_alike_with_and_without_a_tracer(tmp_path: Path, fuse: bool,
                                                          monkeypatch: Any) -> None:
    ran: list[str] = []  # the tool runs LangChain starts, handlers or not
    start = CallbackManager.on_tool_start
    monkeypatch.setattr(CallbackManager, "on_tool_start", lambda self, serialized, *a, **k: (
        ran.append(serialized["name"]), start(self, serialized, *a, **k))[1])
    agent, _ = make_agent(tmp_path / "quiet", _turns(), fuse=fuse, tools=APP_TOOLS)
    with agent:
        quiet = agent.invoke("work", thread_id="t1")
    assert sorted(ran) == LOUD  # a tool run only where the tool must keep it
    ran.clear()
    tracer = _ToolRuns()
    agent, _ = make_agent(tmp_path / "traced", _turns(), fuse=fuse, tools=APP_TOOLS)
    with agent:
        traced = agent.graph.invoke(agent.input("work"), context=agent.context("t1"),
                                    config={**agent.run_config("t1"),
                                            "callbacks": [tracer]})
    everything = ["artifact", "explode", "forecast", "forecast", "handled", "nested",
                  "whoami"]
    assert sorted(ran) == sorted(tracer.names) == everything
    answers = _answers(quiet)
    assert answers == _answers(traced)
    by_name = {(name, index): (status, content, call_id, art)
               for index, (name, status, content, call_id, art) in enumerate(answers)}
    assert by_name[("forecast", 0)][:2] == ("success", "Oslo: sunny for 2 day(s)")
    assert by_name[("whoami", 1)][1:3] == ("call call_who", "call_who")
    assert by_name[("forecast", 2)][0] == "error"
    assert "Input should be a valid string" in by_name[("forecast", 2)][1]
    assert by_name[("explode", 3)][0] == "error" and "boom: x" in by_name[("explode", 3)][1]
    assert by_name[("handled", 4)][1] == "handled: y"
    assert by_name[("nested", 5)][1] == "nested z CallbackManager"
    assert by_name[("artifact", 6)][1:] == ("content w", by_name[("artifact", 6)][2],
                                            {"raw": "w"})


def test_quiet_tools_copies_the_tools_and_leaves_the_callers_alone() -> None:
    """The caller's tool objects keep their class; a copy keeps name, schema, function and
    flags (checked on each call) and is not wrapped twice; a tool whose function takes
    `callbacks`, or that has no sync function, is kept as it is."""
    async def _later(text: str) -> str:
        return text

    async_only = StructuredTool.from_function(coroutine=_later, name="later",
                                              description="Async only.")
    given = [*APP_TOOLS, async_only, {"type": "web_search"}]
    made = quiet_tools(given)
    assert all(type(tool) is StructuredTool for tool in APP_TOOLS)
    kept = [tool.name if hasattr(tool, "name") else tool["type"]
            for tool, original in zip(made, given, strict=True) if tool is original]
    assert kept == ["nested", "later", "web_search"]
    assert all(a is b for a, b in zip(quiet_tools(made), made, strict=True))
    copy = made[0]
    assert type(copy).__name__ == "StructuredTool" and isinstance(copy, StructuredTool)
    assert (copy.name, copy.args_schema, copy.func) == (
        forecast.name, forecast.args_schema, forecast.func)
    assert made[3].handle_tool_error is True
    assert copy.invoke({"city": "Rome"}) == forecast.invoke({"city": "Rome"})
