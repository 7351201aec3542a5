"""Shared helpers for the authorization, guardrail and read_before_write tests.

`guard_registry()` discovers the installed plugins (and checks the guard
plugins are among them). `register_providers(site, ...)` makes the test
providers loadable by name through a test distribution's entry points.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.metadata
import importlib.util
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool

from antler.chain.config import parse_config
from antler.plugin_api.providers import (
    AUTHORIZATION_PROVIDER_GROUP,
    GUARDRAIL_PROVIDER_GROUP,
    Action,
    AuthorizationProvider,
    Decision,
    GuardrailProvider,
    GuardrailRequest,
    Principal,
)
from antler.plugin_api.registry import PluginRegistry, discover
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

GUARD_PLUGINS = ("authorization", "guardrail", "read_before_write")

QUIET = "title: {enabled: false}\nmemory: {enabled: false}\n"
"""Title and memory would also call the scripted model; they have their own tests."""

TEST_PROVIDERS = {
    AUTHORIZATION_PROVIDER_GROUP: {
        "clearance": "tests.plugins.guard_support:ClearanceProvider",
        "internal_only": "tests.plugins.guard_support:InternalOnlyProvider",
        "broken": "tests.plugins.guard_support:BrokenProvider",
        "not_a_provider": "tests.plugins.guard_support:NotAProvider",
        "missing_module": "tests.plugins.no_such_module:Nothing",
    },
    GUARDRAIL_PROVIDER_GROUP: {
        "counting": "tests.plugins.guard_support:CountingGuardrail",
        "broken_guardrail": "tests.plugins.guard_support:BrokenGuardrail",
    },
}


# -- registry -----------------------------------------------------------------------------


@functools.cache
def guard_registry() -> PluginRegistry:
    """The installed plugins; the guard plugins and sandbox_audit must be among them."""
    registry = discover()
    missing = [name for name in (*GUARD_PLUGINS, "sandbox_audit") if name not in registry.specs]
    assert not missing, (missing, [str(d) for d in registry.diagnostics])
    return registry


def register_providers(site: Any, groups: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Declare provider entry points in a test distribution (names not installed already)."""
    wanted = groups or TEST_PROVIDERS
    entry_points: dict[str, dict[str, str]] = {}
    for group, targets in wanted.items():
        installed = {ep.name for ep in importlib.metadata.entry_points(group=group)}
        missing = {name: t for name, t in targets.items() if name not in installed}
        if missing:
            entry_points[group] = missing
    if entry_points:
        site.distribution("antler-guard-test-providers", files={}, entry_points=entry_points)


# -- agents -------------------------------------------------------------------------------


class Counter:
    """Counts tool executions: the side effect that proves whether a tool ran."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def tool(self, name: str) -> StructuredTool:
        def run(**kwargs: Any) -> str:
            self.calls[name] = self.calls.get(name, 0) + 1
            return f"{name} ran"

        async def arun(**kwargs: Any) -> str:
            return run(**kwargs)

        return StructuredTool.from_function(
            func=run, coroutine=arun, name=name, description=f"The {name} tool.",
            args_schema={"type": "object", "properties": {}, "additionalProperties": True},
        )

    def __getitem__(self, name: str) -> int:
        return self.calls.get(name, 0)


def behaving_tool(name: str, behaviour: Any) -> StructuredTool:
    """A tool taking any arguments whose sync and async forms both return `behaviour(**args)`."""
    def run(**kwargs: Any) -> Any:
        return behaviour(**kwargs)

    async def arun(**kwargs: Any) -> Any:
        return behaviour(**kwargs)

    return StructuredTool.from_function(
        func=run, coroutine=arun, name=name, description=f"The {name} tool.",
        args_schema={"type": "object", "properties": {}, "additionalProperties": True})


def make_agent(home: Path, script: list[Any], config: str = "", *,
               tools: list[Any] | tuple[Any, ...] = (), **kwargs: Any) -> tuple[Any, Any]:
    """A real agent from the guard registry over a scripted model; returns (agent, model)."""
    registry = kwargs.pop("registry", None) or guard_registry()
    model = ScriptedChatModel(script)
    kwargs.setdefault("checkpointer", "memory")
    agent = create_agent(parse_config(QUIET + config, registry), model=model, tools=tools,
                         base_dir=home, registry=registry, **kwargs)
    return agent, model


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One assistant turn with several parallel tool calls."""
    return {"tool_calls": [{"name": name, "args": args} for name, args in pairs]}


def audit_records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    """The records `logger` wrote: other loggers' (the sandbox's warning when bubblewrap
    is missing, say) land in `caplog.records` too."""
    return [record for record in caplog.records if record.name == logger]


def audits(caplog: pytest.LogCaptureFixture, logger: str) -> list[dict[str, Any]]:
    """The structured audit records (`record.audit`) that `logger` wrote."""
    return [record.audit for record in audit_records(caplog, logger)]  # type: ignore[attr-defined]


def tool_results(state: Mapping[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def ainvoke(agent: Any, message: Any, *, thread_id: str, recursion_limit: int | None = None,
            **identity: Any) -> dict[str, Any]:
    """`agent.invoke` through the graph's async API (optionally with more supersteps)."""
    config = agent.run_config(thread_id)
    if recursion_limit is not None:
        config["recursion_limit"] = recursion_limit

    async def run() -> dict[str, Any]:
        result: dict[str, Any] = await agent.graph.ainvoke(
            agent.input(message), config=config, context=agent.context(thread_id, **identity))
        return result

    return asyncio.run(run())


# -- test providers -----------------------------------------------------------------------


class ClearanceProvider(AuthorizationProvider):
    """Shows every tool; runs `launch` only with attribute clearance "high" (or level)."""

    def __init__(self) -> None:
        self.seen: list[Principal] = []

    def authorize(self, principal: Principal, action: Action) -> Decision:
        self.seen.append(principal)
        if action.target != "launch" or action.args is None:
            return Decision.allow("not guarded", rule="open")
        clearance = principal.attributes.get("clearance")
        level = clearance.get("level") if isinstance(clearance, dict) else clearance
        if level == "high":
            return Decision.allow("high clearance", rule="clearance")
        return Decision.deny(f"clearance is {level!r}", rule="clearance")


class InternalOnlyProvider(AuthorizationProvider):
    """Shows every tool, but runs `launch` only for internal principals."""

    def authorize(self, principal: Principal, action: Action) -> Decision:
        visibility_only = action.args is None
        if action.target != "launch" or visibility_only or principal.is_internal:
            return Decision.allow("ok", rule="internal" if principal.is_internal else "open")
        return Decision.deny("launch is for internal callers", rule="internal_only")


class BrokenProvider(AuthorizationProvider):
    """Raises on every call to `launch` (and answers nonsense for `weird`)."""

    def authorize(self, principal: Principal, action: Action) -> Any:
        if action.target == "launch":
            raise RuntimeError("policy backend unreachable")
        if action.target == "weird":
            return True  # not a Decision
        return Decision.allow("ok", rule="open")


class NotAProvider:
    """Registered as a provider but is none."""


class CountingGuardrail(GuardrailProvider):
    """Allows everything but `launch`, recording every request it sees."""

    def __init__(self, block: tuple[str, ...] = ("launch",)) -> None:
        self.requests: list[GuardrailRequest] = []
        self.block = block

    def evaluate(self, request: GuardrailRequest) -> Decision:
        self.requests.append(request)
        if request.tool_name in self.block:
            return Decision.deny("blocked by test guardrail", rule="block")
        return Decision.allow("ok", rule="open")


class BrokenGuardrail(GuardrailProvider):
    def evaluate(self, request: GuardrailRequest) -> Decision:
        raise RuntimeError("guardrail service down")
