"""MCP test helpers: the test server's sessions over the in-memory transport."""

from __future__ import annotations

from typing import Any

from mcp.shared.memory import create_connected_server_and_client_session

from antler.chain.config import McpRouting, McpServerSettings, McpToolSettings
from antler.runtime.mcp.sessions import McpSessions
from tests.mcp_server import APP

ROUTED = {
    "get_forecast": McpToolSettings(routing=McpRouting(
        mode="prefer", priority=80, keywords=["forecast", "天气"])),
    "create_issue": McpToolSettings(routing=McpRouting(
        mode="prefer", priority=40, keywords=["issue", "bug", "forecast"])),
}
"""Routing of the test server's tools: the forecast outranks the tracker."""

TOOL_NAMES = ("big_report", "broken", "create_issue", "fetch_page", "get_forecast", "slow")


def in_memory(name: str = "tools", **settings: Any) -> McpSessions:
    """Started sessions with the test server over the in-memory transport as `name`."""
    settings.setdefault("tools", ROUTED)
    server = McpServerSettings(command="in-memory", **settings)
    return McpSessions({name: server}, connectors={
        name: lambda: create_connected_server_and_client_session(APP)}).start()
