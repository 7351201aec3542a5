"""The lead agent as LangGraph Server serves it (the graph behind `antler.server:graph`).

What differs from `create_agent` for a local run:

* **Built once.** Plugin discovery, config validation and the chain build do
  blocking I/O (entry points, manifests, YAML). `antler.server` runs them at
  import, which the server does once per process before it serves requests,
  never per request on its event loop.
* **No saver of Antler's own.** The server gives every run its checkpointer
  and store (in memory under `langgraph dev`, Postgres under `langgraph up`),
  so the graph is compiled without one. Thread ownership is the auth
  handler's job there (owner metadata and filters), not the `antler_threads`
  table.
* **Identity from the auth handler.** The graph's context schema is
  `RunContext`, so a run's user id and roles are those of the user the
  server's auth handler authenticated (`runcontext.authenticated`), whatever
  the client puts in `context`; `server: {trust_client_identity: true}` picks
  `TrustingRunContext` instead.
* **Run-end work inside the graph.** Releasing the thread's sandbox and
  queueing the conversation for memory are `after_agent` hooks of the sandbox
  and memory plugins, so they run at the end of every server run as they do
  locally. What outlives runs (sandboxes kept for a thread's next run, memory
  updates still debouncing) is settled when the server process exits
  (`AntlerAgent.close`, registered with `atexit` by `antler.server`).
* **Only messages and resumes as a run's input.** A client may send a
  `Command` as a run's input. One with `resume` continues a paused run; one
  with `update` or `goto` would write the thread's channels directly,
  skipping the input step and with it the input boundary (allowed roles,
  server-owned keys, provenance). The served graph refuses those with an
  `InputError` (`refuse_state_commands`), as `AntlerAgent` does locally.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from antler.chain.config import load_config
from antler.plugin_api.context import DEPLOYMENT, RuntimeOptions
from antler.plugin_api.registry import PluginRegistry, discover

from .agent import AntlerAgent, create_agent, is_resume, model_supports_vision
from .models import ModelCatalog
from .runcontext import RunContext, TrustingRunContext

__all__ = ["CONFIG_ENV", "build_server_agent", "refuse_state_commands"]

CONFIG_ENV = "ANTLER_CONFIG"
"""The environment variable naming the operator config the server builds from."""


def build_server_agent(config_path: str | Path | None = None, *,
                       registry: PluginRegistry | None = None, **options: Any) -> AntlerAgent:
    """The lead agent for LangGraph Server, from `config_path` (default: $ANTLER_CONFIG).

    Without a config every default holds: the embedded scripted model, no API
    key. The `server:` section sets what a local run gets from command-line
    flags (plan mode, subagents, the agent's name) and whether clients may
    state the identity. `options` go to `create_agent` (tests pass models and
    services).
    """
    registry = registry or discover()
    path = config_path if config_path is not None else os.environ.get(CONFIG_ENV) or None
    config = load_config(path, registry)
    settings = config.server
    vision = model_supports_vision(config, ModelCatalog(config.models.named), options.get("model"))
    runtime = RuntimeOptions(
        plan_mode=settings.plan_mode, subagents_enabled=settings.subagents,
        supports_vision=vision, agent_name=settings.agent_name)
    # Plugins that would keep work running between runs in this process (memory's
    # debounce timer) keep it in the shared store instead under a server.
    options["services"] = {**dict(options.get("services") or {}), DEPLOYMENT: "server"}
    agent = create_agent(
        config, registry=registry, runtime=runtime, checkpointer=None,
        context_schema=TrustingRunContext if settings.trust_client_identity else RunContext,
        **options)
    # The server hands each run its own store and refuses a graph that brings one;
    # plugins keep the shared store they took from the services at build time.
    agent.graph = refuse_state_commands(agent.graph.copy(update={"store": None}))
    return agent


def refuse_state_commands(graph: Any) -> Any:
    """`graph`, refusing a `Command` input other than `Command(resume=...)` (an `InputError`).

    Every way of running the graph (`invoke`, `ainvoke`, `astream_events`, the
    server's own streaming) goes through `stream` or `astream`, and copies
    (`graph.copy`, `with_config`) keep the class, so the check holds for them too.
    """
    base: Any = type(graph)
    graph.__class__ = _guarded(base)
    return graph


@functools.cache
def _guarded(base: Any) -> Any:
    def stream(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        is_resume(input)  # raises for a Command that writes or jumps
        return base.stream(self, input, *args, **kwargs)

    def astream(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        is_resume(input)
        return base.astream(self, input, *args, **kwargs)

    return type(base.__name__, (base,), {"stream": stream, "astream": astream,
                                         "__module__": base.__module__})
