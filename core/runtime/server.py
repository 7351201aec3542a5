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
  server-owned keys, provenance). The served graph refuses those
  (`guard_served_graph`), as `AntlerAgent` does locally.
* **State updates pass the input boundary.** The state API writes a thread's
  channels without a run (``update_state``, ``as_node`` updates, a thread's
  initial supersteps, forks). The served graph checks every such write as it
  checks a run's input (`antler.runtime.stateupdates`) before LangGraph
  applies it, whatever the auth handler allows.
* **A thread's files are where its deletion finds them.** Before each run the
  served graph notes whose directory the run's files go to
  (`antler.runtime.servedfiles`), so deleting the thread removes every
  directory its runs used, whatever identity a trusted client stated. A run
  without a checkpointer (a stateless run, whose thread the server deletes
  when it ends) removes its files when it ends, and a run whose thread was
  deleted while it ran removes what it wrote afterwards.
* **Refusals are the client's errors.** What the served graph refuses is a
  `ClientInputError` (a `ValueError`), which the server answers with 400 and
  Antler's one-line reason instead of hiding it as an internal error.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from antler.chain.conditions import runtime_for
from antler.chain.config import load_config
from antler.contracts.runcontext import (
    AUTH_USER_KEY,
    DEFAULT_USER,
    RunContext,
    TrustingRunContext,
    authenticated,
)
from antler.contracts.serverkeys import server_owned_keys
from antler.errors import ClientInputError, InputError
from antler.plugin_api.context import DEPLOYMENT
from antler.plugin_api.registry import PluginRegistry, discover

from .agent import AntlerAgent, create_agent, is_resume
from .models import ModelCatalog
from .sandbox.threaddir import ThreadDirectoryError
from .servedfiles import ServedThreadFiles
from .stateupdates import StateUpdateBoundary

__all__ = ["CONFIG_ENV", "build_server_agent", "fail_server_start", "guard_served_graph"]

logger = logging.getLogger(__name__)

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
    runtime = runtime_for(
        config, {"plan_mode": settings.plan_mode, "subagents_enabled": settings.subagents,
                 "agent_name": settings.agent_name},
        model=options.get("model"), catalog=ModelCatalog(config.models.named))
    # Plugins that would keep work running between runs in this process (memory's
    # debounce timer) keep it in the shared store instead under a server.
    options["services"] = {**dict(options.get("services") or {}), DEPLOYMENT: "server"}
    agent = create_agent(
        config, registry=registry, runtime=runtime, checkpointer=None,
        context_schema=TrustingRunContext if settings.trust_client_identity else RunContext,
        **options)
    # The server hands each run its own store and refuses a graph that brings one;
    # plugins keep the shared store they took from the services at build time.
    boundary = StateUpdateBoundary(config.input.allow_roles,
                                   server_owned_keys(registry.specs.values()))
    paths = agent.services.get("paths")
    files = ServedThreadFiles(paths) if paths is not None else None
    agent.graph = guard_served_graph(agent.graph.copy(update={"store": None}), boundary, files)
    return agent


def fail_server_start(error: Exception) -> None:
    """Stop a LangGraph Server whose graph cannot be built (a bad $ANTLER_CONFIG).

    The server imports the graph in a worker process; a failed import there is
    logged and the supervisor (`langgraph dev`'s reloader) keeps running, serving
    nothing, so `/ok` never answers. Under LangGraph Server (it sets
    LANGSERVE_GRAPHS) this prints the error in one line, stops the supervisor
    that started the worker, and ends the worker with exit code 3. Anywhere else
    it returns and the caller raises as usual.
    """
    if not os.environ.get("LANGSERVE_GRAPHS"):
        return
    import signal
    import sys

    sys.stderr.write(f"antler: the server cannot start: {error}\n")
    sys.stderr.flush()
    parent = os.getppid()
    try:
        command = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        command = b""
    if b"langgraph" in command:  # the reloader of `langgraph dev`, not an init process
        os.kill(parent, signal.SIGTERM)
    os._exit(3)


def guard_served_graph(graph: Any, boundary: StateUpdateBoundary,
                       files: ServedThreadFiles | None = None) -> Any:
    """`graph`, refusing writes from outside it that skip the input boundary.

    A `Command` input other than `Command(resume=...)` is refused, and every
    state update (`update_state`, `bulk_update_state` and their async forms,
    which LangGraph Server calls) is checked by `boundary`. Refusals are
    `ClientInputError`s. Every way of running the graph goes through `stream`
    or `astream` and every state update through `bulk_update_state` or
    `abulk_update_state`; copies (`graph.copy`, `with_config`) keep the class,
    so the checks hold for them too. With `files`, each run notes whose
    directory it uses before it starts and settles it when it ends
    (`ServedThreadFiles.claim`, `.settle`).
    """
    graph.__class__ = _guarded(type(graph), boundary, files)
    return graph


def _guarded(base: Any, boundary: StateUpdateBoundary, files: ServedThreadFiles | None) -> Any:
    def stream(self: Any, input: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        _refuse_state_commands(input)
        noted = files  # a local, which the checks below narrow
        run = _served_run(self, args, kwargs) if noted is not None else None
        if noted is None or run is None:
            yield from base.stream(self, input, *args, **kwargs)
            return
        _claim(noted, run)
        try:
            yield from base.stream(self, input, *args, **kwargs)
        finally:
            _settle(noted, run, _temporary(self, args, kwargs))

    async def astream(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_state_commands(input)
        noted = files
        run = _served_run(self, args, kwargs) if noted is not None else None
        if noted is None or run is None:
            async for chunk in base.astream(self, input, *args, **kwargs):
                yield chunk
            return
        await asyncio.to_thread(_claim, noted, run)
        try:
            async for chunk in base.astream(self, input, *args, **kwargs):
                yield chunk
        finally:
            await asyncio.to_thread(_settle, noted, run, _temporary(self, args, kwargs))

    def bulk_update_state(self: Any, config: Any, supersteps: Any) -> Any:
        def history() -> set[str]:
            return _message_ids(self.get_state(config).values)
        return base.bulk_update_state(self, config, _checked(boundary, supersteps, history))

    async def abulk_update_state(self: Any, config: Any, supersteps: Any) -> Any:
        # The check is synchronous: the history it may need is read first.
        values = (await self.aget_state(config)).values
        checked = _checked(boundary, supersteps, lambda: _message_ids(values))
        return await base.abulk_update_state(self, config, checked)

    return type(base.__name__, (base,), {
        "stream": stream, "astream": astream, "bulk_update_state": bulk_update_state,
        "abulk_update_state": abulk_update_state, "__module__": base.__module__})


_ServedRun = tuple[str, str, str]
"""(thread id, the user id whose directory the run uses, the authenticated user id)."""


def _served_run(graph: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _ServedRun | None:
    """Whose thread directory a run of `graph` with these arguments uses, as the graph's
    context resolution decides it (`runcontext.run_context`); None without a thread id."""
    configurable = _configurable(graph, args, kwargs)
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        return None
    context = kwargs.get("context")
    stated = context.get("user_id") if isinstance(context, Mapping) \
        else getattr(context, "user_id", None)
    stated_id = str(stated) if stated is not None else DEFAULT_USER
    if AUTH_USER_KEY not in configurable:  # not LangGraph Server's run: the caller's context
        return str(thread_id), stated_id, stated_id
    authenticated_id = authenticated(RunContext(), configurable).user_id
    schema = getattr(graph, "context_schema", None)
    trusting = bool(getattr(schema, "trust_client_identity", False))
    return str(thread_id), stated_id if trusting else authenticated_id, authenticated_id


def _configurable(graph: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    config = kwargs.get("config", args[0] if args else None)
    bound = (getattr(graph, "config", None) or {}).get("configurable") or {}
    given = (config or {}).get("configurable") or {} if isinstance(config, Mapping) else {}
    return {**bound, **given}


def _temporary(graph: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the run keeps no thread: no checkpointer (LangGraph Server's stateless runs,
    whose thread it deletes when the run ends)."""
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER

    return getattr(graph, "checkpointer", None) is None \
        and _configurable(graph, args, kwargs).get(CONFIG_KEY_CHECKPOINTER) is None


def _claim(files: ServedThreadFiles, run: _ServedRun) -> None:
    try:
        files.claim(*run)
    except InputError as error:
        raise ClientInputError(str(error)) from None


def _settle(files: ServedThreadFiles, run: _ServedRun, temporary: bool) -> None:
    thread_id, user_id, authenticated_id = run
    try:
        files.settle(thread_id, user_id, authenticated_id, temporary=temporary)
    except (ThreadDirectoryError, OSError) as error:
        logger.error("thread %s: its files could not be removed after its run: %s",
                     thread_id, error)


def _refuse_state_commands(input: Any) -> None:
    try:
        is_resume(input)  # raises for a Command that writes or jumps
    except InputError as error:
        raise ClientInputError(str(error)) from None


def _checked(boundary: StateUpdateBoundary, supersteps: Any, history: Any) -> Any:
    try:
        return boundary.check(supersteps, history)
    except InputError as error:
        raise ClientInputError(str(error)) from None


def _message_ids(values: Any) -> set[str]:
    messages = values.get("messages") if isinstance(values, dict) else None
    return {m.id for m in messages or () if getattr(m, "id", None)}

