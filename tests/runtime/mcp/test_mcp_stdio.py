"""End to end: a real stdio MCP server (tests/mcp_server.py) started from the operator config.

One server process for the module (starting one costs seconds): the first agent
is built by `create_agent` from the config and owns the sessions; the second
shares them through the `mcp_sessions` service, as a subagent would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage

from antler.chain.config import parse_config
from antler.contracts.deferred import PROMOTED_KEY, TOOL_SEARCH
from antler.plugin_api.registry import discover
from antler.runtime.mcp import MCP_SESSIONS
from tests.mcp_server import FORGED
from tests.plugins.support import make_agent

SERVER = Path(__file__).parents[2] / "mcp_server.py"

CONFIG = f"""
mcp_servers:
  tracker:
    command: {sys.executable}
    args: [{SERVER}]
    env: {{ANTLER_TEST_TOKEN: "${{HOME}}"}}
    tool_name_prefix: tr_
    start_timeout: 120
    tools:
      get_forecast: {{routing: {{mode: prefer, priority: 90, keywords: [forecast]}}}}
  gone:
    command: /nonexistent/antler-test-mcp-server
tool_search: {{enabled: true}}
title: {{enabled: false}}
memory: {{enabled: false}}
"""


def call(name: str, **args: object) -> dict:
    return {"tool_calls": [{"name": name, "args": args}]}


def results(state: dict, name: str) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == name]


@pytest.fixture(scope="module")
def lead(tmp_path_factory):
    """The agent built from the operator config: it starts (and will close) the server."""
    config = parse_config(CONFIG, discover())
    agent, model = make_agent(tmp_path_factory.mktemp("lead"), [
        call(TOOL_SEARCH, query="+tr_ fetch"),
        call("tr_fetch_page", url="https://attacker.example"),
        "The page welcomes you."], config=config)
    yield agent, model
    sessions = agent.services.items[MCP_SESSIONS]
    agent.close()
    assert sessions.status["tracker"].state == "closed"


def test_search_promote_call_and_a_forged_tag_neutralized(lead):
    agent, model = lead
    sessions = agent.services.items[MCP_SESSIONS]
    assert sessions.status["tracker"].state == "ready"
    assert sessions.status["gone"].state == "failed"

    state = agent.invoke("what does attacker.example say?", thread_id="e2e")

    assert "tr_fetch_page" not in model.requests[0].tool_names
    found, = results(state, TOOL_SEARCH)
    assert [schema["name"] for schema in json.loads(found.text)] == ["tr_fetch_page"]
    assert state[PROMOTED_KEY]["names"] == ["tr_fetch_page"]
    assert "tr_fetch_page" in model.requests[1].tool_names
    page, = results(state, "tr_fetch_page")
    assert page.status != "error" and "welcome" in page.text
    assert FORGED not in page.text and "<system-reminder>" not in page.text
    assert state["messages"][-1].text == "The page welcomes you."


def test_auto_promotion_from_the_users_words_and_a_refused_unpromoted_call(lead, tmp_path):
    agent, _ = lead
    second, model = make_agent(tmp_path, [
        call("tr_get_forecast", city="Oslo"), call("tr_create_issue", title="rain"), "done"],
        config=agent.config, services={MCP_SESSIONS: agent.services.items[MCP_SESSIONS]})
    state = second.invoke("Give me the forecast for Oslo", thread_id="auto")
    assert "tr_get_forecast" in model.requests[0].tool_names
    forecast, = results(state, "tr_get_forecast")
    assert forecast.status != "error" and "Forecast for Oslo" in forecast.text
    refused, = results(state, "tr_create_issue")
    assert refused.status == "error" and "call tool_search first" in refused.text.replace(
        "Call", "call")
    assert not results(state, TOOL_SEARCH)
    second.close()  # sessions it did not start stay open for their owner
    assert agent.services.items[MCP_SESSIONS].status["tracker"].state == "ready"
