"""Building a runnable agent from a plugin chain: `antler.create_agent`.

This is the one place where the pieces meet: the operator config, the
resolved chain, the embedded default services (thread paths, a sandbox
provider, a chat model) and LangChain's `create_agent`. Everything a plugin
needs arrives through the build context's services, so two agents in one
process never share state by accident.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antler.chain import BuiltChain, build_chain, prompt_sections, select_tools
from antler.chain.config import OperatorConfig
from antler.compiler import (
    FusionPlan,
    create_fused_agent,
    expand_fused_updates,
    stream_modes_for,
    wants_expansion,
)
from antler.plugin_api.context import (
    MEMORY_QUEUE,
    MODEL,
    PATHS,
    SKILLS,
    RuntimeOptions,
    Services,
)
from antler.plugin_api.registry import PluginRegistry, discover

from .delegation import TASK_TOOL, make_task_tool
from .paths import PathLayout, resolve_base
from .runcontext import RunContext
from .skills import SkillsRegistry
from .tracing import Tracer, instrument
from .uploads import upload_names

CHECKPOINT_FILENAME = "checkpoints.sqlite"

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
    _closers: list[Any] = field(default_factory=list)

    def context(self, thread_id: str, user_id: str = "default", **identity: Any) -> RunContext:
        return RunContext(thread_id=thread_id, user_id=user_id,
                          run_id=identity.pop("run_id", None) or uuid.uuid4().hex, **identity)

    def run_config(self, thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": 100}

    def invoke(self, message: Any, *, thread_id: str, user_id: str = "default",
               files: Sequence[dict[str, Any]] = (), **identity: Any) -> dict[str, Any]:
        """Run one turn to completion and return the final state."""
        return self.graph.invoke(
            self.input(message, files), config=self.run_config(thread_id),
            context=self.context(thread_id, user_id, **identity),
        )

    def stream(self, message: Any, *, thread_id: str, user_id: str = "default",
               files: Sequence[dict[str, Any]] = (), stream_mode: Any = "updates",
               **identity: Any) -> Iterator[Any]:
        """Stream one turn; a fused node's `updates` come out as one chunk per plugin hook."""
        expand = wants_expansion(self.fusion, stream_mode)
        chunks = self.graph.stream(
            self.input(message, files), config=self.run_config(thread_id),
            context=self.context(thread_id, user_id, **identity),
            stream_mode=stream_modes_for(stream_mode) if expand else stream_mode,
        )
        if expand and self.fusion is not None:
            chunks = expand_fused_updates(chunks, self.fusion, stream_mode)
        yield from chunks

    @staticmethod
    def input(message: Any, files: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """The graph input for `message`, with its upload records checked.

        A refused upload name raises `UploadError` here, before the graph runs:
        found by the uploads plugin, it would fail the run after the message was
        saved to the thread, leaving a question without an answer.
        """
        from langchain_core.messages import HumanMessage

        if isinstance(message, dict) and "messages" in message:
            payload = message
        else:
            if isinstance(message, str):
                kwargs = {"files": list(files)} if files else {}
                message = HumanMessage(content=message, additional_kwargs=kwargs)
            payload = {"messages": [message]}
        messages = payload["messages"]
        for item in messages if isinstance(messages, list) else [messages]:
            if isinstance(item, HumanMessage):
                upload_names(item.additional_kwargs.get("files"))
        return payload

    def state(self, thread_id: str) -> dict[str, Any]:
        return dict(self.graph.get_state(self.run_config(thread_id)).values)

    def close(self) -> None:
        """Release what the agent holds: sandboxes, database connections."""
        for closer in reversed(self._closers):
            closer()
        self._closers.clear()

    def __enter__(self) -> AntlerAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compose_system_prompt(base: str | None, sections: Sequence[str]) -> str | None:
    """The base prompt followed by the plugins' sections, a blank line between each."""
    parts = [part for part in (base, *sections) if part]
    return "\n\n".join(parts) if parts else None


FROM_CONFIG = "config"
"""`create_agent`'s default checkpointer: whatever `storage.checkpointer` says."""


def open_checkpointer(kind: Any, base_dir: Path) -> tuple[Any, Any]:
    """(saver, closer) for 'sqlite' (the default), 'memory', None/'none', False, or a saver.

    None keeps no checkpoints of its own but, run inside another graph, writes into
    the parent's; False never checkpoints, even nested.
    """
    if kind is False:
        return False, None
    if kind in (None, "none"):
        return None, None
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver(), None
    if kind == "sqlite" or isinstance(kind, (str, Path)):
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = base_dir / CHECKPOINT_FILENAME if kind == "sqlite" else Path(kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(str(path), check_same_thread=False)
        return SqliteSaver(connection), connection.close
    return kind, None


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
    every hook invocation (see `antler.tracing`). `fuse` (None: the config's
    `chain.fuse`) runs consecutive node hooks of one kind in one graph node,
    and `fuse_into_model` (None: `chain.fuse_into_model`) runs the
    `before_model`/`after_model` hooks inside the model node (see
    `antler.compiler`).
    """
    from langchain.agents import create_agent as langchain_create_agent

    from .models import resolve_chat_model

    registry = registry or discover()
    config = config or OperatorConfig()
    base = resolve_base(base_dir or config.storage.base_dir)
    if checkpointer == FROM_CONFIG:
        checkpointer = config.storage.checkpointer
    if runtime is None:
        runtime = RuntimeOptions(supports_vision=config.models.supports_vision)
    if not isinstance(services, Services):
        services = Services(dict(services or {}))
    if model is None:
        model = config.models.default
    if subagent_model is None and config.models.subagent:
        subagent_model = resolve_chat_model(config.models.subagent)
    chat_model = resolve_chat_model(model) if not hasattr(model, "invoke") else model
    services.items.setdefault(MODEL, chat_model)
    if SKILLS not in services.items:
        services.items[SKILLS] = SkillsRegistry.from_settings(config.skills)
    skill_roots = tuple(getattr(services.items[SKILLS], "roots", ()))
    services.items.setdefault(PATHS, PathLayout(base, skill_roots=skill_roots))
    provided_queue = services.items.get(MEMORY_QUEUE)
    built = build_chain(config, chain, runtime, services, registry=registry,
                        custom_middlewares=custom_middlewares)
    runtime = built.plan.runtime
    extra_tools = list(tools)
    # A `task` tool passed by the caller replaces the built-in one: with both, the
    # model would be offered two tools of one name and the tools node keep the last.
    caller_task = any(getattr(t, "name", None) == TASK_TOOL for t in tools)
    if chain == "lead" and runtime.subagents_enabled and not caller_task:
        def build_subagent() -> Any:
            # Same services (paths, sandbox provider, memory queue) but its own model, so
            # plugins that read services[MODEL] (summarization) measure the right one.
            sub_model = subagent_model or chat_model
            sub_services = Services({**services.items, MODEL: sub_model})
            sub = create_agent(
                config, chain="subagent", model=sub_model, tools=tools,
                # A delegated task is one tool call of the lead: its inner steps are not
                # persisted (nor written into the lead thread's checkpoints).
                checkpointer=False,
                runtime=runtime.model_copy(update={"subagents_enabled": False}),
                services=sub_services, registry=registry, system_prompt=system_prompt,
                base_dir=base, tracer=tracer.child("subagent") if tracer else None,
                fuse=fuse, fuse_into_model=fuse_into_model,
            )
            return sub.graph

        extra_tools.append(make_task_tool(build_subagent))
    saver, close_saver = open_checkpointer(checkpointer, base)
    middlewares = built.middlewares
    if tracer is not None:
        middlewares = instrument(middlewares, tracer, built.names)
    agent_kwargs: dict[str, Any] = {
        "model": chat_model, "tools": select_tools(built, [*extra_tools, *built.tools]),
        "system_prompt": compose_system_prompt(system_prompt, prompt_sections(built)),
        "context_schema": RunContext, "checkpointer": saver,
    }
    fusion = None
    if config.chain.fuse if fuse is None else fuse:
        graph, fusion = create_fused_agent(
            middlewares, labels=built.names,
            unfusable={entry.name for entry in built.entries if not entry.spec.fusable},
            into_model=config.chain.fuse_into_model if fuse_into_model is None
            else fuse_into_model,
            **agent_kwargs)
    else:
        graph = langchain_create_agent(middleware=middlewares, **agent_kwargs)
    agent = AntlerAgent(graph, built, services, config, saver, base, fusion=fusion)
    provider = services.items.get("sandbox_provider")
    if provider is not None:
        agent._closers.append(provider.shutdown)
    if close_saver is not None:
        agent._closers.append(close_saver)
    # A memory queue this build created (the memory plugin does when none was
    # provided) is flushed and stopped with the agent; a provided one belongs to
    # whoever provided it.
    queue = services.items.get(MEMORY_QUEUE)
    if queue is not None and queue is not provided_queue:
        agent._closers.append(queue.close)
    return agent
