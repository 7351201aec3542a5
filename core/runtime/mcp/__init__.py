"""MCP servers from the operator's ``mcp_servers:`` section (a platform service).

`mcp_tools` gives `create_agent` the tools of the configured servers, from
the build's `McpSessions` (``services["mcp_sessions"]``): one provided by the
embedding application (tests pass in-memory servers that way), or one started
here and closed with the agent. A subagent built from the same services reuses
the lead's sessions.

This package imports the MCP SDK only when a server is configured, so the
base install (without the ``mcp`` extra) never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from antler.errors import BuildError

if TYPE_CHECKING:
    from antler.chain.config import OperatorConfig
    from antler.plugin_api.context import Services

    from .sessions import McpSessions

__all__ = ["MCP_SESSIONS", "mcp_tools", "start_sessions"]

MCP_SESSIONS = "mcp_sessions"
"""Service name of the build's `McpSessions`."""


def start_sessions(config: OperatorConfig, *, strict: bool = True) -> McpSessions:
    """Start the sessions of `config`'s servers (see `McpSessions.start`).

    `strict=False` reports a failing ``required`` server in its status instead
    of raising.
    """
    try:
        from .sessions import McpSessions
    except ImportError as exc:
        raise BuildError(
            f"mcp_servers: the MCP client is not installed ({exc}); install Antler with the "
            "`mcp` extra (pip install 'antler[mcp]'), or remove the `mcp_servers:` section"
        ) from None
    return McpSessions(config.mcp_servers).start(strict=strict)


def mcp_tools(config: OperatorConfig, services: Services) -> tuple[list[Any], Any]:
    """(the MCP tools for this build, a closer for sessions started here, or None)."""
    owner = services.items.get(MCP_SESSIONS)
    if owner is not None:
        return owner.tools, None
    if not any(server.enabled for server in config.mcp_servers.values()):
        return [], None
    owner = services.items[MCP_SESSIONS] = start_sessions(config)
    return owner.tools, owner.close
