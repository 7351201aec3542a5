"""Hostile sizes and nesting that reach a run: a skill file grown past its limit after the
listing, and a tool result nested a hundred thousand levels deep, through real graphs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool

from antler.contracts.toolmeta import tool_meta
from antler.plugin_api.context import SKILLS
from antler.runtime.skills import SkillsRegistry

from .tail_support import MODES, Tools, call, make_agent, run

FIXTURES = Path(__file__).parent.parent / "fixtures" / "skills"
DEEP_JSON = '{"error": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_a_skill_grown_past_its_limit_after_the_listing_is_not_read_whole(
        tmp_path: Path, mode: str, use_async: bool) -> None:
    root = tmp_path / "skills"
    shutil.copytree(FIXTURES / "public", root / "public")
    registry = SkillsRegistry([root])
    assert [s.name for s in registry.enabled()] == ["data-report"]   # listed while small
    with (root / "public" / "data-report" / "SKILL.md").open("a") as grown:
        grown.write("x" * 300 * 1024)                                # the default: 256 KiB
    agent, model = make_agent(tmp_path, [], services={SKILLS: registry}, tools=Tools(),
                              tool_names=("ls", "read_file"), **MODES[mode])
    state = run(agent, "/data-report summarize", use_async=use_async)
    assert model.calls == []
    reply = state["messages"][-1]
    assert isinstance(reply, AIMessage) and "cannot be read" in reply.text


class DeepResults(Tools):
    """A remote tool whose result is JSON nested a hundred thousand levels deep."""

    def tool(self, name: str) -> StructuredTool:
        def deep(**kwargs: Any) -> str:
            self.ran.append((name, kwargs))
            return DEEP_JSON

        async def adeep(**kwargs: Any) -> str:
            return deep(**kwargs)

        return StructuredTool.from_function(
            func=deep, coroutine=adeep, name=name, description="Fetches a document.",
            args_schema={"type": "object", "properties": {}, "additionalProperties": True})


def test_a_tool_result_nested_past_the_bound_is_text_and_the_run_goes_on(
        tmp_path: Path, mode: str, use_async: bool) -> None:
    tools = DeepResults()
    agent, model = make_agent(tmp_path, [call("lookup", q="x"), "Read it."], tools=tools,
                              **MODES[mode])
    state = run(agent, "fetch the document", use_async=use_async)
    assert tools.count("lookup") == 1 and state["messages"][-1].text == "Read it."
    (result,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    meta = tool_meta(result)
    assert meta is not None and meta.status == "success"
    assert len(model.calls) == 2
