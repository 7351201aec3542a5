"""What deferring MCP tools saves, and what the session owner's bridge costs.

Run from the repository root: `python -m benchmarks.bench_mcp` (needs the `mcp` extra).

1. Context saved by `tool_search`: an in-memory MCP server with 40 tools of
   realistic schemas; the characters of tool schemas the model is sent on the
   first call of a run, with `tool_search` off and on, as a ratio. Counted, not
   timed: the figure is exact.
2. The bridge: one MCP call through the tool Antler hands out (its own event
   loop thread, the synchronous form as `invoke` uses it) against the same
   tool of langchain-mcp-adapters awaited in the loop that holds its session,
   best of N, as a ratio measured in the same process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time

from langchain_core.utils.function_calling import convert_to_openai_tool
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session

from antler.chain.config import McpServerSettings, parse_config
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.mcp import MCP_SESSIONS
from antler.runtime.mcp.sessions import McpSessions
from antler.runtime.models import ScriptedChatModel
from benchmarks.bench_dangling import best_of

TOOLS = 40


def server() -> FastMCP:
    app = FastMCP("bench")
    for n in range(TOOLS):
        def tool(query: str, limit: int = 10, since: str | None = None,
                 labels: list[str] | None = None, n: int = n) -> str:
            return f"result {n} for {query}"

        app.add_tool(tool, name=f"service_{n}_search",
                     description=f"Search service {n}'s records by free text, newest first. "
                                 "Filters by date and labels; returns at most `limit` rows.")
    return app


def first_request_chars(sessions: McpSessions, tool_search: bool) -> int:
    registry = discover()
    config = parse_config("title: {enabled: false}\nmemory: {enabled: false}\n"
                          + ("tool_search: {enabled: true}\n" if tool_search else ""), registry)
    model = ScriptedChatModel(["done"])
    with create_agent(config, model=model, services={MCP_SESSIONS: sessions},
                      checkpointer="memory", base_dir=tempfile.mkdtemp(),
                      registry=registry) as agent:
        agent.invoke("hello", thread_id="bench")
        search = agent.services.items["deferred_tools"].tool
        tools = {tool.name: tool for tool in [*sessions.tools, *agent.chain.tools, search]
                 if tool is not None}
    request = model.requests[0]
    schemas = [convert_to_openai_tool(tools[name]) for name in request.tool_names]
    prompt = request.messages[0].text
    return len(json.dumps(schemas)) + len(prompt)


async def direct_calls(app: FastMCP, runs: int, calls: int) -> float:
    """The adapter's own tool, awaited in the loop that holds its session (no bridge)."""
    from langchain_mcp_adapters.tools import load_mcp_tools

    async with create_connected_server_and_client_session(app) as session:
        tools = await load_mcp_tools(session, server_name="bench")
        tool = next(t for t in tools if t.name == "service_0_search")
        best = float("inf")
        for _ in range(runs):
            start = time.perf_counter()
            for _ in range(calls):
                await tool.ainvoke({"query": "x"})
            best = min(best, time.perf_counter() - start)
        return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=5, help="timed runs")
    parser.add_argument("--calls", type=int, default=50, help="MCP calls per timed run")
    args = parser.parse_args(argv)
    logging.getLogger("mcp").setLevel(logging.WARNING)  # per-request server logs would dominate
    app = server()
    settings = McpServerSettings(command="in-memory")
    with McpSessions({"bench": settings}, connectors={
            "bench": lambda: create_connected_server_and_client_session(app)}).start() as owner:
        plain = first_request_chars(owner, tool_search=False)
        deferred = first_request_chars(owner, tool_search=True)
        print(f"first model request, {TOOLS} MCP tools: {plain:,} chars of prompt and tool "
              f"schemas without tool_search, {deferred:,} with it "
              f"({deferred / plain:.2f}x, {plain - deferred:,} chars saved per call)")
        tool = next(t for t in owner.tools if t.name == "service_0_search")
        bridged = best_of(args.runs, lambda: [tool.invoke({"query": "x"})
                                              for _ in range(args.calls)])
    direct = asyncio.run(direct_calls(app, args.runs, args.calls))
    print(f"one MCP call: {direct / args.calls * 1e3:.3f} ms awaited on the session, "
          f"{bridged / args.calls * 1e3:.3f} ms through the bridged tool "
          f"({bridged / direct:.2f}x; best of {args.runs} x {args.calls} calls)")


if __name__ == "__main__":
    main()
