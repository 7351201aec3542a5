"""LangGraph Server entry point: `graph` is the lead agent, built at import.

`langgraph.json` names it (`"graphs": {"antler": "antler.server:graph"}`), and
`app`, the middleware Antler adds to the server's HTTP API (`"http": {"app":
"antler.server:app"}`); the server imports this module once per process. The
operator config comes from $ANTLER_CONFIG (all defaults without it). See
`antler.runtime.server` for what differs from a local run, and the README for
deploying with `langgraph dev` and `langgraph up`.
"""

from __future__ import annotations

import atexit

from antler.errors import AntlerError
from antler.runtime.server import CONFIG_ENV, build_server_agent, fail_server_start
from antler.runtime.serverapp import served_app

__all__ = ["CONFIG_ENV", "agent", "app", "graph"]

try:
    agent = build_server_agent()
    # `"http": {"app": "antler.server:app"}`: every request that starts a run or writes a
    # thread checked before the server sees it, a stated identity's takeover refused, another
    # user's thread id answered as a missing thread, a removed thread's files removed
    # (`antler.runtime.serverapp`).
    app = served_app(agent.config.input.allow_roles, agent.services.get("paths"),
                     trust_client_identity=agent.config.server.trust_client_identity)
except AntlerError as error:  # a bad $ANTLER_CONFIG: stop the server, do not serve nothing
    fail_server_start(error)
    raise
graph = agent.graph
# Sandboxes kept between a thread's runs and memory updates still debouncing are
# settled when the server process ends.
atexit.register(agent.close)
