"""MCP: per-tool keys by prefixed name, routing ranked by relevance, results as text."""

from __future__ import annotations

from antler.chain.config import McpRouting, McpToolSettings
from antler.cli.run import content_text
from antler.contracts.deferred import CatalogEntry
from antler.contracts.mcp import mcp_routing_of
from antler.plugins.mcp_routing.middleware import ranked
from tests.mcp_support import in_memory


def test_per_tool_settings_accept_the_prefixed_name_mcp_list_shows():
    routed = {"t_get_forecast": McpToolSettings(routing=McpRouting(
        mode="prefer", priority=90, keywords=["forecast"]))}
    owner = in_memory(tool_name_prefix="t_", tools=routed)
    try:
        tools = {tool.name: tool for tool in owner.tools}
        assert mcp_routing_of(tools["t_get_forecast"]) == {
            "mode": "prefer", "priority": 90, "keywords": ["forecast"]}
        assert mcp_routing_of(tools["t_fetch_page"])["mode"] == "off"  # the server's default
    finally:
        owner.close()


def _entry(name: str, description: str) -> CatalogEntry:
    return CatalogEntry(name=name, description=description, schema={}, server="files",
                        routing={"mode": "prefer", "priority": 50, "keywords": ["file"]})


def test_server_level_routing_ranks_by_relevance_to_the_message_not_by_name():
    tools = [_entry("create_directory", "Create a new directory"),
             _entry("edit_file", "Make line-based edits to a text file"),
             _entry("move_file", "Move or rename a file"),
             _entry("read_text_file", "Read the complete contents of a file as text"),
             _entry("write_file", "Create a new file or overwrite a file")]
    best = ranked(tools, "please read the file notes.txt and show its contents")
    assert best[0].name == "read_text_file"
    # alphabetical order would have promoted create_directory, edit_file, move_file
    assert "read_text_file" in [entry.name for entry in best[:3]]
    # an explicit priority still comes first
    urgent = CatalogEntry(name="zz_audit", description="", schema={}, server="files",
                          routing={"mode": "prefer", "priority": 90, "keywords": ["file"]})
    assert ranked([*tools, urgent], "read the file")[0].name == "zz_audit"


def test_tool_results_print_as_text_not_content_blocks():
    blocks = [{"type": "text", "text": "42", "id": "lc_1"},
              {"type": "text", "text": "and more"}]
    assert content_text(blocks) == "42\nand more"
    assert content_text([{"type": "image", "base64": "..."}]) == "[image]"
    assert content_text("plain") == "plain"


def test_antler_run_prints_an_mcp_result_as_text(tmp_path):
    import sys
    from pathlib import Path

    import yaml
    from click.testing import CliRunner

    from antler.cli import cli

    server = Path(__file__).parents[2] / "mcp_server.py"
    config = tmp_path / "antler.yaml"
    config.write_text(yaml.safe_dump({
        "mcp_servers": {"weather": {"command": sys.executable, "args": [str(server)],
                                    "start_timeout": 120}},
        "title": {"enabled": False}, "memory": {"enabled": False}}))
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump([
        {"content": "", "tool_calls": [{"name": "get_forecast", "args": {"city": "Oslo"}}]},
        "It is sunny."]))
    result = CliRunner().invoke(cli, ["run", "forecast?", "--config", str(config), "--model",
                                      f"scripted:{script}", "--home", str(tmp_path / "h")])
    assert result.exit_code == 0, result.stderr
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("<- get_forecast: ")]
    assert "Oslo" in line and "{'type'" not in line and "'text':" not in line, line
