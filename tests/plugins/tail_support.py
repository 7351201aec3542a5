"""Shared helpers for the response-guard and tail plugin tests.

`tail_registry()` is the installed plugins plus `flaky_retry`, an outer model
wrapper (placed right after input_sanitization, so it encloses every guard's
wrapper) that retries a model call once when it fails with `TransientError`,
as an error handler would. `failing_turn()` is a script turn whose model call
raises that error.
"""

from __future__ import annotations

import asyncio
import functools
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.exceptions import ModelConnectionError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool

from antler.chain.config import parse_config
from antler.contracts.runcontext import RunContext
from antler.contracts.stop_reason import stop_reason_of
from antler.plugin_api.hookspecs import hookimpl
from antler.plugin_api.registry import PluginRegistry, discover
from antler.plugin_api.spec import PluginSpec
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from tests.plugins.support import RetryOnce

QUIET = "title: {enabled: false}\nmemory: {enabled: false}\n"
"""Title and memory would also call the scripted model; they have their own tests."""

MODES = {"unfused": {"fuse": False},
         "fused": {"fuse": True, "fuse_into_model": False},
         "model_node": {"fuse": True, "fuse_into_model": True}}
"""The three ways the compiler can wire a chain; tests run through each."""



class TransientError(ModelConnectionError):
    """A provider failure worth one retry (a dropped connection).

    It asks for no wait (``retry-after: 0``), so llm_error_handling, the real
    retrying wrapper, retries it at once; `FlakyRetry` stays as a second,
    outermost one.
    """

    headers = {"retry-after": "0"}


class FlakyRetry(RetryOnce):
    """Retries a model call once when it raised `TransientError`, as an error handler does."""

    errors = (TransientError,)


class FakeRuntime:
    """A hook's runtime outside a graph: a run context, and a stream writer that records."""

    def __init__(self, run_id: str = "r", thread: str = "t") -> None:
        self.context = RunContext(thread_id=thread, run_id=run_id)
        self.events: list[Any] = []
        self.stream_writer = self.events.append


def build_flaky_retry(ctx: Any) -> FlakyRetry:
    return FlakyRetry()


def failing_turn(messages: list[BaseMessage]) -> Any:
    """A script turn: this model call fails with a transient error."""
    raise TransientError("connection reset by the provider")


FLAKY_SPEC = PluginSpec(
    name="flaky_retry", factory=f"{__name__}:build_flaky_retry",
    summary="Retries a model call once after a transient error (test double)",
    order={"after": ["input_sanitization"], "before": ["dangling_tool_call", "loop_detection"]})


@functools.cache
def tail_registry() -> PluginRegistry:
    """The installed plugins plus `flaky_retry`; the four tail plugins must be among them."""
    registry = discover(extra_plugins=[("tail_test_specs", types.SimpleNamespace(
        antler_plugin_specs=hookimpl(lambda: [FLAKY_SPEC])))])
    assert not registry.diagnostics, registry.diagnostics
    for name in ("loop_detection", "terminal_response", "model_length_finish_reason",
                 "safety_finish_reason"):
        assert name in registry.specs, name
    return registry


class Tools:
    """Tools that count their executions: the side effect that proves whether a call ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

    def tool(self, name: str) -> StructuredTool:
        def run(**kwargs: Any) -> str:
            self.ran.append((name, kwargs))
            return f"{name} result {len(self.ran)}"

        async def arun(**kwargs: Any) -> str:
            return run(**kwargs)

        return StructuredTool.from_function(
            func=run, coroutine=arun, name=name, description=f"The {name} tool.",
            args_schema={"type": "object", "properties": {}, "additionalProperties": True})

    def count(self, name: str) -> int:
        return sum(1 for ran, _ in self.ran if ran == name)


def make_agent(home: Path, script: list[Any], config: str = "", *, tools: Tools | None = None,
               tool_names: tuple[str, ...] = ("lookup",), **kwargs: Any,
               ) -> tuple[Any, ScriptedChatModel]:
    """A real agent of the installed plugins (and `flaky_retry`) over a scripted model."""
    registry = kwargs.pop("registry", None) or tail_registry()
    model = ScriptedChatModel(script)
    kwargs.setdefault("checkpointer", "memory")
    bound = [tools.tool(name) for name in tool_names] if tools is not None else []
    agent = create_agent(parse_config(QUIET + config, registry), model=model, tools=bound,
                         base_dir=home, registry=registry, **kwargs)
    return agent, model


def run(agent: Any, message: Any, *, thread_id: str = "t1", run_id: str = "r1",
        use_async: bool = False) -> dict[str, Any]:
    """One turn through `invoke` or the graph's async API, with a known run id."""
    if not use_async:
        result: dict[str, Any] = agent.invoke(message, thread_id=thread_id, run_id=run_id)
        return result

    async def go() -> dict[str, Any]:
        state: dict[str, Any] = await agent.graph.ainvoke(
            agent.input(message), config=agent.run_config(thread_id),
            context=agent.context(thread_id, run_id=run_id))
        return state

    return asyncio.run(go())


def call(name: str, **args: Any) -> dict[str, Any]:
    """A script turn making one tool call."""
    return {"tool_calls": [{"name": name, "args": args}]}


def named(messages: list[BaseMessage], name: str) -> list[BaseMessage]:
    """The messages called `name` (hidden hints are recognised by name)."""
    return [m for m in messages if getattr(m, "name", None) == name]


def replies(state: Mapping[str, Any]) -> list[AIMessage]:
    return [m for m in state["messages"] if isinstance(m, AIMessage)]


def tool_results(state: Mapping[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def humans(state: Mapping[str, Any]) -> list[HumanMessage]:
    return [m for m in state["messages"] if isinstance(m, HumanMessage)]


def reason(state: Mapping[str, Any], run_id: str = "r1") -> str | None:
    """The stop reason the run `run_id` recorded, or None."""
    value = stop_reason_of(state, run_id)
    return value["reason"] if value else None
