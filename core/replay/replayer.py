"""Playing a recording against a config, offline: `replay`.

The recorded inputs go through the chain `config` builds, one run each, on a
thread of a scratch base directory (its checkpoints and store in memory), so a
replay touches neither the operator's database nor a provider:

* every model the chain would call (the agent's, the subagents', the title,
  memory and summarization models, anything resolved through the model
  catalog) is one `ReplayChatModel`, which answers from the recording. Agent
  calls are matched by position *within their run* (run 3 starts at its first
  recorded call, whatever runs 1 and 2 did), and each request's shape is
  compared with the recorded one (`antler.replay.fingerprint`): a request that
  diverges is still answered, and the divergence is reported with the run. A
  run that asks for more calls than it recorded gets empty replies, said so;
* tools run for real in the scratch thread's sandbox, or, with `stub_tools`,
  answer with the result recorded for the same call id (the `task` tool still
  runs its subagent, whose model calls are in the recording too);
* a recorded reply that calls a tool the chain does not have is reported for
  its run, and the run goes on (the model gets the usual "not a valid tool").
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from pydantic import PrivateAttr

from antler.errors import AntlerError, describe_error
from antler.runtime.models.catalog import ModelCatalog

from .fingerprint import describe_divergence, request_shape
from .outcome import hidden_notes, summarize_turn
from .recording import HiddenNote, Recording, TurnOutcome
from .redact import Redactor
from .turns import turn_message

__all__ = ["ReplayChatModel", "ReplayResult", "replay"]

SIDE_PURPOSES = ("title", "memory", "tool_selector")
NO_RESULT = ("Error: no result was recorded for this call (it did not run when the "
             "conversation was recorded), so --stub-tools cannot answer it.")


@dataclass
class _RunLog:
    """What one replayed run asked and got."""

    index: int
    replies: list[AIMessage] = field(default_factory=list)
    position: int = 0
    divergences: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    hidden: dict[tuple[str, str], HiddenNote] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)
    unrecorded_results: list[str] = field(default_factory=list)


class ReplaySession:
    """The recording's answers and where each kind of call is in them."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.redactor = Redactor(recording.recording.redact, environ={})
        self.lock = threading.RLock()
        self.sides = dict.fromkeys(SIDE_PURPOSES, 0)
        self.log = _RunLog(-1)
        self.model_name = recording.model_name or recording.recording.model or "replay"
        self.chain_tools: set[str] | None = None
        """The tools the chain's tools node has (None: not known)."""

    def begin(self, index: int) -> _RunLog:
        with self.lock:
            self.log = _RunLog(index)
            return self.log

    def answer(self, purpose: str, messages: Sequence[BaseMessage],
               bound: Sequence[str]) -> AIMessage:
        """The recorded reply to this call (raises the recorded provider error)."""
        with self.lock:
            if purpose in SIDE_PURPOSES:
                turns = getattr(self.recording, purpose)
                position = self.sides[purpose]
                self.sides[purpose] += 1
                if position >= len(turns):
                    return AIMessage(content="")  # "nothing", as a scripted side call
                return turn_message(turns[position], self.model_name)
            return self._agent_answer(messages, bound)

    def _agent_answer(self, messages: Sequence[BaseMessage], bound: Sequence[str]) -> AIMessage:
        log = self.log
        log.bound.update(bound)
        if log.index < 0:
            raise AntlerError("a model call outside any replayed run")
        item = self.recording.inputs[log.index]
        call = log.position
        log.position += 1
        for note in hidden_notes(messages):
            log.hidden.setdefault((note.source, note.text), note)
        if call >= item.calls:
            log.divergences.append(
                f"model call {call + 1}: the recording has {item.calls} call(s) for this run; "
                "answered with an empty reply")
            message = AIMessage(content="", usage_metadata={
                "input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
            message.response_metadata = {"finish_reason": "stop", "model_name": self.model_name}
            log.replies.append(message)
            return message
        difference = describe_divergence(item.requests[call],
                                         request_shape(messages, self.redactor))
        if difference is not None:
            log.divergences.append(f"model call {call + 1} diverged: {difference}")
        turn = self.recording.turns[self.recording.start_of(log.index) + call]
        message = turn_message(turn, self.model_name)
        tools = self.chain_tools if self.chain_tools is not None else set(bound)
        for tool_call in message.tool_calls:
            if tools and tool_call["name"] not in tools and tool_call["name"] not in log.missing:
                log.missing.append(tool_call["name"])
        log.replies.append(message)
        return message

    def tool_result(self, call: dict[str, Any]) -> Any:
        """The result recorded for `call` (by its id), for a stubbed tool."""
        with self.lock:
            item = self.recording.inputs[self.log.index] if self.log.index >= 0 else None
            call_id = str(call.get("id"))
            recorded = None
            for candidate in ([item] if item else []) + list(self.recording.inputs):
                if call_id in candidate.tool_results:
                    recorded = candidate.tool_results[call_id]
                    break
            if recorded is None:
                self.log.unrecorded_results.append(call_id)
                return ToolMessage(content=NO_RESULT, tool_call_id=call_id,
                                   name=call.get("name"), status="error")
            message = ToolMessage(content=recorded.content, tool_call_id=call_id,
                                  name=recorded.name, status=recorded.status)
            if not recorded.state_update:
                return message
            from langgraph.types import Command

            return Command(update={**recorded.state_update, "messages": [message]})


class ReplayChatModel(BaseChatModel):
    """A chat model answering every call from a recording (see `ReplaySession`).

    A call is an agent call, or a title / memory / tool-selector side call when
    its run metadata says so (``lc_source``) or it comes through `side_model`.
    """

    model_name: str = "replay"
    bound_tools: tuple[str, ...] = ()
    purpose: str | None = None
    _session: ReplaySession | None = PrivateAttr(default=None)

    @classmethod
    def for_session(cls, session: ReplaySession) -> ReplayChatModel:
        model = cls(model_name=session.model_name)
        model._session = session
        return model

    @property
    def _llm_type(self) -> str:
        return "antler-replay"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None,
                   **kwargs: Any) -> ReplayChatModel:
        from antler.runtime.models.scripted import bound_tool_name

        return self.model_copy(update={"bound_tools": tuple(bound_tool_name(t) for t in tools)})

    def side_model(self, purpose: str) -> ReplayChatModel:
        return self.model_copy(update={"purpose": purpose})

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        assert self._session is not None
        purpose = self.purpose
        if purpose is None:
            source = (getattr(run_manager, "metadata", None) or {}).get("lc_source")
            purpose = source if source in SIDE_PURPOSES else "turns"
        message = self._session.answer(purpose, messages, self.bound_tools)
        return ChatResult(generations=[ChatGeneration(message=message)])


class ReplayCatalog(ModelCatalog):
    """The model catalog of a replay: every reference is the replay model."""

    def __init__(self, entries: Any, model: ReplayChatModel) -> None:
        super().__init__(entries)
        self.model = model

    def resolve(self, reference: Any, **kwargs: Any) -> Any:
        return self.model

    def check(self, reference: str | None) -> None:
        return None


class _StubTool(BaseTool):
    """A tool that answers with the recorded result of the same call."""

    recorded_by: Any = None

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - invoke answers
        raise NotImplementedError

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return self.recorded_by.tool_result(dict(input))

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return self.recorded_by.tool_result(dict(input))


def _tool_node(graph: Any) -> Any:
    node = getattr(graph, "nodes", {}).get("tools")
    bound = getattr(node, "bound", None)
    if hasattr(bound, "tools_by_name"):
        return bound
    owner = getattr(getattr(bound, "func", None), "__self__", None)
    return getattr(owner, "tools", None)


def stub_tools(graph: Any, session: ReplaySession) -> None:
    """Answer the agent's tools from the recording (all but `task`, whose subagent runs)."""
    node = _tool_node(graph)
    if node is None:
        return
    tools = node.tools_by_name
    for name, tool in list(tools.items()):
        if name == "task":
            continue
        tools[name] = _StubTool(name=name, description=tool.description,
                                args_schema=tool.args_schema, return_direct=tool.return_direct,
                                recorded_by=session)


@dataclass
class ReplayResult:
    """What a replay of one recording against one config did."""

    config: str
    outcomes: list[TurnOutcome]
    memory_facts: list[str]
    seconds: float
    notes: list[str] = field(default_factory=list)


def replay(recording: Recording, config: Any, *, registry: Any = None,
           stub: bool = False, fuse: bool | None = None) -> ReplayResult:
    """Replay every input of `recording` through the chain of `config` (see the module)."""
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="antler-replay-"))
    try:
        return _replay(recording, config, scratch, registry=registry, stub=stub, fuse=fuse,
                       started=started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _replay(recording: Recording, config: Any, scratch: Path, *, registry: Any, stub: bool,
            fuse: bool | None, started: float) -> ReplayResult:
    from langgraph.store.memory import InMemoryStore

    from antler.chain.conditions import runtime_for
    from antler.plugin_api.context import (
        MEMORY_MODEL,
        MEMORY_QUEUE,
        MODEL_CATALOG,
        STORE,
        TITLE_MODEL,
    )
    from antler.runtime.agent import create_agent

    header = recording.recording
    session = ReplaySession(recording)
    model = ReplayChatModel.for_session(session)
    catalog = ReplayCatalog(config.models.named, model)
    store = InMemoryStore()
    identity = header.identity
    user_id = str(identity.get("user_id") or "default")
    roles = tuple(identity.get("roles") or ())
    flags: dict[str, Any] = {key: header.runtime[key] for key in
             ("plan_mode", "subagents_enabled", "supports_vision", "agent_name")
             if key in header.runtime}
    runtime = runtime_for(config, {**flags, "user_id": user_id}, catalog=catalog)
    services = {MODEL_CATALOG: catalog, TITLE_MODEL: model.side_model("title"),
                MEMORY_MODEL: model.side_model("memory"), STORE: store}
    notes: list[str] = []
    outcomes: list[TurnOutcome] = []
    with create_agent(config, model=model, subagent_model=model, runtime=runtime,
                      registry=registry, base_dir=scratch, services=services,
                      checkpointer="memory", record=False, fuse=fuse) as agent:
        node = _tool_node(agent.graph)
        session.chain_tools = set(node.tools_by_name) if node is not None else None
        if stub:
            stub_tools(agent.graph, session)
        plugin_of = _plugin_names(agent)
        previous_stop: Any = None
        for index, item in enumerate(recording.inputs):
            log = session.begin(index)
            message, files = _input(agent, item, header.thread_id, user_id, scratch, notes)
            stripped: dict[str, str] = {}
            error = None
            state: dict[str, Any] | None = None
            try:
                for mode, chunk in agent.stream(message, thread_id=header.thread_id,
                                                user_id=user_id, files=files, roles=roles,
                                                stream_mode=["updates", "values"]):
                    if mode == "values":
                        state = chunk  # the last one is the run's final state
                    else:
                        _note_stripped(chunk, log.replies, stripped, plugin_of)
            except Exception as exc:  # the run's failure is part of its behaviour
                error = describe_error(exc)
                state = None
            if state is None:  # read back what the failed run saved
                state = agent.state(header.thread_id)
            queue = agent.services.items.get(MEMORY_QUEUE)
            if queue is not None and hasattr(queue, "flush"):
                with contextlib.suppress(Exception):
                    queue.flush()
            outcome = summarize_turn(state, log.replies, hidden=list(log.hidden.values()),
                                     previous_stop=previous_stop, stripped_by=stripped,
                                     available_tools=session.chain_tools, error=error)
            previous_stop = state.get("antler_stop_reason") or previous_stop
            outcomes.append(outcome.model_copy(update={
                "divergences": log.divergences, "missing_tools": log.missing}))
            if log.unrecorded_results:
                notes.append(f"run {index + 1}: no recorded result for call(s) "
                             f"{', '.join(log.unrecorded_results)} (--stub-tools)")
        facts = _memory_facts(store, user_id)
    return ReplayResult(config=str(config.source), outcomes=outcomes, memory_facts=facts,
                        seconds=time.perf_counter() - started, notes=notes)


def _plugin_names(agent: Any) -> dict[str, str]:
    """Graph node prefix (the middleware's name) -> plugin name."""
    names = {}
    for entry in agent.chain.entries:
        middleware = entry.middleware
        names[str(getattr(middleware, "name", type(middleware).__name__))] = entry.name
        names[type(middleware).__name__] = entry.name
    return names


def _note_stripped(update: Any, replies: list[AIMessage], stripped: dict[str, str],
                   plugin_of: dict[str, str]) -> None:
    """Attribute each call that an update removes from a model reply to the update's plugin."""
    if not isinstance(update, dict):
        return
    asked: dict[str, set[str]] = {
        reply.id: {str(call["id"]) for call in reply.tool_calls} for reply in replies
        if reply.id and reply.tool_calls}
    if not asked:
        return
    for node, change in update.items():
        messages = change.get("messages") if isinstance(change, dict) else None
        for message in messages if isinstance(messages, list) else [messages] if messages \
                else []:
            wanted = asked.get(str(getattr(message, "id", None)))
            if wanted is None or getattr(message, "type", None) != "ai":
                continue
            kept = {str(call.get("id")) for call in getattr(message, "tool_calls", None) or []}
            prefix = str(node).split(".")[0]
            for call_id in wanted - kept:
                stripped.setdefault(call_id, plugin_of.get(prefix, prefix))


def _input(agent: Any, item: Any, thread_id: str, user_id: str, scratch: Path,
           notes: list[str]) -> tuple[Any, list[dict[str, Any]]]:
    """The run's input: the recorded text (with placeholder uploads) or resume value."""
    if item.resume is not None:
        from langgraph.types import Command

        return Command(resume=item.resume), []
    from antler.plugin_api.uploads import stage_upload

    files = []
    if item.uploads:
        paths = agent.services.get("paths").thread(user_id, thread_id)
        source = scratch / "uploads"
        source.mkdir(exist_ok=True)
        for name in item.uploads:
            placeholder = source / name
            placeholder.write_bytes(b"")
            files.append(stage_upload(paths, placeholder, name))
        notes.append(f"uploads {', '.join(item.uploads)}: replayed as empty files (a "
                     "recording keeps upload names, not contents)")
    return item.text or "", files


def _memory_facts(store: Any, user_id: str) -> list[str]:
    from antler.contracts.storenames import MEMORY_NAMESPACE

    try:
        items = store.search((*MEMORY_NAMESPACE, user_id), limit=1000)
    except Exception:
        return []
    facts = []
    for item in items:
        value = getattr(item, "value", None) or {}
        content = value.get("content") if isinstance(value, dict) else None
        if isinstance(content, str):
            facts.append(content)
    return sorted(facts)


