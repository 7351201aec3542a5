"""Deferring MCP tools behind `tool_search` (``tool_search: {enabled: true}``).

`defer_tools` runs once per agent build, after authorization's build-time
selection: the MCP tools that survived go to an immutable `DeferredCatalog`,
and the agent gets one more tool, ``tool_search``. The deferred tools stay
compiled (they must be able to run once promoted); the deferred_tool_filter
plugin hides their schemas until they are promoted, and refuses calls to them
before that.

``tool_search(query)`` returns the JSON schemas of the tools `query` finds
(``select:a,b``, ``+name rest`` or a regular expression; see
`DeferredCatalog.search`) and promotes them for the rest of the thread through
the ``promoted`` state channel, tied to the catalog's hash. Descriptions come
from MCP servers, so the tool declares its output remote content: forged
framework tags in them are neutralized like any fetched page.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.types import Command

from antler.contracts.deferred import (
    TOOL_SEARCH,
    CatalogEntry,
    DeferredCatalog,
    DeferredTools,
    discovery_scope,
    promotion,
)
from antler.contracts.mcp import is_mcp_tool, mcp_routing_of, mcp_server_of
from antler.errors import BuildError

__all__ = ["defer_tools", "make_tool_search"]

TOOL_SEARCH_DESCRIPTION = (
    "Load the schemas of deferred tools (listed by name in <available-deferred-tools>) so "
    "you can call them. Query forms: 'select:name_a,name_b' loads those tools exactly; "
    "'+word more words' keeps tools whose name contains word, ranked by the rest; anything "
    "else is a case-insensitive regular expression over tool names and descriptions. "
    "Returns at most 5 schemas (select: is not limited); the tools found stay available "
    "for the rest of the conversation."
)


def catalog_entry(tool: Any) -> CatalogEntry:
    """The catalog entry of one tool: its model-facing schema and routing."""
    schema = convert_to_openai_tool(tool)["function"]
    return CatalogEntry(name=tool.name, description=str(tool.description or ""),
                        schema=schema, server=mcp_server_of(tool), routing=mcp_routing_of(tool))


def defer_tools(tools: Sequence[Any], setup: DeferredTools) -> list[Any]:
    """`tools` plus ``tool_search`` when any is an MCP tool; the catalog goes into `setup`.

    A tool of the caller already named ``tool_search`` would shadow the generated
    one: that is a build error, not a silent pick.
    """
    deferred = [tool for tool in tools if is_mcp_tool(tool)]
    if not deferred:
        return list(tools)
    clash = [tool for tool in tools if getattr(tool, "name", None) == TOOL_SEARCH]
    if clash:
        raise BuildError(
            f"a tool named {TOOL_SEARCH!r} is already given to the agent, and tool_search is "
            "on: rename that tool, or set `tool_search: {enabled: false}`")
    catalog = DeferredCatalog(tuple(catalog_entry(tool) for tool in deferred))
    search = make_tool_search(catalog)
    setup.install(catalog, search)
    return [*tools, search]


def make_tool_search(catalog: DeferredCatalog) -> Any:
    """The ``tool_search`` tool over `catalog`."""
    def search(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
        scope = discovery_scope()
        found = catalog.search(query, allowed=scope)
        if not found:
            hint = (" (the active skill allows only some tools)" if scope is not None else "")
            return ToolMessage(
                content=f"No deferred tool matches {query!r}{hint}. Try other words, or "
                        "'select:<name>' with a name from <available-deferred-tools>.",
                tool_call_id=tool_call_id, name=TOOL_SEARCH)
        content = json.dumps([dict(entry.schema) for entry in found], ensure_ascii=False)
        message = ToolMessage(content=content, tool_call_id=tool_call_id, name=TOOL_SEARCH)
        return Command(update={**promotion(catalog.hash, [entry.name for entry in found]),
                               "messages": [message]})

    async def asearch(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
        return search(query, tool_call_id)

    return StructuredTool.from_function(
        func=search, coroutine=asearch, name=TOOL_SEARCH, description=TOOL_SEARCH_DESCRIPTION,
        metadata={"antler": {"remote_content": True, "deferred_catalog": catalog.hash}})
