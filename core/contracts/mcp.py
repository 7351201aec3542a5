"""Telling MCP tools apart: which tools call an MCP server, and how they are routed.

A tool that calls an MCP server returns whatever that server (and whatever the
server read) wrote, so tool_result_sanitization treats its result as remote
content, and with `tool_search` on it is deferred. Antler's session owner
(`antler.runtime.mcp`) marks the tools it loads under ``metadata["antler"]``:

``mcp_server``
    the name of the server in ``mcp_servers:``;
``mcp_routing``
    ``{"mode": "off" | "prefer", "priority": 0-100, "keywords": [...]}``, the
    tool's routing (its own, else its server's), read by mcp_routing.

Tools converted by langchain-mcp-adapters without Antler (an embedder's own
loading) are recognised too: from their coroutine's module, or the MCP
annotations the adapter copies into their metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "MCP_ADAPTER_PACKAGE",
    "MCP_ANNOTATION_KEYS",
    "MCP_METADATA_KEYS",
    "antler_metadata",
    "is_mcp_tool",
    "mcp_routing_of",
    "mcp_server_of",
]

MCP_ADAPTER_PACKAGE = "langchain_mcp_adapters"
MCP_METADATA_KEYS = frozenset({"mcp", "mcp_server"})
"""Metadata keys (top level or under ``"antler"``) that mark a tool as an MCP tool."""
MCP_ANNOTATION_KEYS = frozenset(
    {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "_meta"}
)
"""Keys langchain-mcp-adapters copies from an MCP tool's annotations into its metadata."""
ROUTING_KEY = "mcp_routing"


def _metadata(tool: Any) -> Mapping[str, Any]:
    metadata = getattr(tool, "metadata", None)
    # `type(...) is dict` first: the usual case, without the Mapping ABC check's cost.
    return metadata if type(metadata) is dict or isinstance(metadata, Mapping) else {}


def antler_metadata(tool: Any) -> Mapping[str, Any]:
    """``tool.metadata["antler"]``, or an empty mapping."""
    antler = _metadata(tool).get("antler")
    return antler if type(antler) is dict or isinstance(antler, Mapping) else {}


def is_mcp_tool(tool: Any) -> bool:
    """Whether `tool` calls an MCP server (see the module docstring for how it is told)."""
    if tool is None:
        return False
    metadata = _metadata(tool)
    antler = antler_metadata(tool)
    if MCP_METADATA_KEYS & set(metadata) or any(antler.get(key) for key in MCP_METADATA_KEYS):
        return True
    if MCP_ANNOTATION_KEYS & set(metadata):
        return True
    for target in (tool, getattr(tool, "coroutine", None), getattr(tool, "func", None)):
        module = getattr(target, "__module__", None) or ""
        if module.split(".", 1)[0] == MCP_ADAPTER_PACKAGE:
            return True
    return type(tool).__module__.split(".", 1)[0] == MCP_ADAPTER_PACKAGE


def mcp_server_of(tool: Any) -> str | None:
    """The ``mcp_servers:`` name of the server `tool` calls, when Antler loaded it."""
    server = antler_metadata(tool).get("mcp_server")
    return server if isinstance(server, str) else None


def mcp_routing_of(tool: Any) -> dict[str, Any] | None:
    """The tool's routing (mode, priority, keywords), or None when it has none."""
    routing = antler_metadata(tool).get(ROUTING_KEY)
    if not isinstance(routing, Mapping):
        return None
    keywords = [str(word) for word in routing.get("keywords") or () if str(word).strip()]
    try:
        priority = max(0, min(100, int(routing.get("priority", 50))))
    except (TypeError, ValueError):
        priority = 50
    return {"mode": routing.get("mode", "off"), "priority": priority, "keywords": keywords}
