"""The MCP session owner, the `mcp_servers:` section and `antler mcp list`.

Sessions use the in-memory transport except where a failing command is the
point (no server process is started here; tests/runtime/mcp/test_mcp_stdio.py starts one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from antler.chain.config import McpServerSettings, parse_config
from antler.cli import cli
from antler.contracts.deferred import CatalogEntry, DeferredCatalog, merge_promoted
from antler.contracts.mcp import is_mcp_tool, mcp_routing_of, mcp_server_of
from antler.errors import BuildError, ConfigError
from antler.plugin_api.registry import discover
from antler.runtime.mcp.sessions import McpSessions, expand_env
from tests.mcp_support import TOOL_NAMES, in_memory
from tests.plugins.support import make_agent

MISSING = "/nonexistent/antler-test-mcp-server"


@pytest.fixture(scope="module")
def registry():
    return discover()


@pytest.fixture(scope="module")
def sessions():
    owner = in_memory(tool_name_prefix="t_", call_timeout=0.5)
    yield owner
    owner.close()


def tools_of(owner: McpSessions) -> dict:
    return {tool.name: tool for tool in owner.tools}


# -- the session owner ------------------------------------------------------------------


def test_tools_are_named_marked_and_routed_as_configured(sessions):
    tools = tools_of(sessions)
    assert sorted(tools) == sorted(f"t_{name}" for name in TOOL_NAMES)
    forecast = tools["t_get_forecast"]
    assert is_mcp_tool(forecast) and mcp_server_of(forecast) == "tools"
    assert mcp_routing_of(forecast) == {"mode": "prefer", "priority": 80,
                                        "keywords": ["forecast", "天气"]}
    assert mcp_routing_of(tools["t_fetch_page"])["mode"] == "off"
    status = sessions.status["tools"]
    assert status.state == "ready" and status.transport == "memory"


def test_a_tool_runs_from_sync_code_and_from_another_event_loop(sessions):
    forecast = tools_of(sessions)["t_get_forecast"]
    message = forecast.invoke({"type": "tool_call", "id": "c1", "name": "t_get_forecast",
                               "args": {"city": "Oslo"}})
    assert "Forecast for Oslo" in message.text
    assert message.artifact == {"structured_content": {"result": "Forecast for Oslo: sunny, 21 C"}}

    async def both() -> list:
        return await asyncio.gather(forecast.ainvoke({"city": "Rome"}),
                                    forecast.ainvoke({"city": "Lima"}))

    rome, lima = asyncio.run(both())
    assert "Rome" in rome[0]["text"] and "Lima" in lima[0]["text"]


def test_a_call_is_bounded_by_call_timeout(sessions):
    with pytest.raises(TimeoutError, match=r"'t_slow' timed out after 0.5 s \(mcp_servers"
                                           r"\.tools\.call_timeout\)"):
        tools_of(sessions)["t_slow"].invoke({"seconds": 5})
    # The session survives a timed-out call.
    assert "Oslo" in tools_of(sessions)["t_get_forecast"].invoke({"city": "Oslo"})[0]["text"]


def test_close_ends_the_sessions_and_later_calls_fail_clearly():
    owner = in_memory()
    forecast = tools_of(owner)["get_forecast"]
    owner.close()
    owner.close()
    assert owner.status["tools"].state == "closed"
    with pytest.raises(RuntimeError, match="MCP server 'tools' is closed"):
        forecast.invoke({"city": "Oslo"})


def test_a_server_that_fails_to_start_is_one_warning_and_no_tools(caplog):
    caplog.set_level(logging.WARNING, logger="antler.mcp")
    with McpSessions({"gone": McpServerSettings(command=MISSING)}).start() as owner:
        assert owner.tools == []
        status = owner.status["gone"]
    assert status.state == "failed" and MISSING in status.reason and "not found" in status.reason
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                and r.name.startswith("antler.mcp")]
    assert len(warnings) == 1 and "'gone'" in warnings[0] and "not found" in warnings[0]


def test_a_crashing_server_reports_the_last_line_of_its_stderr():
    crash = McpServerSettings(command=sys.executable, args=[
        "-c", "import sys; print('config key FOO is missing', file=sys.stderr); sys.exit(2)"])
    with McpSessions({"crash": crash}).start() as owner:
        reason = owner.status["crash"].reason
    assert "config key FOO is missing" in reason


def test_a_required_server_that_fails_stops_the_start():
    servers = {"gone": McpServerSettings(command=MISSING, required=True)}
    with pytest.raises(BuildError, match=r"'gone' is required but did not start.*required: false"):
        McpSessions(servers).start()


def test_a_server_that_does_not_answer_is_bounded_by_start_timeout():
    @contextlib.asynccontextmanager
    async def silent():
        await asyncio.sleep(30)
        yield None

    settings = McpServerSettings(command="silent", start_timeout=0.2)
    with McpSessions({"silent": settings}, connectors={"silent": silent}).start() as owner:
        assert owner.status["silent"].state == "failed"
        assert "within 0.2 s" in owner.status["silent"].reason


def test_two_servers_with_one_tool_name_keep_the_first(caplog):
    from mcp.shared.memory import create_connected_server_and_client_session

    from tests.mcp_server import APP

    def connect():
        return create_connected_server_and_client_session(APP)

    servers = {name: McpServerSettings(command="in-memory") for name in ("a", "b")}
    with McpSessions(servers, connectors={"a": connect, "b": connect}).start() as owner:
        assert sorted(t.name for t in owner.tools) == sorted(TOOL_NAMES)
        assert {mcp_server_of(t) for t in owner.tools} == {"a"}
    assert "tool_name_prefix" in caplog.text


def test_env_references_come_from_the_environment():
    assert expand_env({"TOKEN": "Bearer ${KEY}", "PLAIN": "x"}, "where", {"KEY": "s3"}) == {
        "TOKEN": "Bearer s3", "PLAIN": "x"}
    with pytest.raises(ValueError, match=r"where.TOKEN uses \$\{KEY\}, which is not set"):
        expand_env({"TOKEN": "${KEY}"}, "where", {})
    server = McpServerSettings(command=sys.executable, env={"KEY": "${ANTLER_TEST_UNSET_VAR}"})
    with McpSessions({"s": server}, environ={}).start() as owner:
        assert "ANTLER_TEST_UNSET_VAR" in owner.status["s"].reason


def test_a_streamable_http_server_gets_its_headers_from_the_environment():
    import socket
    import threading
    import time

    import uvicorn

    from tests.mcp_server import http_app

    server = uvicorn.Server(uvicorn.Config(http_app().streamable_http_app(), host="127.0.0.1",
                                           port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        settings = McpServerSettings(url=f"http://127.0.0.1:{port}/mcp",
                                     headers={"X-Token": "${ANTLER_TEST_TOKEN}"})
        with McpSessions({"h": settings}, environ={"ANTLER_TEST_TOKEN": "abc"}).start() as owner:
            assert owner.status["h"].transport == "streamable_http"
            assert owner.tools[0].invoke({})[0]["text"] == "token=abc"
    finally:
        server.should_exit = True
        thread.join(10)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    url = f"http://127.0.0.1:{free}/mcp"
    with McpSessions({"down": McpServerSettings(url=url, start_timeout=10)}).start() as owner:
        assert owner.status["down"].state == "failed" and url in owner.status["down"].reason


# -- config ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "problem"), [
    ("mcp_servers: {a: {command: x, url: http://h}}", "exactly one of `command`"),
    ("mcp_servers: {a: {}}", "exactly one of `command`"),
    ("mcp_servers: {a: {command: x, headers: {A: b}}}", "`headers` are for a `url` server"),
    ("mcp_servers: {a: {url: http://h, args: [x]}}", "are for a `command` server"),
    ("mcp_servers: {off: {command: x}}", "is not text"),
    ("mcp_servers: {'a b': {command: x}}", "may hold only letters"),
    ("mcp_servers: {a: {command: x, routing: {mode: always}}}", "routing.mode"),
    ("mcp_servers: {a: {command: x, comand: y}}", "comand"),
    ("tool_search: {enabled: true, top_k: 2}", "top_k"),
])
def test_bad_mcp_config_is_a_located_error(registry, text, problem):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, registry, source="cfg.yaml")
    assert problem in str(caught.value) and "cfg.yaml:1:" in str(caught.value)


def test_routing_priority_and_top_k_are_clamped(registry):
    config = parse_config(textwrap.dedent("""
        mcp_servers:
          gh:
            url: https://mcp.example/v1
            headers: {Authorization: "Bearer ${GH_TOKEN}"}
            routing: {mode: prefer, priority: 400, keywords: [" issue ", ""]}
            tools: {search: {routing: {mode: "off"}}}
        tool_search: {enabled: true, auto_promote_top_k: 9}
        """), registry)
    server = config.mcp_servers["gh"]
    assert server.transport == "streamable_http"
    assert server.routing.priority == 100 and server.routing.keywords == ["issue"]
    assert server.routing_for("search").mode == "off" and server.routing_for("x").mode == "prefer"
    assert config.section("tool_search").auto_promote_top_k == 5


def test_the_schema_describes_the_sections(registry):
    result = CliRunner().invoke(cli, ["config", "schema"])
    schema = json.loads(result.output)
    text = json.dumps(schema)
    assert "mcp_servers" in schema["properties"] and "tool_search" in schema["properties"]
    assert "`${VAR}` takes VAR from Antler's environment" in text


# -- the catalog and the promoted channel -------------------------------------------------


def entry(name: str, description: str = "", **schema: object) -> CatalogEntry:
    return CatalogEntry(name, description, {"name": name, "parameters": schema})


CATALOG = DeferredCatalog((entry("gh_create_issue", "Open an issue"),
                           entry("gh_search", "Search code and ISSUES"),
                           entry("web_fetch", "Fetch a page"),
                           *(entry(f"extra_{n}", "an issue helper") for n in range(6))))


def test_search_forms():
    names = lambda query, **kw: [e.name for e in CATALOG.search(query, **kw)]  # noqa: E731
    assert names("select:web_fetch, gh_search,nope") == ["web_fetch", "gh_search"]
    assert names("+gh issue") == ["gh_create_issue", "gh_search"]
    assert names("+gh") == ["gh_create_issue", "gh_search"]
    assert names("ISSUE") == ["gh_create_issue", "extra_0", "extra_1", "extra_2", "extra_3"]
    assert names("fetch(") == []
    assert names("fet.h") == ["web_fetch"]
    assert names("issue|fetch", allowed={"web_fetch", "gh_search"}) == ["web_fetch", "gh_search"]
    assert len(names("select:" + ",".join(e.name for e in CATALOG.entries))) == 9


def test_the_hash_follows_names_and_schemas_not_order():
    a, b = entry("a"), entry("b", type="object")
    assert DeferredCatalog((a, b)).hash == DeferredCatalog((b, a)).hash
    assert DeferredCatalog((a, b)).hash != DeferredCatalog((a, entry("b"))).hash
    with pytest.raises(ValueError, match="repeat"):
        DeferredCatalog((a, a))


def test_promotions_union_under_one_hash_and_are_replaced_by_another():
    first = merge_promoted(None, {"catalog_hash": "h1", "names": ["b", "a"]})
    assert first == {"catalog_hash": "h1", "names": ["a", "b"]}
    assert merge_promoted(first, {"catalog_hash": "h1", "names": ["c", "a"]})["names"] == [
        "a", "b", "c"]
    assert merge_promoted(first, {"catalog_hash": "h2", "names": ["z"]}) == {
        "catalog_hash": "h2", "names": ["z"]}
    assert merge_promoted(first, {"names": ["x"]}) == first


# -- agents and the CLI ------------------------------------------------------------------


def test_an_agent_whose_server_fails_works_without_its_tools(tmp_path, registry, caplog):
    caplog.set_level(logging.WARNING, logger="antler.mcp")
    config = parse_config(f"mcp_servers: {{gone: {{command: {MISSING}}}}}\n"
                          "tool_search: {enabled: true}\n", registry)
    agent, model = make_agent(tmp_path, ["still here"], config=config)
    with agent:
        state = agent.invoke("hello", thread_id="t1")
    assert state["messages"][-1].text == "still here"
    assert "tool_search" not in model.requests[0].tool_names
    assert any("'gone' did not start" in r.getMessage() for r in caplog.records)


def test_an_agent_with_a_required_server_that_fails_is_not_built(tmp_path, registry):
    config = parse_config(f"mcp_servers: {{gone: {{command: {MISSING}, required: true}}}}\n",
                          registry)
    with pytest.raises(BuildError, match="'gone' is required"):
        make_agent(tmp_path, ["x"], config=config)


def test_mcp_list_shows_states_and_reasons(tmp_path):
    path = tmp_path / "antler.yaml"
    path.write_text(f"mcp_servers:\n  gone: {{command: {MISSING}, required: true}}\n"
                    "  later: {url: 'http://127.0.0.1:9/mcp', enabled: false}\n")
    result = CliRunner().invoke(cli, ["mcp", "list", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    servers = json.loads(result.stdout)["servers"]
    assert [(s["name"], s["state"]) for s in servers] == [("gone", "failed"),
                                                          ("later", "disabled")]
    assert "not found" in servers[0]["reason"] and servers[1]["transport"] == "streamable_http"
    table = CliRunner().invoke(cli, ["mcp", "list", "--config", str(path)])
    assert table.exit_code == 0 and "failed" in table.output and "disabled" in table.output


def test_mcp_list_without_servers_says_so(tmp_path):
    result = CliRunner().invoke(cli, ["mcp", "list"])
    assert result.exit_code == 0 and "no MCP servers configured" in result.output


def test_the_base_install_does_not_import_mcp(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from antler.runtime.agent import create_agent
        from antler.runtime.models import ScriptedChatModel
        agent = create_agent(model=ScriptedChatModel(["hi"]), checkpointer="memory",
                             base_dir={str(tmp_path)!r})
        agent.invoke("hello", thread_id="t")
        agent.close()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("mcp",
                        "langchain_mcp_adapters"))
        assert not loaded, loaded
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3],
                   timeout=120)
