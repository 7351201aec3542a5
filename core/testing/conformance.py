"""`PluginConformance`: the rules every Antler middleware follows, run against one plugin.

A third party subclasses it in their own test suite, naming the installed plugin::

    from antler.testing import PluginConformance

    class TestAcmeAuditConformance(PluginConformance):
        plugin = "acme_audit"

pytest then runs one test per check (`CHECKS`), each through real agent graphs
of the installed plugins (`antler.agent.create_agent` over a scripted chat
model): the plugin in its place among Antler's own, in the lead chain and, when
it joins it, the subagent chain. A failure names the rule, links to its section
of `docs/plugins.md` and shows what differed. A check that does not apply to a
plugin is skipped by name, with the reason: `skip_checks = {"non_blocking":
"waits on a lock the provider holds; tracked in #12"}`.

What a subclass may set (all optional but `plugin`): `config` (the plugin's
section, applied to every section it reads), `operator_config` (other
sections), `scenario` (the model's turns; by default a call of the battery's
own `conformance_lookup` tool, then an answer), `tools` (extra tools the
scenario calls), `message` (the user's message), `runtime` (RuntimeOptions
fields; by default every runtime condition the plugin's `when:` names, and
plan mode, vision and subagents on), `extra_plugins` ((name, object) pairs
registered as in-process entry points) and `skip_checks`.

Runs are shared: classes whose settings build the same graphs (Antler's
built-ins under the default config, say) reuse one recorded run per way of
running it. Every hook of every plugin is recorded (node-hook updates, the
request a wrap hook hands on and what it returns), so each class compares
only what its own plugin did.

`run_conformance(cls)` runs the battery without pytest and returns each
check's outcome, for testing the battery itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from antler.errors import AntlerError

if TYPE_CHECKING:
    from antler.plugin_api.context import RuntimeOptions
    from antler.plugin_api.registry import PluginRegistry
    from antler.plugin_api.spec import PluginSpec

__all__ = [
    "CHECKS",
    "ConformanceFailure",
    "PluginConformance",
    "Rule",
    "run_conformance",
]

DOCS = "docs/plugins.md"


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one check enforces, and where `docs/plugins.md` explains it."""

    title: str
    anchor: str

    @property
    def link(self) -> str:
        return f"{DOCS}#{self.anchor}"


CHECKS: dict[str, Rule] = {
    "manifest": Rule("the manifest entry is valid and its `hooks:` are exactly the hooks "
                     "the middleware class implements", "rule-manifest-hooks"),
    "config_schema": Rule("the config model exports a JSON Schema and its defaults validate",
                          "rule-config-schema"),
    "hooks_run": Rule("every hook runs without raising on the standard scenario",
                      "rule-hooks-run"),
    "request_mutation": Rule("a wrap hook hands on a new request (`request.override(...)`) "
                             "and never changes the one it was given", "rule-request-mutation"),
    "state_writes": Rule("node hooks write only the state keys the plugin owns, LangChain's "
                         "shared channels and the contract channels its schema takes",
                         "rule-state-writes"),
    "sync_async": Rule("every hook has a sync and an async form, and both give the same "
                       "state updates, requests and tool results", "rule-sync-async"),
    "chains": Rule("the plugin runs in each chain it joins, fused and unfused, with "
                   "identical outcomes", "rule-fused-unfused"),
    "non_blocking": Rule("no blocking call inside an async hook", "rule-non-blocking"),
    "retry_injection": Rule("a retried model call still carries what the plugin injected",
                            "rule-one-shot-injections"),
    "state_keys": Rule("state keys are private or namespaced and do not collide with "
                       "Antler's own", "rule-state-keys"),
    "on_error": Rule("an exception inside a hook is handled as the plugin's `on_error` "
                     "policy says", "rule-on-error"),
    "resume": Rule("a run survives a resume from its checkpoint in a new process",
                   "rule-resume"),
    "history_work": Rule("a hook's work follows the new messages, not the thread's length: "
                         "its CPU time per turn grows at most 4x from 50 to 2,000 earlier "
                         "messages", "rule-history-work"),
}
"""Every check of the battery, by the name `skip_checks` uses, in the order they run."""

LOOKUP_TOOL = "conformance_lookup"
ENTRY_POINT = "antler_conformance"
RETRY_PLUGIN = "conformance_retry"
DEFAULT_MESSAGE = "Look up the word 'antler' for me, please."
DEFAULT_SCENARIO: tuple[Any, ...] = (
    {"content": "", "tool_calls": [{"name": LOOKUP_TOOL, "args": {"query": "antler"}}]},
    "An antler is a bone that deer grow and shed every year.",
)
MODES: dict[str, dict[str, bool]] = {
    "unfused": {"fuse": False, "fuse_into_model": False},
    "fused": {"fuse": True, "fuse_into_model": False},
    "model_node": {"fuse": True, "fuse_into_model": True},
}
"""The three ways the chain compiler can wire a chain (`docs/compiler.md`)."""
DEFAULT_MODE = "model_node"
_RUNTIME_FLAGS = ("plan_mode", "supports_vision", "subagents_enabled")
_NODE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")
_HANDLER = "_conformance_handler"
"""The name of the function a recorded wrap hook calls as its handler: blocking
calls below it (in inner plugins, the model, a tool) are not the plugin's."""
_WORKER_MARK = "@@antler-conformance@@ "
HISTORY_LENGTHS = (50, 2000)
"""The thread lengths (earlier messages) the history check times a turn at."""
HISTORY_TURNS = 3
"""Timed turns per length; each hook's figure is its median per turn."""
HISTORY_RATIO = 4.0
HISTORY_NOISE_MS = 0.3
"""Growth per turn below which a hook never fails the history check (timer and GC noise)."""


class ConformanceFailure(AssertionError):
    """A check failed: the rule, its section of docs/plugins.md, and what was seen."""

    def __init__(self, check: str, detail: str) -> None:
        rule = CHECKS[check]
        super().__init__(f"[{check}] rule: {rule.title}.\n  see {rule.link}\n{detail}")
        self.check = check
        self.detail = detail


class ConformanceError(AntlerError):
    """The conformance class itself is misconfigured (unknown plugin, check or setting)."""


class ConformanceTransientError(AntlerError):
    """The transient model failure the battery injects; its own retrier retries it once.

    An `AntlerError`, so Antler's own model-error handling lets it through to the
    battery's retrier, which encloses every other model wrapper.
    """


class ConformanceCrash(BaseException):
    """Stops a run in the middle, as a crash would, before it resumes in another process.

    Not an `Exception`: no error handler or retrying wrapper may turn it into an answer.
    """


class ConformanceFault(RuntimeError):
    """The exception the battery raises inside a plugin's hook to test its `on_error`."""


# -- normalizing what a run produced ----------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}",
                   re.IGNORECASE)
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_MAX_DEPTH = 40
_VOLATILE_KEYS = re.compile(r"(^|_)(ms|seconds|elapsed|duration|started|finished|"
                            r"timestamp|created_at|updated_at|time)$")


class _Plain:
    """Turns messages, requests, updates and state into comparable JSON-like values.

    Ids generated per run (message ids, uuids) become `<id1>`, `<id2>`, ... in
    the order they first appear, timestamps become `<time>` and the run's home
    directory `<home>`, so two runs that did the same thing compare equal.
    """

    def __init__(self, home: str | None = None) -> None:
        self.home = home
        self.ids: dict[str, str] = {}
        self.depth = 0

    def text(self, value: str) -> str:
        if self.home:
            value = value.replace(self.home, "<home>")
        value = _UUID.sub(self._id, value)
        value = _TIME.sub("<time>", value)
        return _ADDRESS.sub("", value)

    def _id(self, match: re.Match[str]) -> str:
        key = match.group(0).lower().replace("-", "")
        return self.ids.setdefault(key, f"<id{len(self.ids) + 1}>")

    def __call__(self, value: Any) -> Any:
        if self.depth > _MAX_DEPTH:  # a structure that refers to itself
            return f"<{type(value).__name__} nested too deep>"
        self.depth += 1
        try:
            return self._plain(value)
        finally:
            self.depth -= 1

    def _plain(self, value: Any) -> Any:
        from langchain_core.messages import BaseMessage

        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, BaseMessage):
            return self.message(value)
        if isinstance(value, Mapping):
            return {self.text(str(key)): self(item) for key, item in value.items()
                    if not _VOLATILE_KEYS.search(str(key))}
        if isinstance(value, (list, tuple)):
            return [self(item) for item in value]
        if isinstance(value, (set, frozenset)):
            return sorted((self(item) for item in value), key=repr)
        kind = type(value).__name__
        special = getattr(self, f"_{kind}", None)
        if special is not None:
            return special(value)
        if hasattr(value, "model_dump"):
            return self(value.model_dump())
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {"type": kind, **self({f.name: getattr(value, f.name)
                                          for f in dataclasses.fields(value)})}
        return f"<{kind}>"

    def message(self, message: Any) -> dict[str, Any]:
        plain: dict[str, Any] = {"type": message.type, "content": self(message.content)}
        for field in ("name", "tool_call_id", "status"):
            if getattr(message, field, None) is not None:
                plain[field] = self(getattr(message, field))
        calls = getattr(message, "tool_calls", None)
        if calls:
            plain["tool_calls"] = [{"name": call.get("name"), "args": self(call.get("args")),
                                    "id": self(call.get("id"))} for call in calls]
        if message.additional_kwargs:
            plain["additional_kwargs"] = self(message.additional_kwargs)
        finish = (message.response_metadata or {}).get("finish_reason")
        if finish:
            plain["finish_reason"] = finish
        if message.id is not None:
            plain["id"] = self(message.id)
        return plain

    def _ModelRequest(self, request: Any) -> dict[str, Any]:
        return {"system": self(request.system_message), "messages": self(request.messages),
                "tools": sorted(_tool_name(tool) for tool in request.tools or []),
                "tool_choice": self(request.tool_choice),
                "model_settings": self(request.model_settings)}

    def _ToolCallRequest(self, request: Any) -> dict[str, Any]:
        return {"tool_call": self(dict(request.tool_call))}

    def _ModelResponse(self, response: Any) -> dict[str, Any]:
        return {"result": self(response.result),
                "structured_response": self(response.structured_response)}

    def _ExtendedModelResponse(self, response: Any) -> dict[str, Any]:
        return {"model_response": self(response.model_response),
                "command": self(response.command)}

    def _Command(self, command: Any) -> dict[str, Any]:
        return {"goto": self(command.goto), "update": self(command.update),
                "resume": self(command.resume), "graph": self(command.graph)}


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        return str(tool.get("name") or tool.get("function", {}).get("name"))
    return str(getattr(tool, "name", type(tool).__name__))


def plain(value: Any, home: str | None = None) -> Any:
    """`value` as comparable JSON-like data, with ids numbered afresh (see `_Plain`)."""
    return _Plain(home)(value)


# -- recording every hook of every plugin --------------------------------------------------


@dataclasses.dataclass
class Record:
    """One hook invocation of one plugin, normalized."""

    plugin: str
    hook: str
    is_async: bool
    data: Any
    error: str | None = None
    message: str | None = None
    """The exception's text, when the hook raised."""
    mutated: str | None = None
    """A wrap hook that changed the request it was given: what it was, and what it became."""

    def key(self) -> tuple[str, Any, str | None]:
        return self.hook, self.data, self.error


@dataclasses.dataclass
class _Recording:
    """What one run records, and the faults it injects."""

    home: str
    faults: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    records: list[Record] = dataclasses.field(default_factory=list)
    blocking: list[str] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    timed: bool = False
    """Keep only each hook's CPU seconds (`cpu`), no records (the history check)."""
    cpu: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)

    def spent(self, plugin: str, hook: str, seconds: float) -> None:
        if self.timed:
            with self.lock:
                self.cpu[plugin, hook] = self.cpu.get((plugin, hook), 0.0) + seconds

    def add(self, plugin: str, hook: str, is_async: bool, data: Any,
            error: BaseException | None = None, mutated: str | None = None) -> None:
        if self.timed and error is None:
            return
        described = None
        if error is not None:
            described = type(error).__name__
            if type(error).__name__ == "BlockingError":
                self.blocking.append(f"{plugin}.{'a' if is_async else ''}{hook}: {error}")
        record = Record(plugin, hook, is_async, plain(data, self.home), described,
                        None if error is None else str(error), mutated)
        with self.lock:
            self.records.append(record)

    def snapshot(self, request: Any) -> Any:
        """`request` as comparable data, to find a hook changing it in place (not timed)."""
        return None if self.timed else plain(request, self.home)

    def changed(self, before: Any, request: Any) -> str | None:
        """What changed in `request` since `before` (None when nothing did)."""
        if before is None:
            return None
        after = plain(request, self.home)
        return None if after == before else _first_difference(before, after)

    def fault(self, plugin: str, hook: str) -> None:
        if hook in self.faults.get(plugin, ()):
            raise ConformanceFault(f"injected into {plugin}.{hook} by the conformance battery")

    def of(self, plugin: str) -> list[Record]:
        return [record for record in self.records if record.plugin == plugin]


class _Slot:
    """Where the recorders of one built agent write: the recording of the run in progress.

    One agent serves many runs (sync, async, with faults), one at a time.
    """

    def __init__(self) -> None:
        self.recording = _Recording("")
        self.classes: dict[str, type] = {}


_ACTIVE: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar(
    "antler_conformance_slot", default=None)


def _recorded(middleware: Any, label: str, slot: _Slot) -> Any:
    from antler.runtime.tracing import hook_subclass, reclass

    cls = type(middleware)
    slot.classes[label] = cls
    sub = hook_subclass(cls, middleware.name, cls.__name__,
                        functools.partial(_record_hook, label=label, slot=slot))
    return middleware if sub is None else reclass(middleware, sub)


def _record_hook(original: Callable[..., Any], hook: str, is_async: bool, *, label: str,
                 slot: _Slot) -> Callable[..., Any]:
    if hook in _NODE_HOOKS:
        if is_async:
            async def anode(self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
                recording = slot.recording
                recording.fault(label, hook)
                try:
                    update = await original(self, state, *args, **kwargs)
                except BaseException as error:
                    recording.add(label, hook, True, None, error)
                    raise
                recording.add(label, hook, True, update)
                return update
            return anode

        def node(self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
            recording = slot.recording
            recording.fault(label, hook)
            started = time.thread_time()
            try:
                update = original(self, state, *args, **kwargs)
            except BaseException as error:
                recording.add(label, hook, False, None, error)
                raise
            recording.spent(label, hook, time.thread_time() - started)
            recording.add(label, hook, False, update)
            return update
        return node

    # A change to the request is the plugin's when seen before it hands anything on
    # (inner plugins get what it hands on) or, if it hands nothing on, when it returns.
    if is_async:
        async def awrap(self: Any, request: Any, handler: Callable[..., Any],
                        *args: Any, **kwargs: Any) -> Any:
            recording = slot.recording
            recording.fault(label, hook)
            passed: list[Any] = []
            before = recording.snapshot(request)
            mutated: list[str | None] = [None]

            async def _conformance_handler(inner: Any) -> Any:
                if not passed:
                    mutated[0] = recording.changed(before, request)
                passed.append(inner)
                return await handler(inner)
            try:
                result = await original(self, request, _conformance_handler, *args, **kwargs)
            except BaseException as error:
                recording.add(label, hook, True, {"in": request, "out": passed}, error,
                              mutated[0])
                raise
            if not passed:
                mutated[0] = recording.changed(before, request)
            recording.add(label, hook, True, {"in": request, "out": passed, "result": result},
                          mutated=mutated[0])
            return result
        return awrap

    def wrap(self: Any, request: Any, handler: Callable[..., Any], *args: Any,
             **kwargs: Any) -> Any:
        recording = slot.recording
        recording.fault(label, hook)
        passed: list[Any] = []
        below = [0.0]  # CPU seconds in the handler: not the hook's own work
        before = recording.snapshot(request)
        mutated: list[str | None] = [None]

        def _conformance_handler(inner: Any) -> Any:
            if not passed:
                mutated[0] = recording.changed(before, request)
            passed.append(inner)
            entered = time.thread_time()
            try:
                return handler(inner)
            finally:
                below[0] += time.thread_time() - entered
        started = time.thread_time()
        try:
            result = original(self, request, _conformance_handler, *args, **kwargs)
        except BaseException as error:
            recording.add(label, hook, False, {"in": request, "out": passed}, error, mutated[0])
            raise
        recording.spent(label, hook, time.thread_time() - started - below[0])
        if not passed:
            mutated[0] = recording.changed(before, request)
        recording.add(label, hook, False, {"in": request, "out": passed, "result": result},
                      mutated=mutated[0])
        return result
    return wrap


class _Retrier:
    """The battery's outermost model wrapper (after input_sanitization): retries once.

    It retries only `ConformanceTransientError`, which every other wrapper lets
    through, so every plugin's `wrap_model_call` is called again for the retry.
    """

    def __new__(cls, context: Any = None) -> Any:
        from langchain.agents.middleware import AgentMiddleware

        class ConformanceRetry(AgentMiddleware):
            """Retries a model call once after the battery's transient error."""

            def wrap_model_call(self, request: Any, handler: Any) -> Any:
                try:
                    return handler(request)
                except ConformanceTransientError:
                    return handler(request)

            async def awrap_model_call(self, request: Any, handler: Any) -> Any:
                try:
                    return await handler(request)
                except ConformanceTransientError:
                    return await handler(request)

        return ConformanceRetry()


def build_retrier(context: Any) -> Any:
    """The factory of the battery's `conformance_retry` plugin."""
    return _Retrier(context)


class _ConformanceHooks:
    """The battery's in-process entry point: its retrier's spec, and the hook that records."""

    def __init__(self) -> None:
        from antler.plugin_api.hookspecs import hookimpl

        self.antler_plugin_specs = hookimpl(self._specs)
        self.antler_chain_resolved = hookimpl(self._chain_resolved)

    def __hash__(self) -> int:
        return id(self)

    @staticmethod
    def _specs() -> list[Any]:
        from antler.plugin_api.spec import PluginSpec

        return [PluginSpec(
            name=RETRY_PLUGIN, factory=f"{__name__}:build_retrier", enabled="off",
            summary="Retries a model call once after the conformance battery's transient error",
            chains=["lead", "subagent"], hooks=["wrap_model_call"], on_error="fail",
            order={"immediately_after": "input_sanitization"})]

    @staticmethod
    def _chain_resolved(chain: Any) -> None:
        slot = _ACTIVE.get()
        if slot is None:
            return
        for entry in chain.entries:
            entry.middleware = _recorded(entry.middleware, entry.name, slot)


# -- one run of the scenario -------------------------------------------------------------


@dataclasses.dataclass
class Run:
    """What one run of the scenario produced."""

    recording: _Recording
    classes: dict[str, type]
    names: list[str]
    exclusions: dict[str, str]
    state: dict[str, Any] | None
    error: BaseException | None
    logs: list[str]

    def records(self, plugin: str) -> list[Record]:
        return self.recording.of(plugin)


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _lookup_tool() -> Any:
    from langchain_core.tools import StructuredTool

    def lookup(query: str) -> str:
        return f"{query}: a branched bone on the head of a deer"

    async def alookup(query: str) -> str:
        return lookup(query)

    return StructuredTool.from_function(
        func=lookup, coroutine=alookup, name=LOOKUP_TOOL,
        description="Look a word up in the conformance battery's dictionary.")


class _Script:
    """The model's side of the scenario: the turn is chosen by how far the conversation got.

    So one model (and one built agent) serves any number of runs, each on its own
    thread, and a run resumed in another process picks up at the right turn.
    `retry` fails every call once first (`ConformanceTransientError`); `crash_at`
    stops the run at that model call (`ConformanceCrash`).
    """

    def __init__(self, turns: Sequence[Any], *, retry: bool = False,
                 crash_at: int | None = None, since_user: bool = False) -> None:
        self.turns = list(turns)
        self.retry = retry
        self.crash_at = crash_at
        self.since_user = since_user
        """Count the turn from the latest user message (a thread with earlier turns)."""
        self.failed: set[Any] = set()
        self.lock = threading.Lock()

    def __call__(self, messages: Sequence[Any]) -> Any:
        from langchain_core.messages import AIMessage

        from antler.runtime.models import ScriptExhaustedError

        if self.since_user:
            messages = messages[_latest_user(messages) + 1:]
        index = sum(isinstance(message, AIMessage) for message in messages)
        if index == self.crash_at:
            raise ConformanceCrash("the conformance battery stopped the run here, as a crash "
                                   "would")
        if self.retry:
            # The thread's first message id tells the runs apart; a retry repeats the index.
            key = (index, next((m.id for m in messages if getattr(m, "id", None)), None))
            with self.lock:
                first = key not in self.failed
                self.failed.add(key)
            if first:
                raise ConformanceTransientError("a transient failure the conformance battery "
                                                "injected")
        if index >= len(self.turns):
            raise ScriptExhaustedError(
                f"the conformance scenario has {len(self.turns)} model turns and the agent "
                f"asked for turn {index + 1}; add turns to the class's `scenario`")
        turn = self.turns[index]
        turn = turn(messages) if callable(turn) else turn
        if isinstance(turn, Mapping) and turn.get("tool_calls"):
            # Ids fixed by position: the model serves many runs, which must look alike.
            calls = [{"id": f"call_{index}_{number}", **call}
                     for number, call in enumerate(turn["tool_calls"])]
            turn = {**turn, "tool_calls": calls}
        return turn

    def model(self) -> Any:
        from antler.runtime.models import ScriptedChatModel

        return ScriptedChatModel([self] * 1000)


def _latest_user(messages: Sequence[Any]) -> int:
    from langchain_core.messages import HumanMessage

    from antler.contracts.messages import is_hidden

    return max((i for i, m in enumerate(messages)
                if isinstance(m, HumanMessage) and not is_hidden(m)), default=-1)


def _earlier_turns(size: int) -> list[Any]:
    """About `size` messages of earlier turns: a question, a lookup call, its result, an answer."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    messages: list[Any] = []
    for turn in range(max(1, size // 4)):
        call = {"name": LOOKUP_TOOL, "args": {"query": f"word {turn}"}, "id": f"earlier-{turn}"}
        messages += [
            HumanMessage(f"Question {turn}: what does word {turn} mean?", id=f"q-{turn}"),
            AIMessage("", tool_calls=[call], id=f"c-{turn}"),
            ToolMessage(f"word {turn}: a word of the battery", tool_call_id=call["id"],
                        name=LOOKUP_TOOL, id=f"r-{turn}"),
            AIMessage(f"Word {turn} is a word of the battery.", id=f"a-{turn}")]
    return messages


@dataclasses.dataclass
class _Built:
    """One built agent a battery runs again and again, or why it did not build."""

    agent: Any
    slot: _Slot
    home: str
    error: AntlerError | None = None


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything that decides the graphs of a battery, minus how each run is wired."""

    config: str
    runtime: str
    message: str
    scenario_key: str
    registry_key: tuple[Any, ...]


class Battery:
    """The checks for one conformance class; runs are shared with equal setups."""

    _registries: ClassVar[dict[tuple[Any, ...], PluginRegistry]] = {}
    _runs: ClassVar[dict[tuple[Any, ...], Run]] = {}
    _agents: ClassVar[dict[tuple[Any, ...], _Built]] = {}
    _resumes: ClassVar[dict[tuple[Any, ...], dict[str, Any]]] = {}
    _histories: ClassVar[dict[tuple[Any, ...], dict[int, dict[tuple[str, str], float]] | str]] = {}

    def __init__(self, owner: type[PluginConformance]) -> None:
        self.owner = owner
        self.name = owner.plugin
        if not self.name:
            raise ConformanceError(f"{owner.__name__} names no plugin; set `plugin = \"...\"`")
        unknown = sorted(set(owner.skip_checks) - set(CHECKS))
        if unknown:
            from antler.plugin_api.diagnostics import did_you_mean

            hints = "".join(did_you_mean(name, CHECKS) for name in unknown)
            raise ConformanceError(f"{owner.__name__}.skip_checks names unknown checks "
                                   f"{unknown}{hints}; the checks are: {', '.join(CHECKS)}")
        self.scenario = list(owner.scenario if owner.scenario is not None else DEFAULT_SCENARIO)
        self.tools = [_lookup_tool(), *owner.tools]
        self.registry = self._registry()
        self.spec = self._spec()
        self.runtime_options = self._runtime_options()
        self.config_text = self._config_text()
        self.setup = Setup(self.config_text, repr(sorted(self.runtime_options.items())),
                           owner.message, repr(self.scenario), self.registry_key)

    # -- what the class configures ------------------------------------------------------

    @property
    def registry_key(self) -> tuple[Any, ...]:
        return (tuple(sys.path), tuple(name for name, _ in self.owner.extra_plugins))

    def _registry(self) -> PluginRegistry:
        from antler.plugin_api.registry import discover

        key = self.registry_key
        if key not in self._registries:
            extra = [*self.owner.extra_plugins, (ENTRY_POINT, _ConformanceHooks())]
            self._registries[key] = discover(extra_plugins=extra, refresh=True)
        return self._registries[key]

    def _spec(self) -> PluginSpec:
        spec = self.registry.specs.get(self.name)
        if spec is not None:
            return spec
        problems = [str(d) for d in self.registry.diagnostics
                    if d.plugin == self.name or self.name in d.cause]
        from antler.plugin_api.diagnostics import did_you_mean

        detail = "\n  ".join(problems) or (
            f"no installed plugin is named {self.name!r}"
            f"{did_you_mean(self.name, self.registry.specs)}; install its distribution "
            "(pip install -e .) so its `antler.plugins` entry point is found")
        raise ConformanceFailure("manifest", f"  {detail}")

    def _runtime_options(self) -> dict[str, Any]:
        options: dict[str, Any] = dict.fromkeys(_RUNTIME_FLAGS, True)
        conditions: dict[str, bool] = {}
        for condition, wanted in self.spec.when.items():
            if condition in _RUNTIME_FLAGS:
                options[condition] = wanted
            else:
                conditions[condition] = wanted
        options.update(self.owner.runtime)
        if conditions:
            options["conditions"] = {**conditions, **dict(options.get("conditions") or {})}
        return options

    def runtime(self, chain: str) -> RuntimeOptions:
        from antler.plugin_api.context import RuntimeOptions

        options = dict(self.runtime_options)
        if chain == "subagent":
            options["subagents_enabled"] = False
        return RuntimeOptions(**options)

    def _config_text(self) -> str:
        import yaml

        sections: dict[str, Any] = {key: dict(value) for key, value in
                                    self.owner.operator_config.items()}
        for chain in self.spec.chains:
            section = self.spec.section_for(chain)
            body = {**dict(self.owner.config), **sections.get(section, {})}
            if self.spec.enabled_for(chain) == "off":
                body.setdefault("enabled", True)
            if body:
                sections[section] = body
        return yaml.safe_dump(sections, sort_keys=True) if sections else ""

    def chains(self) -> list[str]:
        return [chain for chain in ("lead", "subagent") if chain in self.spec.chains]

    @property
    def primary(self) -> str:
        """The chain the single-chain checks run in: lead, unless the plugin is subagent-only."""
        return self.chains()[0]

    # -- running the scenario -----------------------------------------------------------------

    def operator_config(self, extra: str = "") -> Any:
        from antler.chain.config import parse_config

        text = self.config_text + extra
        return parse_config(text, self.registry, f"<{self.owner.__name__} config>")

    def create(self, slot: _Slot, home: str, *, chain: str | None = None,
               mode: str = DEFAULT_MODE,
               script: _Script | None = None, retry: bool = False,
               checkpointer: Any = "memory") -> Any:
        """A real agent of the installed plugins, its hooks recorded into `slot`."""
        from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL
        from antler.runtime.agent import create_agent
        from antler.runtime.models import ScriptedChatModel

        chain = chain or self.primary
        config = self.operator_config(f"{RETRY_PLUGIN}: {{enabled: true}}\n" if retry else "")
        script = script or _Script(self.scenario, retry=retry)
        services = {TITLE_MODEL: ScriptedChatModel(["A conformance title"] * 1000),
                    MEMORY_MODEL: ScriptedChatModel(["{}"] * 1000)}
        token = _ACTIVE.set(slot)
        try:
            return create_agent(config, chain=chain, model=script.model(), tools=self.tools,
                                checkpointer=checkpointer, runtime=self.runtime(chain),
                                services=services, registry=self.registry, base_dir=home,
                                fuse=MODES[mode]["fuse"],
                                fuse_into_model=MODES[mode]["fuse_into_model"])
        finally:
            _ACTIVE.reset(token)

    def built(self, chain: str, mode: str, retry: bool) -> _Built:
        """The agent for these settings, built once per setup and kept for the session."""
        key = (self.setup, chain, mode, retry)
        if key not in self._agents:
            home = os.path.realpath(tempfile.mkdtemp(prefix="antler-conformance-"))
            slot = _Slot()
            try:
                agent = self.create(slot, home, chain=chain, mode=mode, retry=retry)
            except AntlerError as exc:  # the chain does not build: every check says why
                self._agents[key] = _Built(None, slot, home, exc)
            else:
                self._agents[key] = _Built(agent, slot, home)
            _close_at_exit()
        return self._agents[key]

    def run(self, *, chain: str | None = None, mode: str = DEFAULT_MODE,
            use_async: bool = False, retry: bool = False,
            faults: Mapping[str, set[str]] | None = None, scan: Sequence[str] = ()) -> Run:
        """One run of the scenario on its own thread; fault-free runs are shared.

        `chain` defaults to the plugin's primary chain.
        """
        chain = chain or self.primary
        key = (self.setup, chain, mode, use_async, retry)
        shared = not faults and not scan
        if shared and key in self._runs:
            return self._runs[key]
        built = self.built(chain, mode, retry)
        recording = _Recording(built.home, {k: set(v) for k, v in (faults or {}).items()})
        if built.error is not None:
            return Run(recording, {}, [self.name], {}, None, built.error, [])
        built.slot.recording = recording
        capture = _LogCapture()
        audit = logging.getLogger("antler.audit.isolation")
        audit.addHandler(capture)
        state: dict[str, Any] | None = None
        error: BaseException | None = None
        try:
            state = self._invoke(built.agent, str(uuid.uuid4()), use_async, scan)
        except Exception as caught:
            error = caught
        finally:
            audit.removeHandler(capture)
            built.slot.recording = _Recording("")
        chain_built = built.agent.chain
        result = Run(recording, dict(built.slot.classes), chain_built.names,
                     {name: why.reason for name, why in chain_built.plan.excluded.items()},
                     state, error, capture.lines)
        if shared:
            self._runs[key] = result
        return result

    def _invoke(self, agent: Any, thread: str, use_async: bool,
                scan: Sequence[str] = ()) -> dict[str, Any]:
        message = self.owner.message
        run_id = str(uuid.uuid4())
        if not use_async:
            return dict(agent.invoke(message, thread_id=thread, run_id=run_id))

        async def go() -> dict[str, Any]:
            with _blockbuster(scan):
                return dict(await agent.graph.ainvoke(
                    agent.input(message), config=agent.run_config(thread),
                    context=agent.context(thread, run_id=run_id)))

        return asyncio.run(go())

    # -- the checks -------------------------------------------------------------------------

    def fail(self, check: str, detail: str) -> None:
        __tracebackhide__ = True
        raise ConformanceFailure(check, detail)

    def checked_run(self, check: str, **kwargs: Any) -> Run:
        """A run that must include the plugin and end without an error."""
        __tracebackhide__ = True
        run = self.run(**kwargs)
        chain, mode = kwargs.get("chain") or self.primary, kwargs.get("mode", DEFAULT_MODE)
        where = f"{chain} chain, {mode}, {'async' if kwargs.get('use_async') else 'sync'}"
        if _is_ownership_conflict(run.error) and check != "state_keys":
            pytest.skip("the chain does not build because of a state-key conflict, which the "
                        "state_keys check reports")
        if self.name not in run.names:
            why = run.exclusions.get(self.name, "it is not in the chain")
            self.fail(check, f"  {self.name!r} did not take part in the {where} run: {why}")
        if run.error is not None:
            self.fail(check, f"  the {where} run failed: {type(run.error).__name__}: "
                             f"{run.error}")
        return run

    def middleware_class(self) -> type:
        run = self.checked_run("manifest")
        return run.classes[self.name]

    def check_manifest(self) -> None:
        from antler.chain.build import implemented_hooks

        spec = self.spec
        problems = [str(d) for d in self.registry.diagnostics
                    if d.plugin == self.name or d.entry_point == spec.provenance.entry_point]
        if problems:
            self.fail("manifest", "  " + "\n  ".join(problems))
        cls = self.middleware_class()
        implemented = implemented_hooks(cls)
        if spec.hooks is None:
            self.fail("manifest", f"  {self.name!r} [{spec.provenance}] declares no `hooks:`; "
                                  f"its class {cls.__qualname__} implements {implemented}: "
                                  f"add `hooks: {implemented}` to its manifest entry")
        declared = list(spec.hooks or [])
        if sorted(declared) != sorted(implemented):
            extra = sorted(set(declared) - set(implemented))
            missing = sorted(set(implemented) - set(declared))
            parts = []
            if extra:
                parts.append(f"declared but not implemented: {extra}")
            if missing:
                parts.append(f"implemented but not declared: {missing}")
            self.fail("manifest", f"  {self.name!r} [{spec.provenance}] declares hooks "
                                  f"{declared}, its class {cls.__qualname__} implements "
                                  f"{implemented} ({'; '.join(parts)}); make `hooks:` list "
                                  "exactly what the class implements")

    def check_config_schema(self) -> None:
        from pydantic import ValidationError

        from antler.chain.config import config_schema, section_model
        from antler.errors import ConfigError

        spec = self.spec
        try:
            model = section_model(spec)
        except ConfigError as exc:
            self.fail("config_schema", f"  {exc}")
        try:
            schema = json.dumps(model.model_json_schema())
        except Exception as exc:
            self.fail("config_schema", f"  {spec.config_model}: model_json_schema() raised "
                                       f"{type(exc).__name__}: {exc}; use field types pydantic "
                                       "can describe")
        try:
            defaults = model()
            model.model_validate(defaults.model_dump(mode="json"))
        except ValidationError as exc:
            self.fail("config_schema", f"  the defaults of {spec.config_model} do not "
                                       f"validate: {exc}\n  give every field a valid default")
        properties = config_schema(self.registry).get("properties", {})
        missing = [section for section in spec.sections() if section not in properties]
        if missing:
            self.fail("config_schema", f"  the operator config schema has no section "
                                       f"{missing} for {self.name!r} (schema of "
                                       f"{len(schema)} characters)")
        try:
            self.operator_config()
        except ConfigError as exc:
            self.fail("config_schema", f"  the class's `config` does not validate: {exc}")

    def _compare(self, check: str, runs: Mapping[str, Run], what: str) -> None:
        __tracebackhide__ = True
        (first_label, first), *others = runs.items()
        base = [record.key() for record in first.records(self.name)]
        base_state = self.own_state(first)
        for label, run in others:
            seen = [record.key() for record in run.records(self.name)]
            if seen != base:
                self.fail(check, f"  {what}: its hooks did different things {first_label} and "
                                 f"{label}:\n{_first_difference(base, seen)}")
            state = self.own_state(run)
            if state != base_state:
                self.fail(check, f"  {what}: its state differs {first_label} and {label}:\n"
                                 f"    {first_label}: {base_state}\n    {label}: {state}")

    def own_state(self, run: Run) -> dict[str, Any]:
        """The plugin's own state keys at the end of `run`, each normalized on its own."""
        keys = own_state_keys(run.classes.get(self.name))
        return {key: plain(value, run.recording.home)
                for key, value in (run.state or {}).items() if key in keys}

    def check_hooks_run(self) -> None:
        for chain in self.chains():
            for use_async in (False, True):
                run = self.run(chain=chain, use_async=use_async)
                where = f"{chain} chain, {'async' if use_async else 'sync'}"
                raised = self._own_failures(run)
                if raised:
                    self.fail("hooks_run", f"  the hooks of {self.name!r} raised in the standard "
                              f"scenario ({where}):\n    " + "\n    ".join(raised)
                              + "\n  a hook that raises is "
                              "skipped under `on_error: skip` (the run goes on without it) "
                              "or stops the run under `fail`; fix the hook")
                self.checked_run("hooks_run", chain=chain, use_async=use_async)

    def _own_failures(self, run: Run) -> list[str]:
        """What the plugin's hooks raised in `run` (the battery's injected faults aside)."""
        return list(dict.fromkeys(
            f"{'a' if r.is_async else ''}{r.hook} raised {r.error}: {r.message}"
            for r in run.records(self.name) if r.error is not None and r.error not in _INJECTED))

    def _skip_if_hooks_raise(self, check: str) -> None:
        """A check that compares what the hooks did says nothing of hooks that raise (or of
        a chain that does not build for a state-key conflict)."""
        run = self.run()
        if _is_ownership_conflict(run.error):
            pytest.skip("the chain does not build because of a state-key conflict, which the "
                        "state_keys check reports")
        if self._own_failures(run):
            pytest.skip(f"{check}: the plugin's hooks raise on the standard scenario, which the "
                        "hooks_run check reports")

    def check_request_mutation(self) -> None:
        for chain in self.chains():
            for use_async in (False, True):
                run = self.run(chain=chain, use_async=use_async)
                for record in run.records(self.name):
                    if record.mutated:
                        self.fail("request_mutation", f"  the "
                                  f"{'a' if record.is_async else ''}{record.hook} of "
                                  f"{self.name!r} changed the request it was given in place "
                                  f"({chain} chain):\n"
                                  f"{record.mutated}\n  the request is shared with the plugins "
                                  "around it and with retries: hand on "
                                  "`request.override(...)` instead")

    def check_state_writes(self) -> None:
        from antler.chain.stateowners import claim, describe_refusal, refused_keys

        cls = self.middleware_class()
        writable = claim(self.name, self.spec, cls).writable
        for chain in self.chains():
            for use_async in (False, True):
                run = self.run(chain=chain, use_async=use_async)
                owners = {}
                if run.error is None and self.name in run.names:
                    owners = self._owners(chain)
                for record in run.records(self.name):
                    if record.hook not in _NODE_HOOKS or record.error is not None:
                        continue
                    update = record.data
                    if isinstance(update, dict) and set(update) == _COMMAND_FIELDS:
                        update = update["update"]
                    refused = refused_keys(update, writable)
                    if refused:
                        hook = f"{'a' if record.is_async else ''}{record.hook}"
                        self.fail("state_writes", "  " + describe_refusal(
                            self.name, hook, refused, owners) + f" ({chain} chain)\n  "
                            "declare a key of its own (namespaced, in its state_schema or "
                            "under `state: {owns: [...]}`), or leave the other plugin's key "
                            "to it")
                error = run.error
                if getattr(error, "keys", None) and getattr(error, "plugin", "") == self.name:
                    self.fail("state_writes", f"  {error}")

    def _owners(self, chain: str) -> dict[str, list[str]]:
        built = self.built(chain, DEFAULT_MODE, False)
        return dict(built.agent.chain.state_owners) if built.agent is not None else {}

    def check_sync_async(self) -> None:
        cls = self.middleware_class()
        from antler.chain.build import implemented_hooks

        lonely = []
        from langchain.agents.middleware import AgentMiddleware

        for hook in implemented_hooks(cls):
            for variant in (hook, "a" + hook):
                if getattr(cls, variant) is getattr(AgentMiddleware, variant):
                    lonely.append(variant)
        if lonely:
            self.fail("sync_async", f"  {cls.__qualname__} lacks {lonely}: agents run with "
                                    "invoke and ainvoke, so implement both forms (share a "
                                    "private helper between them)")
        for chain in self.chains():
            for mode in MODES:
                runs = {f"with invoke ({chain}, {mode})":
                        self.checked_run("sync_async", chain=chain, mode=mode),
                        f"with ainvoke ({chain}, {mode})":
                        self.checked_run("sync_async", chain=chain, mode=mode, use_async=True)}
                self._compare("sync_async", runs, "sync and async forms differ")
                self._require_activity("sync_async", runs)

    def _require_activity(self, check: str, runs: Mapping[str, Run]) -> None:
        run = next(iter(runs.values()))
        if not run.records(self.name):
            self.fail(check, f"  none of {self.name!r}'s hooks ran in the scenario, so "
                             "nothing could be compared; give the class a `scenario` "
                             "(and `tools`) that makes them run")

    def check_chains(self) -> None:
        for chain in self.chains():
            for use_async in (False, True):
                runs = {f"{mode} ({chain}, {'async' if use_async else 'sync'})":
                        self.checked_run("chains", chain=chain, mode=mode, use_async=use_async)
                        for mode in MODES}
                self._compare("chains", runs, "fused and unfused graphs differ")

    def check_non_blocking(self) -> None:
        try:
            import blockbuster  # noqa: F401
        except ImportError:
            self.fail("non_blocking", "  the blocking-call detector `blockbuster` is not "
                                      "installed: `pip install 'antler[test]'` (or skip the "
                                      "check by name, with the reason)")
        scan = _plugin_packages(self.spec, self.middleware_class())
        for chain in self.chains():
            run = self.run(chain=chain, use_async=True, scan=scan)
            found = list(run.recording.blocking)
            for message in (run.state or {}).get("messages", []):
                text = str(getattr(message, "content", ""))
                if "Blocking call to" in text:
                    found.append(f"a tool result: {text[:200]}")
            if run.error is not None and "Blocking call to" in _causes(run.error):
                found.append(_causes(run.error))
            if found:
                self.fail("non_blocking", f"  blocking calls inside {self.name!r}'s async code "
                                          f"({chain} chain, scanned {scan}):\n    "
                                          + "\n    ".join(found)
                                          + "\n  use the async API of what it calls, or "
                                          "`await asyncio.to_thread(...)`")
            if run.error is not None:
                self.fail("non_blocking", f"  the async run failed: "
                                          f"{type(run.error).__name__}: {run.error}")

    def check_retry_injection(self) -> None:
        self._skip_if_hooks_raise("retry_injection")
        for use_async in (False, True):
            run = self.checked_run("retry_injection", retry=True, use_async=use_async)
            clean = self.checked_run("retry_injection", use_async=use_async)
            calls = [r for r in run.records(self.name) if r.hook == "wrap_model_call"]
            if not calls:
                continue  # no model wrapper: what it adds lives in state, which a retry keeps
            if RETRY_PLUGIN not in run.names:
                self.fail("retry_injection", "  the battery's retrier could not join the chain: "
                          f"{run.exclusions.get(RETRY_PLUGIN)}")
            if run.names.index(self.name) < run.names.index(RETRY_PLUGIN):
                continue  # it encloses the retrier: nothing it wraps is ever retried
            index = 0
            while index < len(calls):
                failed = calls[index]
                if failed.error != ConformanceTransientError.__name__:
                    index += 1
                    continue
                if index + 1 >= len(calls):
                    self.fail("retry_injection", "  the retried call never reached "
                                                 f"{self.name!r}'s wrap_model_call again")
                retried = calls[index + 1]
                if failed.data["in"] == retried.data["in"] and \
                        failed.data["out"] != retried.data["out"]:
                    self.fail("retry_injection", "  the first attempt and the retry got the "
                              "same request but the plugin handed on different ones; peek "
                              "before calling the handler and commit after it returned "
                              "(`call_then_commit`, `PendingQueue.deliver`):\n"
                              + _first_difference(failed.data["out"], retried.data["out"]))
                index += 2
            for record in calls:  # a wrapper that retries on its own hands on one request
                if any(out != record.data["out"][0] for out in record.data["out"]):
                    self.fail("retry_injection", "  its own retries handed on different "
                              "requests:\n" + _first_difference(record.data["out"][0],
                                                                 record.data["out"][-1]))
            clean_out = [r.data["out"][-1:] for r in clean.records(self.name)
                         if r.hook == "wrap_model_call"]
            retried_out = [r.data["out"][-1:] for r in calls if r.error is None]
            if clean_out != retried_out:
                self.fail("retry_injection", "  with a retry the plugin handed on other requests "
                          "than without one:\n" + _first_difference(clean_out, retried_out))

    def check_state_keys(self) -> None:
        built = self.built(self.primary, DEFAULT_MODE, False)
        if _is_ownership_conflict(built.error):
            self.fail("state_keys", f"  the chain does not build: {built.error}")
        cls = self.middleware_class()
        keys = own_state_keys(cls)
        spec = self.spec
        prefixes = [spec.name]
        distribution = spec.provenance.distribution
        if distribution and not distribution.startswith("<"):
            prefixes.append(re.sub(r"[-.]+", "_", distribution).lower())
        origins = _key_origins(getattr(cls, "state_schema", None))
        problems = []
        for key in sorted(keys):
            private = _is_private(cls, key)
            namespaced = any(key == p or key.startswith(p + "_") for p in prefixes)
            contract = origins.get(key, object).__module__.startswith("antler.contracts")
            if not (private or namespaced or contract):
                problems.append(f"state key {key!r} is neither private (annotate it with "
                                f"PrivateStateAttr) nor namespaced (start it with "
                                f"{' or '.join(repr(p + '_') for p in prefixes)})")
        for key, (owner, origin) in builtin_state_keys().items():
            if key in keys and owner != self.name and origins.get(key) is not origin:
                problems.append(f"state key {key!r} is also declared by the built-in plugin "
                                f"{owner!r} ({origin.__module__}.{origin.__qualname__}); "
                                "rename it, or take it from the same contract schema")
        if problems:
            self.fail("state_keys", "  " + "\n  ".join(problems))

    def check_on_error(self) -> None:
        from antler.chain.policy import error_policy
        from antler.errors import PluginHookError

        clean = self.checked_run("on_error")
        hooks = list(dict.fromkeys(record.hook for record in clean.records(self.name)))
        if not hooks:
            self._require_activity("on_error", {"clean": clean})
        policy = error_policy(self.spec, self.operator_config().plugin_settings)
        if policy == "skip":
            run = self.run(faults={self.name: set(hooks)})
            if run.error is not None:
                self.fail("on_error", f"  policy skip: the run should go on without "
                                      f"{self.name!r}'s failing hooks {hooks}, but it failed: "
                                      f"{type(run.error).__name__}: {run.error}")
            for hook in hooks:
                if not any(f"plugin {self.name!r} failed in {hook}" in line
                           for line in run.logs):
                    self.fail("on_error", f"  policy skip: no warning on the "
                                          f"antler.audit.isolation logger names "
                                          f"{self.name!r} and {hook}; logged: {run.logs}")
            return
        for hook in hooks:
            run = self.run(faults={self.name: {hook}})
            error = run.error
            if not (isinstance(error, PluginHookError) and error.plugin == self.name
                    and error.hook == hook):
                got = "it went on" if error is None else f"{type(error).__name__}: {error}"
                self.fail("on_error", f"  policy fail: a {hook} that raises should stop the "
                                      f"run with PluginHookError naming {self.name!r} and "
                                      f"{hook}; {got}")

    def check_resume(self) -> None:
        clean = self.checked_run("resume")
        result = self.resumed()
        if result.get("error"):
            self.fail("resume", f"  resuming in a new process failed: {result['error']}")
        if self.name not in result["names"]:
            self.fail("resume", f"  {self.name!r} is not in the chain the new process built")
        resumed = [tuple(item) for item in result["records"].get(self.name, [])]
        expected = [tuple(_json(list(record.key()))) for record in clean.records(self.name)]
        tail = expected[len(expected) - len(resumed):] if resumed else []
        if resumed != tail:
            self.fail("resume", "  after the resume its hooks did other things than in a run "
                                "that never stopped (state it kept in memory is gone in a new "
                                "process: keep it in the graph state):\n"
                      + _first_difference(tail, resumed))
        keys = own_state_keys(clean.classes.get(self.name))
        state = {key: value for key, value in result["state"].items() if key in keys}
        if state != _json(self.own_state(clean)):
            self.fail("resume", f"  its state after the resume differs:\n    without a stop: "
                                f"{self.own_state(clean)}\n    resumed: {state}")

    def resumed(self) -> dict[str, Any]:
        """Stop a run at its second model call here, resume it in the worker process.

        Shared by every class with this setup: the worker reports every plugin's hooks.
        """
        key = (self.setup, self.primary)
        if key in self._resumes:
            return self._resumes[key]
        thread = str(uuid.uuid4())
        with tempfile.TemporaryDirectory(prefix="antler-conformance-resume-") as home:
            home = os.path.realpath(home)
            agent = self.create(_Slot(), home, checkpointer="sqlite",
                                script=_Script(self.scenario, crash_at=1))
            try:
                agent.invoke(self.owner.message, thread_id=thread, run_id=thread)
            except ConformanceCrash:
                result = _worker().resume(self.owner, home, thread)
            except Exception as exc:
                result = {"error": f"the run to be resumed failed before it was stopped: "
                                   f"{type(exc).__name__}: {exc}"}
            else:
                result = {"error": "the run never reached a second model call, so there was "
                                   "nothing to resume; give a scenario whose first turn calls "
                                   "a tool"}
            finally:
                agent.close()
        self._resumes[key] = result
        return result

    def resume_here(self, home: str, thread: str) -> dict[str, Any]:
        """Resume the stopped run saved under `home` (in the worker process)."""
        slot = _Slot()
        slot.recording = _Recording(home)
        agent = self.create(slot, home, checkpointer="sqlite")
        try:
            with agent.hold(thread):
                state = agent.graph.invoke(None, config=agent.run_config(thread),
                                           context=agent.context(thread, run_id=thread))
            names = agent.chain.names
        finally:
            agent.close()
        records: dict[str, list[Any]] = {}
        for record in slot.recording.records:
            records.setdefault(record.plugin, []).append(list(record.key()))
        own = {key: plain(value, home) for key, value in dict(state).items()
               if key not in _base_state_keys()}
        return _json({"names": names, "records": records, "state": own})

    def check_history_work(self) -> None:
        self._skip_if_hooks_raise("history_work")
        timings = self.history_timings()
        if isinstance(timings, str):
            self.fail("history_work", f"  {timings}")
            return
        short, long = HISTORY_LENGTHS
        hooks = sorted({hook for times in timings.values() for plugin, hook in times
                        if plugin == self.name})
        if not hooks:
            self.fail("history_work", f"  none of {self.name!r}'s hooks ran in a turn on a "
                                      "thread with earlier turns; give the class a `scenario` "
                                      "that makes them run, or skip the check by name")
        grown = []
        for hook in hooks:
            before = timings[short].get((self.name, hook), 0.0)
            after = timings[long].get((self.name, hook), 0.0)
            if after - before > HISTORY_NOISE_MS and after > HISTORY_RATIO * before:
                grown.append(f"{hook}: {before:.3f} ms per turn with {short} earlier messages, "
                             f"{after:.3f} ms with {long}")
        if grown:
            self.fail("history_work", "  its work grows with the thread (medians of "
                      f"{HISTORY_TURNS} turns, CPU time of the hook itself):\n    "
                      + "\n    ".join(grown) + "\n  keep what a pass over the history finds "
                      "per thread or per message id, so a call looks only at the messages "
                      "added since the previous one: `antler.plugin_api.HistoryFold` folds "
                      "a value over the history, `antler.plugin_api.MessageMemo` keeps a "
                      "result per message")

    def history_timings(self) -> dict[int, dict[tuple[str, str], float]] | str:
        """Per history length: each (plugin, hook)'s median CPU ms per turn, or what failed.

        Shared by every class with this setup: each plugin's hooks are timed.
        """
        key = (self.setup, self.primary)
        if key not in self._histories:
            self._histories[key] = self._time_histories()
        return self._histories[key]

    def _time_histories(self) -> dict[int, dict[tuple[str, str], float]] | str:
        import statistics

        result: dict[int, dict[tuple[str, str], float]] = {}
        for length in HISTORY_LENGTHS:
            turns: list[dict[tuple[str, str], float]] = []
            with tempfile.TemporaryDirectory(prefix="antler-conformance-history-") as home:
                home = os.path.realpath(home)
                slot = _Slot()
                try:
                    agent = self.create(slot, home, script=_Script(self.scenario,
                                                                   since_user=True))
                except AntlerError as exc:
                    return f"the chain does not build: {exc}"
                thread = str(uuid.uuid4())
                try:
                    agent.graph.update_state(agent.run_config(thread),
                                             {"messages": _earlier_turns(length)},
                                             as_node="model")
                    for turn in range(HISTORY_TURNS + 1):  # the first one is not timed
                        slot.recording = _Recording(home, timed=True)
                        agent.invoke(self.owner.message, thread_id=thread,
                                     run_id=str(uuid.uuid4()))
                        if turn:
                            turns.append(slot.recording.cpu)
                except Exception as exc:
                    return (f"a turn on a thread of {length} earlier messages failed: "
                            f"{type(exc).__name__}: {exc}")
                finally:
                    slot.recording = _Recording("")
                    agent.close()
            hooks = set().union(*turns)
            result[length] = {hook: statistics.median(t.get(hook, 0.0) for t in turns) * 1000
                              for hook in hooks}
        return result

    def check(self, name: str) -> None:
        __tracebackhide__ = True
        reason = self.owner.skip_checks.get(name)
        if reason is not None:
            pytest.skip(f"{name} skipped by {self.owner.__name__}: {reason}")
        getattr(self, f"check_{name}")()


_INJECTED = frozenset({"ConformanceFault", "ConformanceTransientError", "ConformanceCrash",
                       "GraphInterrupt", "BlockingError"})
"""Exceptions the battery injects (or LangGraph's interrupt): not a hook's own failure."""
_COMMAND_FIELDS = frozenset({"goto", "update", "resume", "graph"})
"""The fields of a normalized `Command` (`_Plain._Command`)."""


def _is_ownership_conflict(error: BaseException | None) -> bool:
    from antler.errors import StateOwnershipError

    return isinstance(error, StateOwnershipError)


def _json(value: Any) -> Any:
    """`value` as it comes back through JSON (tuples become lists)."""
    return json.loads(json.dumps(value, default=str))


def _causes(error: BaseException) -> str:
    parts = []
    seen: BaseException | None = error
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)


def _first_difference(one: Any, other: Any) -> str:
    """Where two normalized values first differ, and the two sides there."""
    path, a, b = _diff(_json(one), _json(other), "")
    return f"    at {path or 'the top'}:\n    one:   {_short(a)}\n    other: {_short(b)}"


def _diff(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key, _MISSING) != b.get(key, _MISSING):
                if key not in a or key not in b:
                    return f"{path}.{key}", a.get(key, "(absent)"), b.get(key, "(absent)")
                return _diff(a[key], b[key], f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list):
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return _diff(x, y, f"{path}[{index}]")
        if len(a) != len(b):
            return f"{path}[{min(len(a), len(b))}:]", a[len(b):], b[len(a):]
    return path, a, b


_MISSING = object()


def _short(value: Any, limit: int = 1500) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "..."


# -- state keys ----------------------------------------------------------------------------


def _base_state_keys() -> set[str]:
    from langchain.agents.middleware import AgentState

    return set(AgentState.__annotations__)


def own_state_keys(cls: type | None) -> set[str]:
    """The state keys a middleware class adds to the agent's (LangChain's excluded)."""
    schema = getattr(cls, "state_schema", None)
    if schema is None:
        return set()
    return set(getattr(schema, "__annotations__", {})) - _base_state_keys()


def _key_origins(schema: Any) -> dict[str, type]:
    """Each key of a TypedDict state schema -> the class whose own body declares it."""
    from antler.chain.stateowners import key_origins

    return key_origins(schema)


def _is_private(cls: type, key: str) -> bool:
    import typing

    from langchain.agents.middleware.types import OmitFromSchema

    try:
        hints = typing.get_type_hints(getattr(cls, "state_schema", None),
                                      include_extras=True)
    except Exception:  # an annotation that does not resolve: not provably private
        return False
    found: list[Any] = []

    def walk(hint: Any) -> None:
        for arg in getattr(hint, "__metadata__", ()):
            found.append(arg)
        for arg in typing.get_args(hint):
            walk(arg)
    walk(hints.get(key))
    return any(isinstance(item, OmitFromSchema) and item.input and item.output
               for item in found)


@functools.cache
def builtin_state_keys() -> dict[str, tuple[str, type]]:
    """Every state key Antler's own plugins declare -> (plugin, the class declaring it).

    Read from the chains of `examples/all-optional.yaml` (every optional built-in
    on), lead and subagent, with every runtime condition true.
    """
    from importlib import resources

    from antler.chain.config import parse_config
    from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
    from antler.plugin_api.registry import BUILTIN_DISTRIBUTION, discover
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    registry = discover()
    text = resources.files("antler").joinpath("examples/all-optional.yaml").read_text()
    config = parse_config(text, registry, "all-optional.yaml")
    keys: dict[str, tuple[str, type]] = {}
    for chain in ("lead", "subagent"):
        runtime = RuntimeOptions(plan_mode=True, supports_vision=True,
                                 subagents_enabled=chain == "lead")
        with tempfile.TemporaryDirectory() as home:
            agent = create_agent(config, chain=chain, model=ScriptedChatModel(["-"]),
                                 checkpointer=None, runtime=runtime, registry=registry,
                                 base_dir=home, services={TITLE_MODEL: ScriptedChatModel([]),
                                                          MEMORY_MODEL: ScriptedChatModel([])})
            try:
                for entry in agent.chain.entries:
                    source = registry.sources.get(entry.name)
                    if source is None or source.distribution != BUILTIN_DISTRIBUTION:
                        continue
                    schema = getattr(type(entry.middleware), "state_schema", None)
                    origins = _key_origins(schema)
                    for key in own_state_keys(type(entry.middleware)):
                        keys.setdefault(key, (entry.name, origins[key]))
            finally:
                agent.close()
    return keys


# -- blocking calls ------------------------------------------------------------------------


def _plugin_packages(spec: PluginSpec, cls: type) -> list[str]:
    """The packages whose code counts as the plugin's: its factory's and its class's."""
    factory = spec.factory.split(":")[0]
    package = getattr(sys.modules.get(factory), "__package__", None) or factory
    return sorted({package, cls.__module__})


@contextlib.contextmanager
def _blockbuster(scan: Sequence[str]) -> Iterator[None]:
    """Blocking calls made from `scan`'s code on the event loop raise `BlockingError`.

    Calls made below a recorded wrap hook's handler (inner plugins, the model,
    a tool) are let through: they are not the wrapping plugin's.
    """
    if not scan:
        yield
        return
    from blockbuster import BlockBuster

    buster = BlockBuster(list(scan))
    this_file = os.path.basename(__file__)
    for function in buster.functions.values():
        function.can_block_in(f"testing/{this_file}", {_HANDLER})
    buster.activate()
    try:
        yield
    finally:
        buster.deactivate()


def _close_at_exit() -> None:
    """Close every agent the batteries built (sandboxes, memory queues) when Python exits."""
    if not _CLOSER:
        import atexit

        _CLOSER.append(atexit.register(_close_agents))


_CLOSER: list[Any] = []


def _close_agents() -> None:
    import shutil

    for built in Battery._agents.values():
        if built.agent is not None:
            with contextlib.suppress(Exception):
                built.agent.close()
        shutil.rmtree(built.home, ignore_errors=True)
    Battery._agents.clear()


# -- the worker process that resumes runs ----------------------------------------------------


class _Worker:
    """A Python process, started once per session, that resumes stopped runs.

    It never ran the first half of any run it resumes: everything a plugin
    keeps in memory is gone, as after a crash and a restart.
    """

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from antler.testing.conformance import _serve; _serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env)
        self.lock = threading.Lock()

    def resume(self, owner: type, home: str, thread: str) -> dict[str, Any]:
        job = {"class": f"{owner.__module__}:{owner.__qualname__}", "home": home,
               "thread": thread, "sys_path": list(sys.path)}
        process = self.process
        assert process.stdin is not None and process.stdout is not None
        with self.lock:
            process.stdin.write(json.dumps(job) + "\n")
            process.stdin.flush()
            for line in process.stdout:
                if line.startswith(_WORKER_MARK):
                    return dict(json.loads(line[len(_WORKER_MARK):]))
        return {"error": f"the worker process ended (exit code {process.wait()})"}

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


@functools.cache
def _worker() -> _Worker:
    import atexit

    worker = _Worker()
    atexit.register(worker.close)
    return worker


def _serve() -> None:
    """The worker's loop: one JSON job per line in, one marked JSON result per line out."""
    import importlib
    import traceback

    out = sys.stdout
    sys.stdout = sys.stderr  # what plugins print must not mix with the results
    for line in sys.stdin:
        try:
            job = json.loads(line)
            for entry in reversed(job["sys_path"]):
                if entry not in sys.path:
                    sys.path.insert(0, entry)
            module, _, qualname = job["class"].partition(":")
            owner: Any = importlib.import_module(module)
            for part in qualname.split("."):
                owner = getattr(owner, part)
            result = owner.battery().resume_here(job["home"], job["thread"])
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            if "<locals>" in line:
                detail += "; define the conformance class at module level so it can be imported"
            result = {"error": detail}
        out.write(_WORKER_MARK + json.dumps(result, default=str) + "\n")
        out.flush()


# -- the pytest base class -------------------------------------------------------------------


class PluginConformance:
    """Subclass it, naming your plugin, to run Antler's conformance battery against it.

    See this module's docstring for what a subclass may set. Each `test_*`
    method is one check of `CHECKS`.
    """

    plugin: ClassVar[str] = ""
    config: ClassVar[Mapping[str, Any]] = {}
    operator_config: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    scenario: ClassVar[Sequence[Any] | None] = None
    tools: ClassVar[Sequence[Any]] = ()
    message: ClassVar[str] = DEFAULT_MESSAGE
    runtime: ClassVar[Mapping[str, Any]] = {}
    extra_plugins: ClassVar[Sequence[tuple[str, Any]]] = ()
    skip_checks: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def battery(cls) -> Battery:
        """This class's battery (built once per class and `sys.path`)."""
        key = tuple(sys.path)
        cached = cls.__dict__.get("_antler_battery")
        if cached is None or cached[0] != key:
            cached = (key, Battery(cls))
            cls._antler_battery = cached  # type: ignore[attr-defined]
        return cached[1]

    def _check(self, name: str) -> None:
        __tracebackhide__ = True
        try:
            type(self).battery().check(name)
        except ConformanceFailure as failure:
            message = str(failure)
        else:
            return
        pytest.fail(message, pytrace=False)  # the rule and what differed say it all


def _test_method(check: str) -> Callable[[PluginConformance], None]:
    def test(self: PluginConformance) -> None:
        __tracebackhide__ = True
        self._check(check)

    test.__name__ = test.__qualname__ = f"test_{check}"
    test.__doc__ = f"Rule: {CHECKS[check].title} ({CHECKS[check].link})."
    return test


for _check in CHECKS:  # one test per check, named after it (`test_non_blocking`, ...)
    setattr(PluginConformance, f"test_{_check}", _test_method(_check))


def run_conformance(cls: type[PluginConformance], checks: Sequence[str] = tuple(CHECKS),
                    ) -> dict[str, tuple[str, str]]:
    """Each check's (outcome, message) for `cls`: "passed", "failed" or "skipped"."""
    outcomes: dict[str, tuple[str, str]] = {}
    for name in checks:
        try:
            cls.battery().check(name)
        except ConformanceFailure as failure:
            outcomes[name] = ("failed", str(failure))
        except pytest.skip.Exception as skipped:
            outcomes[name] = ("skipped", str(skipped))
        else:
            outcomes[name] = ("passed", "")
    return outcomes

