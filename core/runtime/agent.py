"""Building a runnable agent from a plugin chain: `create_agent` (`antler.agent.create_agent`).

This is the one place where the pieces meet: the operator config, the
resolved chain, the embedded default services (thread paths, a sandbox
provider, a chat model) and LangChain's `create_agent`. Everything a plugin
needs arrives through the build context's services, so two agents in one
process never share state by accident.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antler.chain import BuiltChain, build_chain, prompt_sections, select_tools
from antler.chain.config import OperatorConfig
from antler.chain.hooklimits import hook_limits
from antler.chain.policy import error_policy
from antler.compat import CONFIG_KEY_DURABILITY
from antler.compiler import (
    FusionPlan,
    aexpand_fused_updates,
    asking_for_hook_events,
    create_fused_agent,
    expand_fused_updates,
    stream_modes_for,
    wants_expansion,
)
from antler.compiler.leanchannels import lean_channels
from antler.compiler.lonecalls import inline_lone_calls
from antler.compiler.quietnodes import quiet_nodes
from antler.compiler.runscope import scope_runs
from antler.contracts.deferred import DEFERRED_TOOLS, PROMOTED_KEY, DeferredTools
from antler.contracts.mcp import mcp_routing_of
from antler.contracts.runcontext import RunContext
from antler.errors import ConfigError, InputError, ModelCallBudgetError
from antler.plugin_api.context import (
    MEMORY_MODEL,
    MEMORY_QUEUE,
    MODEL,
    MODEL_CATALOG,
    PATHS,
    SKILLS,
    STORE,
    TITLE_MODEL,
    RuntimeOptions,
    Services,
)
from antler.plugin_api.paths import PathLayout, resolve_base, validate_id
from antler.plugin_api.registry import PluginRegistry, discover
from antler.plugin_api.toolargs import with_resolved_signatures, without_runtime_dump
from antler.plugin_api.uploads import upload_names

from . import astguard
from .configtools import load_config_tools
from .deferred import defer_tools
from .delegation import TASK_TOOL, make_task_tool
from .inputs import (
    check_input,
    check_input_keys,
    input_step_in_run_context,
    record_arrivals,
    record_message_writes,
)
from .isolation import isolate
from .mcp import mcp_tools
from .quiettools import quiet_tools
from .skills import SkillsRegistry
from .storage import CHECKPOINT_FILENAME as CHECKPOINT_FILENAME
from .storage import (
    Storage,
    StorageError,
    delta_channel_names,
    open_storage,
    use_delta_channels,
)
from .toolguard import guard_tools
from .tracing import Tracer, instrument

DEFAULT_DURABILITY = "sync"
"""LangGraph's checkpoint durability for Antler agents: each step's checkpoint is
written before the next step starts, so a tool result is saved before the model
sees it and a failed write stops the run before another tool runs."""
TOOLS_NODE = "tools"  # LangChain's tools node; the chain compiler keeps its name
_DURABILITY_KEY = CONFIG_KEY_DURABILITY  # LangGraph's configurable key for a graph default

InterruptedCalls = Callable[[list[dict[str, Any]]], None]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful agent. Files live under /mnt/user-data: uploads/ holds what the user "
    "uploaded, workspace/ is your scratch space and outputs/ is for deliverables."
)


@dataclass
class AntlerAgent:
    """A compiled agent graph plus the chain, services and config that made it."""

    graph: Any
    chain: BuiltChain
    services: Services
    config: OperatorConfig
    checkpointer: Any = None
    base_dir: Path | None = None
    fusion: FusionPlan | None = None
    storage: Storage | None = None
    recorder: Any = None
    """The `antler.replay` recorder of this agent's runs (None: recording is off)."""
    max_model_calls: int = 50
    """The model calls one run may make (`agent.max_model_calls`)."""
    recursion_limit: int = 100
    """LangGraph's step limit for one run: `max_model_calls` in this graph's steps."""
    _closers: list[Any] = field(default_factory=list)

    def context(self, thread_id: str, user_id: str = "default", **identity: Any) -> RunContext:
        return RunContext(thread_id=thread_id, user_id=user_id,
                          run_id=identity.pop("run_id", None) or uuid.uuid4().hex, **identity)

    def run_config(self, thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id},
                "recursion_limit": self.recursion_limit}

    def explain(self, error: BaseException) -> BaseException:
        """`error`, or for LangGraph's step limit the `ModelCallBudgetError` it means."""
        from langgraph.errors import GraphRecursionError

        if not isinstance(error, GraphRecursionError):
            return error
        calls = self.max_model_calls
        return ModelCallBudgetError(
            f"the run stopped at its budget of {calls} model call{'s' * (calls != 1)} "
            f"(agent.max_model_calls: {calls}); what it saved so far stays in the thread. "
            "Raise agent.max_model_calls in the config to let a run make more model calls.",
            calls)

    @contextlib.contextmanager
    def _budget(self) -> Iterator[None]:
        """Raise the step limit of a run as the model-call budget it stands for."""
        try:
            yield
        except Exception as error:
            explained = self.explain(error)
            if explained is error:
                raise
            raise explained from error

    def invoke(self, message: Any, *, thread_id: str, user_id: str = "default",
               files: Sequence[dict[str, Any]] = (), wait: bool = False,
               on_interrupted: InterruptedCalls | None = None,
               **identity: Any) -> dict[str, Any]:
        """Run one turn to completion and return the final state.

        The thread is held for the run (see `hold`): another user's thread is
        refused, a busy one raises `ThreadBusyError` unless `wait`.
        """
        payload = self._payload(message, files)
        with self._hold(thread_id, user_id, wait, on_interrupted) as history, \
                self._budget():
            payload = self._fresh(payload, thread_id, history)
            return dict(self.graph.invoke(payload, **self._run(thread_id, user_id, identity)))

    def stream(self, message: Any, *, thread_id: str, user_id: str = "default",
               files: Sequence[dict[str, Any]] = (), stream_mode: Any = "updates",
               wait: bool = False, on_interrupted: InterruptedCalls | None = None,
               **identity: Any) -> Iterator[Any]:
        """Stream one turn; a fused node's `updates` come out as one chunk per plugin hook.

        The thread is held (see `hold`) from the first chunk asked for until the
        stream ends or is closed.
        """
        payload = self._payload(message, files)
        expand = wants_expansion(self.fusion, stream_mode)
        with self._hold(thread_id, user_id, wait, on_interrupted) as history, \
                self._budget():
            payload = self._fresh(payload, thread_id, history)
            chunks = self.graph.stream(
                payload, **self._run(thread_id, user_id, identity, expand=expand),
                stream_mode=stream_modes_for(stream_mode) if expand else stream_mode)
            if expand and self.fusion is not None:
                chunks = expand_fused_updates(chunks, self.fusion, stream_mode)
            yield from chunks

    async def ainvoke(self, message: Any, *, thread_id: str, user_id: str = "default",
                      files: Sequence[dict[str, Any]] = (), wait: bool = False,
                      on_interrupted: InterruptedCalls | None = None,
                      **identity: Any) -> dict[str, Any]:
        """`invoke` for an event loop: the same run, with no blocking call on the loop.

        Holding the thread (file lock, owner record) happens in a worker thread
        and the thread's history is read with `aget_state`; the graph runs with
        `graph.ainvoke`, so each plugin's async hooks run.
        """
        graph = self.async_graph()
        payload = self._payload(message, files)
        async with self._ahold(thread_id, user_id, wait, on_interrupted) as history:
            payload = await self._afresh(payload, thread_id, history)
            with self._budget():
                return dict(await graph.ainvoke(payload,
                                                **self._run(thread_id, user_id, identity)))

    async def astream(self, message: Any, *, thread_id: str, user_id: str = "default",
                      files: Sequence[dict[str, Any]] = (), stream_mode: Any = "updates",
                      wait: bool = False, on_interrupted: InterruptedCalls | None = None,
                      **identity: Any) -> AsyncIterator[Any]:
        """`stream` for an event loop; chunks have the same shape as `stream`'s."""
        graph = self.async_graph()
        payload = self._payload(message, files)
        expand = wants_expansion(self.fusion, stream_mode)
        async with self._ahold(thread_id, user_id, wait, on_interrupted) as history:
            payload = await self._afresh(payload, thread_id, history)
            with self._budget():
                chunks = graph.astream(
                    payload, **self._run(thread_id, user_id, identity, expand=expand),
                    stream_mode=stream_modes_for(stream_mode) if expand else stream_mode)
                if expand and self.fusion is not None:
                    chunks = aexpand_fused_updates(chunks, self.fusion, stream_mode)
                async for chunk in chunks:
                    yield chunk

    def async_graph(self) -> Any:
        """The graph async runs use: `graph`, when its saver has async methods.

        LangGraph's `SqliteSaver` is synchronous only (its async methods raise
        `NotImplementedError`): such an agent refuses async runs up front with
        what to use instead, rather than failing at the first checkpoint.
        """
        saver = self.checkpointer
        if saver is not None and saver is not False and _sync_only(saver):
            raise StorageError(
                f"the {type(saver).__name__} checkpointer works only with invoke() and "
                "stream(). For ainvoke()/astream() build the agent with "
                "checkpointer='memory' (or `storage.checkpointer: memory`) or a saver with "
                "async methods, or run it synchronously.",
                self.storage.path if self.storage else None)
        return self.graph

    @contextlib.asynccontextmanager
    async def ahold(self, thread_id: str, user_id: str = "default", *, wait: bool = False,
                    on_interrupted: InterruptedCalls | None = None) -> AsyncIterator[None]:
        """`hold` for an event loop: the lock and owner record are taken in a worker thread,
        and a busy thread is waited for on the loop (`Storage.arun`).

        A caller cancelled while waiting for a busy thread (`wait=True`) leaves
        the thread free: a lock a try took meanwhile is given back as soon as
        the worker gets it.
        """
        async with self._ahold(thread_id, user_id, wait, on_interrupted):
            yield

    @contextlib.contextmanager
    def hold(self, thread_id: str, user_id: str = "default", *, wait: bool = False,
             on_interrupted: InterruptedCalls | None = None) -> Iterator[None]:
        """Own and lock `thread_id` for one run of `user_id`, and settle its last run.

        Before any graph step: the ids are checked, another user's thread is
        refused (`ThreadOwnershipError`), a thread another run holds raises
        `ThreadBusyError` (or is waited for), and a thread whose last run
        stopped mid-step keeps the tool results that run saved. Tool calls
        that started without a saved result are passed to `on_interrupted`
        (the model request marks them interrupted too). Database failures
        inside the block are raised as `StorageError`.
        """
        with self._hold(thread_id, user_id, wait, on_interrupted):
            yield

    @contextlib.contextmanager
    def _hold(self, thread_id: str, user_id: str, wait: bool,
              on_interrupted: InterruptedCalls | None) -> Iterator[set[str] | None]:
        """`hold`, giving the ids of the thread's messages, read once with the settling
        (None: the agent keeps no storage, so nothing was read)."""
        storage = self._held_storage(thread_id, user_id)
        if storage is None:
            yield None
            return
        with storage.run(thread_id, user_id, wait=wait), storage.errors():
            interrupted, history = self._settle(thread_id)
            if interrupted and on_interrupted is not None:
                on_interrupted(interrupted)
            yield history

    @contextlib.asynccontextmanager
    async def _ahold(self, thread_id: str, user_id: str, wait: bool,
                     on_interrupted: InterruptedCalls | None) -> AsyncIterator[set[str] | None]:
        """`_hold` for an event loop (see `ahold`)."""
        storage = self._held_storage(thread_id, user_id)
        if storage is None:
            yield None
            return
        async with storage.arun(thread_id, user_id, wait=wait):
            with storage.errors():
                interrupted, history = await self._asettle(self.async_graph(), thread_id)
                if interrupted and on_interrupted is not None:
                    on_interrupted(interrupted)
                yield history

    def _run(self, thread_id: str, user_id: str, identity: dict[str, Any], *,
             expand: bool = False) -> dict[str, Any]:
        """The graph's `config` and `context` for one run.

        With `expand`, the config asks the fused nodes for their hook events,
        which `expand_fused_updates` turns into per-hook `updates`.
        """
        config = self.run_config(thread_id)
        if expand and self.fusion is not None:
            config = asking_for_hook_events(config, self.fusion)
        if self.recorder is not None:  # the recording says whose run it replays
            config["metadata"] = {"antler_identity": {
                "user_id": user_id, "roles": list(identity.get("roles") or ())}}
        return {"config": config, "context": self.context(thread_id, user_id, **identity)}

    def _held_storage(self, thread_id: str, user_id: str) -> Storage | None:
        """The ids checked; the storage a run must hold the thread in, None without one."""
        validate_id("thread id", thread_id)
        validate_id("user id", user_id)
        storage = self.storage
        if storage is None or storage.saver is None or storage.saver is False:
            return None
        return storage

    def _settle(self, thread_id: str) -> tuple[list[dict[str, Any]], set[str]]:
        """Keep the results a stopped run saved: (the calls left without one, the ids of
        the thread's messages).

        A run that stopped mid-step (a crash, `kill -9`, Ctrl-C) leaves the
        tool results it saved as pending writes of its last checkpoint. A new
        input would start from that checkpoint and drop them, so the operator
        would see a result the model never gets; they are committed here, as
        the tools node would have. Calls with no saved result are not run
        again: they did start, and running a command twice is worse than
        saying it was interrupted. The checkpoint is read once per run: the
        message ids of the same read are what the input's ids are checked
        against (`_fresh`).
        """
        config = self.run_config(thread_id)
        snapshot = self.graph.get_state(config)
        saved, interrupted = _unsettled(snapshot)
        if saved:
            self.graph.bulk_update_state(config, saved)
        return interrupted, _message_ids(snapshot.values)

    async def _asettle(self, graph: Any, thread_id: str,
                       ) -> tuple[list[dict[str, Any]], set[str]]:
        """`_settle` on the async graph."""
        config = self.run_config(thread_id)
        snapshot = await graph.aget_state(config)
        saved, interrupted = _unsettled(snapshot)
        if saved:
            await graph.abulk_update_state(config, saved)
        return interrupted, _message_ids(snapshot.values)

    def _payload(self, message: Any, files: Sequence[dict[str, Any]]) -> Any:
        """The graph input of a run, checked as `input` checks it but for the ids the
        thread's history already has (`_fresh` gives those fresh ones once the thread is
        held); a `Command(resume=...)` as it is."""
        return message if is_resume(message) else self.input(message, files)

    def _fresh(self, payload: Any, thread_id: str, history: set[str] | None) -> Any:
        """`payload` with a fresh id for each message whose id the thread's history has.

        `history` is the ids `_hold` read; None (no storage held) reads them here.
        Only an input message that carries an id needs the history at all.
        """
        if not _carries_ids(payload):
            return payload
        if history is None:
            history = self._history_ids(thread_id)
        return _with_fresh_ids(payload, history)

    async def _afresh(self, payload: Any, thread_id: str, history: set[str] | None) -> Any:
        """`_fresh` for an event loop: a history to read is read in a worker thread."""
        if history is None and _carries_ids(payload):
            history = await asyncio.to_thread(self._history_ids, thread_id)
        return self._fresh(payload, thread_id, history)

    def input(self, message: Any, files: Sequence[dict[str, Any]] = (), *,
              thread_id: str | None = None) -> dict[str, Any]:
        """The graph input for `message`, checked as a caller's input.

        Raised here, before the graph runs, so nothing is saved to the thread:
        an `InputError` for a message whose role the operator's `input:
        {allow_roles}` does not allow (human only by default) or for a state
        key besides ``messages`` (server-owned state), an `UploadError`
        for a refused upload name (found by the uploads plugin, it would fail
        the run after the message was saved). A message whose id the history
        of `thread_id` already has gets a fresh id, so input never replaces a
        message of the thread.
        """
        from langchain_core.messages import HumanMessage

        if isinstance(message, dict) and "messages" in message:
            check_input_keys(message)
            payload = dict(message)
        else:
            if isinstance(message, str):
                kwargs = {"files": list(files)} if files else {}
                message = HumanMessage(content=message, additional_kwargs=kwargs)
            payload = {"messages": [message]}
        messages = payload["messages"]
        payload["messages"] = check_input(
            messages if isinstance(messages, list) else [messages],
            self.config.input.allow_roles, lambda: self._history_ids(thread_id))
        for item in payload["messages"]:
            if isinstance(item, HumanMessage):
                upload_names(item.additional_kwargs.get("files"))
        return payload

    def _history_ids(self, thread_id: str | None) -> set[str]:
        if thread_id is None or self.checkpointer in (None, False):
            return set()
        return _message_ids(self.state(thread_id))

    def state(self, thread_id: str, user_id: str | None = None) -> dict[str, Any]:
        """The thread's saved state; with `user_id`, only if that user owns the thread."""
        if self.storage is None:
            return dict(self.graph.get_state(self.run_config(thread_id)).values)
        if user_id is not None:
            self.storage.check_owner(thread_id, user_id)
        with self.storage.errors():
            return dict(self.graph.get_state(self.run_config(thread_id)).values)

    def close(self) -> None:
        """Release what the agent holds: sandboxes, database connections, MCP sessions."""
        for closer in reversed(self._closers):
            closer()
        self._closers.clear()

    async def aclose(self) -> None:
        """`close` for an event loop: shutting sandboxes down and flushing memory block."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> AntlerAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AntlerAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _unsettled(snapshot: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    """(the saved tool results to commit, the calls without one) of a thread's last run."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.types import StateUpdate

    if not snapshot.next or snapshot.interrupts:
        return [], []
    saved = [task.result for task in snapshot.tasks
             if task.name == TOOLS_NODE and task.result and task.error is None]
    updates = [[StateUpdate(values, as_node=TOOLS_NODE) for values in saved]] if saved else []
    messages = snapshot.values.get("messages") or []
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    last_ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    calls = list(getattr(last_ai, "tool_calls", None) or [])
    return updates, [call for call in calls if call.get("id") not in answered]


def _message_ids(values: dict[str, Any]) -> set[str]:
    """The ids of the messages of a thread's saved `values`."""
    return {m.id for m in values.get("messages") or () if getattr(m, "id", None)}


def _carries_ids(payload: Any) -> bool:
    """Whether the graph input `payload` (as `input` returns it) has a message with an id."""
    return isinstance(payload, dict) and any(
        getattr(m, "id", None) for m in payload.get("messages") or ())


def _with_fresh_ids(payload: dict[str, Any], history: set[str]) -> dict[str, Any]:
    """`payload` with a fresh id for each message whose id `history` has.

    `input` already gave the later of two input messages of one id a fresh
    one, so the ids stay distinct.
    """
    messages = payload["messages"]
    if not any(m.id in history for m in messages if m.id):
        return payload
    return {**payload, "messages": [
        m.model_copy(update={"id": str(uuid.uuid4())}) if m.id and m.id in history else m
        for m in messages]}


def _sync_only(saver: Any) -> bool:
    """Whether `saver` is a checkpointer whose async methods do not work."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    return isinstance(saver, SqliteSaver)


def is_resume(message: Any) -> bool:
    """Whether `message` is a LangGraph `Command(resume=...)`, which continues a paused run
    and goes to the graph as it is. Any other `Command` (one that would write channels or
    jump) is refused: it would bypass the input checks."""
    from langgraph.types import Command

    if not isinstance(message, Command):
        return False
    if message.resume is None or message.update is not None or message.goto or message.graph:
        raise InputError("only Command(resume=...) may be sent as input, to continue a paused "
                         "run; a Command that updates state or jumps would bypass the input "
                         "checks")
    return True


def compose_system_prompt(base: str | None, sections: Sequence[str]) -> str | None:
    """The base prompt followed by the plugins' sections, a blank line between each."""
    parts = [part for part in (base, *sections) if part]
    return "\n\n".join(parts) if parts else None


FROM_CONFIG = "config"
"""`create_agent`'s default checkpointer: whatever `storage.checkpointer` says."""


def open_checkpointer(kind: Any, base_dir: Path) -> tuple[Any, Any]:
    """(saver, closer) for 'sqlite' (the default), 'memory', None/'none', False, or a saver.

    The saver alone; `antler.runtime.storage.open_storage` gives it with its
    owner records and run locks, as `create_agent` uses it.
    """
    storage = open_storage(kind, base_dir, store=None)
    return storage.saver, storage.close


def create_agent(
    config: OperatorConfig | None = None,
    *,
    chain: str = "lead",
    model: Any = None,
    tools: Sequence[Any] = (),
    checkpointer: Any = FROM_CONFIG,
    runtime: RuntimeOptions | None = None,
    services: Services | dict[str, Any] | None = None,
    registry: PluginRegistry | None = None,
    custom_middlewares: Sequence[Any] = (),
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    base_dir: str | Path | None = None,
    subagent_model: Any = None,
    tracer: Tracer | None = None,
    fuse: bool | None = None,
    fuse_into_model: bool | None = None,
    durability: str = DEFAULT_DURABILITY,
    context_schema: type[RunContext] = RunContext,
    record: Any = None,
) -> AntlerAgent:
    """Build `chain` from the installed plugins and compile it into an agent graph.

    `model` is a chat model or an `init_chat_model` string; None means the
    config's `models.default` (the embedded scripted model unless configured).
    `checkpointer` is 'sqlite' (a file under the base directory, so a thread
    resumes across processes), 'memory', None, False, or any LangGraph saver;
    by default the config's `storage.checkpointer` ('sqlite' unless configured).
    `base_dir` defaults to `storage.base_dir`, then $ANTLER_HOME, then ./.antler;
    `runtime` defaults to the config's model capabilities (`models.supports_vision`).

    When `runtime.subagents_enabled`, the lead gets the `task` tool, whose
    subagent is built from the subagent chain of the same plugins, config and
    services (model: `subagent_model`, else the lead's). A `tracer` records
    every hook invocation (see `antler.runtime.tracing`). Each plugin's hooks run
    under its error policy, `on_error` (see `antler.runtime.isolation`).
    `fuse` (None: the config's `chain.fuse`) runs consecutive node hooks of
    one kind in one graph node, and `fuse_into_model` (None:
    `chain.fuse_into_model`) runs the
    `before_model`/`after_model` hooks inside the model node (see
    `antler.compiler`). `durability` is LangGraph's checkpoint durability
    ('sync', the default: each step is saved before the next one runs;
    'async' or 'exit' trade that for speed). With `storage.messages_channel:
    delta` and a saver, `messages` and the channels middlewares name in
    `antler_delta_channels` are checkpointed as deltas (see
    `antler.runtime.storage.deltas`). `context_schema` is `RunContext` or a subclass
    (`antler.server` passes `TrustingRunContext` when the operator trusts the
    server's clients with the identity). `record` (None: the config's `record:`
    section, off by default; False; True; a file path; a mapping or
    `RecordSettings`) records every run of the agent (see `antler.replay`).
    """
    astguard.install()
    registry = registry or discover()
    config = _operator_config(config)
    base = resolve_base(base_dir or config.storage.base_dir)
    if checkpointer == FROM_CONFIG:
        checkpointer = config.storage.checkpointer
    if not isinstance(services, Services):
        services = Services(dict(services or {}))
    provided_queue = services.items.get(MEMORY_QUEUE)
    models = _models(config, services, base, model, subagent_model, runtime, record)
    _default_services(config, services, base)
    storage, mcp_loaded, close_mcp = _open_backends(config, services, checkpointer, base)
    with _closing_on_error(storage.close), _closing_on_error(close_mcp):
        built = build_chain(config, chain, _deferred_setup(models.runtime, services, mcp_loaded),
                            services, registry=registry, custom_middlewares=custom_middlewares)

        def build_subagent() -> AntlerAgent:
            # Same services (paths, sandbox provider, memory queue) but its own model, so
            # plugins that read services[MODEL] (summarization) measure the right one.
            sub_model = models.subagent or models.chat
            return create_agent(
                config, chain="subagent", model=sub_model, tools=tools,
                # A delegated task is one tool call of the lead: its inner steps are not
                # persisted (nor written into the lead thread's checkpoints).
                checkpointer=False, record=False,  # the lead's recorder sees its calls
                runtime=built.plan.runtime.model_copy(update={"subagents_enabled": False}),
                services=Services({**services.items, MODEL: sub_model}), registry=registry,
                system_prompt=system_prompt, base_dir=base,
                tracer=tracer.child("subagent") if tracer else None,
                fuse=fuse, fuse_into_model=fuse_into_model)

        agent_tools = _agent_tools(config, built, chain, tools, mcp_loaded, services,
                                   build_subagent)
        graph, fusion, limit = _compile_graph(
            config, built, models.chat, agent_tools, storage.saver, tracer=tracer,
            system_prompt=system_prompt, context_schema=context_schema,
            store=services.items.get(STORE), durability=durability,
            fuse=config.chain.fuse if fuse is None else fuse,
            into_model=config.chain.fuse_into_model if fuse_into_model is None
            else fuse_into_model)
        if models.recorder is not None:
            from antler.replay.attach import attach_graph

            graph = attach_graph(graph, models.recorder, built.names)
    agent = AntlerAgent(graph, built, services, config, storage.saver, base, fusion=fusion,
                        storage=storage, recorder=models.recorder,
                        max_model_calls=config.agent.max_model_calls, recursion_limit=limit)
    agent._closers.extend(_closers(services, storage, close_mcp, provided_queue))
    return agent


@dataclass
class _Models:
    """The chat models one build uses, resolved, and the recorder that watches them."""

    chat: Any
    subagent: Any
    """The subagents' model (None: the chat model)."""
    runtime: RuntimeOptions
    recorder: Any
    """The `antler.replay` recorder of the agent's runs (None: recording is off)."""


def _models(config: OperatorConfig, services: Services, base: Path, model: Any,
            subagent_model: Any, runtime: RuntimeOptions | None, record: Any) -> _Models:
    """Resolve the build's models through the model catalog (`models.named`) and open
    the recorder `record` asks for.

    The chat model is `model`, else `models.default`; the title and memory
    model references become services for the plugins that resolve them. The
    recorder (`record`, else the config's `record:` section) watches the chat
    and subagent models; the chat model it hands back is the `model` service.
    The runtime options default to the config's model capabilities. A
    provided service is used as it is.
    """
    from antler.chain.conditions import runtime_for

    from .models import ModelCatalog

    models = config.models
    catalog = services.items.setdefault(MODEL_CATALOG, ModelCatalog(models.named))
    if runtime is None:
        runtime = runtime_for(config, model=model, catalog=catalog)
    if model is None:
        model = models.default
    if subagent_model is None and models.subagent:
        subagent_model = catalog.resolve(models.subagent)
    chat_model = catalog.resolve(model) if not hasattr(model, "invoke") else model
    for service, reference in ((TITLE_MODEL, models.title), (MEMORY_MODEL, models.memory)):
        if reference is not None and services.items.get(service) is None:
            services.items[service] = reference  # resolved by the plugin that uses it
    recorder = None
    # The recorder's modules load only when a run is recorded (None: as the config's
    # `record:` section says; False: never).
    if record is not False and (record is not None or config.record.enabled):
        from antler.replay.attach import open_recorder

        recorder = open_recorder(record, config, base, model, runtime, services)
    if recorder is not None:
        chat_model = recorder.watch(chat_model)
        subagent_model = recorder.watch(subagent_model) if subagent_model is not None \
            else None
    services.items.setdefault(MODEL, chat_model)
    return _Models(chat_model, subagent_model, runtime, recorder)


def _default_services(config: OperatorConfig, services: Services, base: Path) -> None:
    """The skills registry (`skills:`) and the thread path layout under `base`, unless
    the caller provided them."""
    if SKILLS not in services.items:
        services.items[SKILLS] = SkillsRegistry.from_settings(config.skills)
    skill_roots = tuple(getattr(services.items[SKILLS], "roots", ()))
    services.items.setdefault(PATHS, PathLayout(base, skill_roots=skill_roots))


def _open_backends(config: OperatorConfig, services: Services, checkpointer: Any,
                   base: Path) -> tuple[Storage, list[Any], Callable[[], None] | None]:
    """Open the storage (checkpointer, owners, locks, shared store) and the MCP sessions:
    (storage, the MCP tools, the closer of the sessions).

    The storage opens before the chain is built: plugins take the shared store
    (`services[STORE]`) at build time. A provided store is used as it is. When
    the MCP servers fail to start, the storage is closed again.
    """
    storage = open_storage(checkpointer, base, pool=config.storage.pool,
                           store=None if STORE in services.items else config.storage.store)
    if storage.store is not None:
        services.items[STORE] = storage.store
    with _closing_on_error(storage.close):
        mcp_loaded, close_mcp = mcp_tools(config, services)
    return storage, list(mcp_loaded), close_mcp


def _operator_config(config: Any) -> OperatorConfig:
    """`create_agent`'s `config`: an `OperatorConfig`, or None for the defaults; anything
    else (a path, YAML text, a mapping) is refused with how to load it."""
    if config is None:
        return OperatorConfig()
    if isinstance(config, OperatorConfig):
        return config
    raise ConfigError(
        f"create_agent's config is {type(config).__name__} {config!r:.60}, not an "
        "OperatorConfig; load a file or a mapping first with "
        "`antler.chain.config.load_config(path, registry)` (YAML text: `parse_config(text, "
        "registry)`), or pass None for the defaults")


def _agent_tools(config: OperatorConfig, built: BuiltChain, chain: str, tools: Sequence[Any],
                 mcp_loaded: Sequence[Any], services: Services,
                 build_subagent: Callable[[], AntlerAgent]) -> list[Any]:
    """The tools the agent's model is offered: the caller's, the config's (`tools:`), the
    MCP servers' whose names are free, the `task` tool and the plugins', selected by the
    chain, the MCP ones deferred behind tool_search when the chain defers. Each one's
    injected `ToolRuntime` is kept out of its input's dump (`without_runtime_dump`); the
    caller's, the config's and the MCP servers' are called quietly when nothing observes
    the call (`quiet_tools`).

    A `task` tool passed by the caller replaces the built-in one: with both, the
    model would be offered two tools of one name and the tools node keep the last.
    """
    given = [*tools, *load_config_tools(config.tools, chain)]
    extra_tools = quiet_tools([*given, *_unclaimed(mcp_loaded, [*given, *built.tools])])
    caller_task = any(getattr(t, "name", None) == TASK_TOOL for t in tools)
    if chain == "lead" and built.plan.runtime.subagents_enabled and not caller_task:
        extra_tools.append(make_task_tool(build_subagent))
    plugin_tools = _guarded_plugin_tools(config, built)
    selected = [without_runtime_dump(tool)
                for tool in select_tools(built, [*extra_tools, *plugin_tools])]
    return with_resolved_signatures(_defer(built, selected, services.items[DEFERRED_TOOLS]))


def _guarded_plugin_tools(config: OperatorConfig, built: BuiltChain) -> list[Any]:
    """The plugins' `antler_tools` tools, each writing only the state keys its entry
    point's plugins may write, under the first one's error policy (`antler.runtime.toolguard`).
    """
    entries = {entry.name: entry for entry in built.entries}
    guarded = list(built.tools)
    groups: dict[tuple[str, ...], list[int]] = {}
    for index, plugins in enumerate(built.tool_sources):
        groups.setdefault(plugins, []).append(index)
    for plugins, indices in groups.items():
        claims = [entries[name].state for name in plugins]
        if not plugins or any(state is None for state in claims):
            continue
        first = entries[plugins[0]]
        writable = frozenset().union(*(state.writable for state in claims if state is not None))
        tools = guard_tools([built.tools[index] for index in indices], first.name,
                            error_policy(first.spec, config.plugin_settings), writable,
                            built.state_owners)
        for index, tool in zip(indices, tools, strict=True):
            guarded[index] = tool
    return guarded


def _compile_graph(config: OperatorConfig, built: BuiltChain, chat_model: Any,
                   agent_tools: list[Any], saver: Any, *, tracer: Tracer | None,
                   system_prompt: str | None, context_schema: type[RunContext], store: Any,
                   durability: str, fuse: bool, into_model: bool,
                   ) -> tuple[Any, FusionPlan | None, int]:
    """The agent graph of the built chain: (graph, the fusion plan when `fuse`, its step
    limit).

    `system_prompt` is the base prompt, followed here by the plugins' sections.
    Each middleware runs under its error policy and, with a `tracer`, is
    recorded (isolation inside tracing: a skipped failure shows in the
    timeline as skipped). With `fuse` the chain compiler builds the graph,
    else LangChain's `create_agent`; either way the input step records what
    each run receives, its reducer channels copy without working their type out
    again (`lean_channels`), its tools node runs a lone tool call in its own thread
    (`inline_lone_calls`), its nodes skip LangChain's callback run when nothing
    could observe it (`quiet_nodes`), each run has a `RunScope` whose end is seen
    however the run ends (`scope_runs`), and with `storage.messages_channel: delta`
    and a saver the growing channels are checkpointed as deltas. The graph's defaults are
    the step limit of `agent.max_model_calls` and, with a saver, `durability`.
    """
    from langchain.agents import create_agent as langchain_create_agent

    middlewares = isolate(built.middlewares, [error_policy(entry.spec, config.plugin_settings)
                                              for entry in built.entries], built.names,
                          [entry.state.writable if entry.state else None
                           for entry in built.entries], built.state_owners,
                          [hook_limits(entry.spec, config) for entry in built.entries])
    if tracer is not None:
        middlewares = instrument(middlewares, tracer, built.names)
    agent_kwargs: dict[str, Any] = {
        "model": chat_model, "tools": agent_tools,
        # After the tools' deferral (`_agent_tools`): the deferred tools' section lists
        # the catalog.
        "system_prompt": compose_system_prompt(system_prompt, prompt_sections(built)),
        "context_schema": context_schema, "checkpointer": saver, "store": store,
    }
    fusion = None
    if fuse:
        graph, fusion = create_fused_agent(
            middlewares, labels=built.names,
            unfusable={entry.name for entry in built.entries if not entry.spec.fusable},
            into_model=into_model,
            # Before the before_agent hooks move into the input step, so that they
            # read there what the step records.
            prepare_input=_record_writes, **agent_kwargs)
    else:
        graph = langchain_create_agent(middleware=middlewares, **agent_kwargs)
        _record_writes(graph)
        inline_lone_calls(graph)  # `create_fused_agent` did it for a fused graph
    input_step_in_run_context(graph)
    lean_channels(graph)
    quiet_nodes(graph)  # last: a node changed after this runs its callback run again
    scope_runs(graph)  # what a run holds is let go when it ends, however it ends
    if config.storage.messages_channel == "delta" and saver not in (None, False):
        use_delta_channels(graph, delta_channel_names(built.middlewares),
                           config.storage.snapshot_every)
    limit = steps_for_model_calls(graph, config.agent.max_model_calls)
    # The graph's own default too, for runs started on it directly (LangGraph Server).
    graph = graph.with_config(recursion_limit=limit)
    if saver is not None and saver is not False:
        graph = graph.with_config(configurable={_DURABILITY_KEY: durability})
    return graph, fusion, limit


def _closers(services: Services, storage: Storage, close_mcp: Callable[[], None] | None,
             provided_queue: Any) -> list[Callable[[], None]]:
    """What `AntlerAgent.close` closes, in order: the sandbox provider, the MCP sessions,
    the storage, and a memory queue this build created.

    A memory queue the memory plugin created (when none was provided) is
    flushed and stopped with the agent; a provided one belongs to whoever
    provided it.
    """
    closers: list[Callable[[], None]] = []
    provider = services.items.get("sandbox_provider")
    if provider is not None:
        closers.append(provider.shutdown)
    if close_mcp is not None:
        closers.append(close_mcp)
    closers.append(storage.close)
    queue = services.items.get(MEMORY_QUEUE)
    if queue is not None and queue is not provided_queue:
        closers.append(queue.close)
    return closers


def _record_writes(graph: Any) -> None:
    """The input step records the ids of the messages each run receives, for the boundary
    guard, and every node lists the messages it writes (`antler.runtime.inputs`)."""
    record_arrivals(graph)
    record_message_writes(graph)


def steps_for_model_calls(graph: Any, model_calls: int) -> int:
    """LangGraph's `recursion_limit` for runs of `graph` that make up to `model_calls` calls.

    Each node of an agent graph runs in a step of its own. The `before_agent`
    and `after_agent` nodes run once per run; every other node (the model, the
    tools, the `before_model`/`after_model` nodes the compiler did not fuse
    into the model node) once per model call, the tools all but the last
    time. A run that asks for more model calls than `model_calls` reaches
    the limit before its tools run again; depending on the chain's shape, the
    one call over the budget may be made first (its reply is not acted on).
    """
    from langgraph.constants import START

    once = per_call = 0
    for name in graph.nodes:
        if name == START:
            continue
        if name.endswith((".before_agent", ".after_agent")):
            once += 1
        else:
            per_call += 1
    return once + per_call * model_calls


# -- MCP tools and deferral (tool_search) ------------------------------------------------


@contextlib.contextmanager
def _closing_on_error(close: Callable[[], None] | None) -> Iterator[None]:
    """Close what this build opened (MCP sessions, the storage) when the build fails."""
    try:
        yield
    except BaseException:
        if close is not None:
            close()
        raise


def _deferred_setup(runtime: RuntimeOptions, services: Services,
                    mcp_loaded: Sequence[Any]) -> RuntimeOptions:
    """A fresh `DeferredTools` service for this build, and the ``mcp_routing`` condition.

    The condition holds when an MCP tool is routed by keywords (`routing.mode:
    prefer`); mcp_routing joins only then (and with `tool_search` on).
    """
    services.items[DEFERRED_TOOLS] = DeferredTools()
    routed = any((routing := mcp_routing_of(tool)) and routing["mode"] == "prefer"
                 and routing["keywords"] for tool in mcp_loaded)
    return runtime.model_copy(
        update={"conditions": {"mcp_routing": routed, **runtime.conditions}})


def _unclaimed(mcp_loaded: Sequence[Any], tools: Sequence[Any]) -> list[Any]:
    """The MCP tools whose names no other tool (the caller's, the plugins') takes."""
    import logging

    taken = {getattr(tool, "name", None) for tool in tools}
    kept = []
    for tool in mcp_loaded:
        if tool.name in taken:
            logging.getLogger("antler.mcp").warning(
                "MCP tool %r is left out: the agent already has a tool of that name; set "
                "`tool_name_prefix` on its server", tool.name)
        else:
            kept.append(tool)
    return kept


def _defer(built: BuiltChain, tools: list[Any], setup: DeferredTools) -> list[Any]:
    """`tools`, with the MCP ones deferred behind tool_search when the chain defers.

    A chain defers when a plugin in it keeps the ``promoted`` state (deferred_tool_filter,
    on with `tool_search: {enabled: true}`); see `antler.runtime.deferred`.
    """
    if not any(PROMOTED_KEY in getattr(getattr(m, "state_schema", None), "__annotations__", {})
               for m in built.middlewares):
        return tools
    return defer_tools(tools, setup)
