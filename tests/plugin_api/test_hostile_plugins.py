"""Third-party plugins that misbehave at run time, through the real `create_agent` graph.

A node hook that returns something that is no update (a number, a list, a string) is
the hook's failure like an exception it raised: under `skip` the run goes on as if the
hook were absent, with one audit line naming the plugin, the hook and what it
returned; under `fail` the run stops with `PluginHookError` naming the same. A
middleware whose `name` cannot be read, or is not text, stops the build naming the
plugin, never a bare `AttributeError` from inside the graph. Unfused, fused and fused
into the model node; the plugins are configured `extensions.middlewares` (third-party
code, `skip` by default).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware

from antler.errors import BuildError, PluginHookError
from antler.runtime.agent import create_agent
from antler.runtime.isolation import AUDIT_LOGGER
from antler.runtime.models import ScriptedChatModel
from antler.testing import load_test_config, make_registry

HERE = __name__
MODES = {"unfused": {"fuse": False}, "fused": {"fuse": True, "fuse_into_model": False},
         "into_model": {"fuse": True, "fuse_into_model": True}}
RETURNED = {"int": 42, "list": ["x"], "str": "done"}


class ReturnsNoUpdate(AgentMiddleware):
    """Its `before_model` and `after_model` return `value`, which is no state update."""

    def __init__(self, value: str = "int") -> None:
        super().__init__()
        self.value = RETURNED[value]

    def before_model(self, state: Any, runtime: Any) -> Any:
        return self.value

    async def abefore_model(self, state: Any, runtime: Any) -> Any:
        return self.value

    def after_model(self, state: Any, runtime: Any) -> Any:
        return self.value

    async def aafter_model(self, state: Any, runtime: Any) -> Any:
        return self.value


class Neighbour(AgentMiddleware):
    """A well-behaved plugin beside it: its hooks still run."""

    seen: list[str] = []

    def before_model(self, state: Any, runtime: Any) -> None:
        Neighbour.seen.append("before_model")

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        Neighbour.seen.append("before_model")


class NameRaises(AgentMiddleware):
    @property
    def name(self) -> str:  # type: ignore[override]
        raise RuntimeError("no name today")


class NameNotText(AgentMiddleware):
    name = 5  # type: ignore[assignment]


def agent_with(tmp_path: Any, extensions: str, mode: str = "unfused",
               extra: str = "") -> tuple[Any, Any]:
    """An agent with `extensions` (and `extra`, more of the config) that answers at once."""
    registry = make_registry()
    model = ScriptedChatModel(["done"])
    config = load_test_config(f"{extra}extensions:\n  middlewares:\n{extensions}", registry)
    agent = create_agent(config, registry=registry, model=model, checkpointer="memory",
                         base_dir=tmp_path, **MODES[mode])
    return agent, model


def run(agent: Any, use_async: bool) -> dict[str, Any]:
    if use_async:
        return asyncio.run(agent.graph.ainvoke(agent.input("hi"), config=agent.run_config("t"),
                                               context=agent.context("t")))
    return agent.invoke("hi", thread_id="t")


def entries(value: str, policy: str = "skip") -> str:
    return (f"    - {{use: '{HERE}:ReturnsNoUpdate', name: hostile, on_error: {policy},"
            f" config: {{value: {value}}}}}\n"
            f"    - {{use: '{HERE}:Neighbour', name: neighbour}}\n")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("value", RETURNED)
def test_a_node_hook_returning_no_update_is_skipped_as_if_absent(tmp_path, caplog, value,
                                                                 use_async, mode):
    Neighbour.seen = []
    agent, model = agent_with(tmp_path, entries(value), mode)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = run(agent, use_async)

    assert [(m.type, m.text) for m in state["messages"]] == [("human", "hi"), ("ai", "done")]
    assert len(model.calls) == 1 and Neighbour.seen == ["before_model"]
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    shown = repr(RETURNED[value])
    assert [line.split("; skipped")[0] for line in lines] == [
        f"plugin 'hostile' failed in {hook}: TypeError: returned {type(RETURNED[value]).__name__}"
        f" {shown}; a node hook returns a dict of state updates (`{{'key': value}}`), a "
        "Command or None" for hook in ("before_model", "after_model")]


@pytest.mark.parametrize("mode", MODES)
def test_under_fail_a_node_hook_returning_no_update_stops_the_run_naming_it(tmp_path, mode):
    agent, model = agent_with(tmp_path, entries("list", "fail"), mode)
    with agent, pytest.raises(PluginHookError) as caught:
        agent.invoke("hi", thread_id="t")

    assert (caught.value.plugin, caught.value.hook) == ("hostile", "before_model")
    assert str(caught.value).startswith("plugin 'hostile' failed in before_model: TypeError: "
                                        "returned list ['x']; a node hook returns a dict")
    assert not model.calls


@pytest.mark.parametrize(("cls", "plugin", "expected"), [
    ("NameRaises", "name_raises", "reading its `name` raised RuntimeError: no name today; make "
                                  "`name` a plain string attribute"),
    ("NameNotText", "name_not_text", "its `name` is 5, not a non-empty string; make it a "
                                     "string"),
])
def test_a_middleware_whose_name_is_unusable_stops_the_build_naming_the_plugin(
        tmp_path, cls, plugin, expected):
    with pytest.raises(BuildError) as caught:
        agent_with(tmp_path, f"    - {HERE}:{cls}\n")

    message = str(caught.value)
    assert message.startswith(f"plugin {plugin!r} [")
    assert f"the middleware '{HERE}:{cls}' built: {expected}" in message




WRAP_RETURNED = {"none": None, "str": "oops"}


class WrapReturnsNoResult(AgentMiddleware):
    """Its wrap hooks call the handler, then return `value`, which LangChain cannot use."""

    def __init__(self, value: str = "none") -> None:
        super().__init__()
        self.value = WRAP_RETURNED[value]

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        handler(request)
        return self.value

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        await handler(request)
        return self.value

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        handler(request)
        return self.value

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        await handler(request)
        return self.value


def wrap_entries(value: str, policy: str = "skip") -> str:
    return (f"    - {{use: '{HERE}:WrapReturnsNoResult', name: hostile_wrap, "
            f"on_error: {policy}, config: {{value: {value}}}}}\n")


def tool_call_agent(tmp_path: Any, extensions: str, mode: str, extra: str = "",
                    tool_seconds: float = 0.0) -> tuple[Any, Any]:
    """An agent whose model calls its one tool (`lookup`, taking `tool_seconds`) once, then
    answers; `extra` is more of the config."""
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    @tool
    def lookup(key: str) -> str:
        """Look `key` up."""
        time.sleep(tool_seconds)
        return f"value of {key}"

    registry = make_registry()
    model = ScriptedChatModel([
        AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"key": "k"},
                                           "id": "call_1"}]),
        "done"])
    config = load_test_config(f"{extra}extensions:\n  middlewares:\n{extensions}", registry)
    agent = create_agent(config, registry=registry, model=model, checkpointer="memory",
                         tools=[lookup], base_dir=tmp_path, **MODES[mode])
    return agent, model


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("value", WRAP_RETURNED)
def test_a_wrap_hook_returning_no_result_keeps_the_handlers_result_under_skip(
        tmp_path, caplog, value, use_async, mode):
    agent, model = tool_call_agent(tmp_path, wrap_entries(value), mode)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = run(agent, use_async)

    # The model's reply and the tool's answer are the handlers', as if the plugin were absent.
    assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
    assert state["messages"][-1].text == "done" and len(model.calls) == 2
    assert state["messages"][2].text == "value of k"
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    shown = "None" if value == "none" else "str 'oops'"
    expected = {
        hook: f"plugin 'hostile_wrap' failed in {hook}: TypeError: returned {shown}; a {hook} "
              f"returns what its handler returned, {kinds}"
        for hook, kinds in (
            ("wrap_model_call", "a ModelResponse, an AIMessage or an ExtendedModelResponse"),
            ("wrap_tool_call", "a ToolMessage or a Command"))}
    assert all(line.endswith("; skipped (on_error: skip): kept the handler's result")
               for line in lines)
    seen = [line.split("; skipped")[0] for line in lines]
    assert sorted(set(seen)) == sorted(expected.values())
    assert seen.count(expected["wrap_model_call"]) == 2


@pytest.mark.parametrize("mode", MODES)
def test_under_fail_a_wrap_hook_returning_no_result_stops_the_run_naming_it(tmp_path, mode):
    agent, _model = tool_call_agent(tmp_path, wrap_entries("none", "fail"), mode)
    with agent, pytest.raises(PluginHookError) as caught:
        agent.invoke("hi", thread_id="t")

    assert (caught.value.plugin, caught.value.hook) == ("hostile_wrap", "wrap_model_call")
    assert str(caught.value).startswith(
        "plugin 'hostile_wrap' failed in wrap_model_call: TypeError: returned None; "
        "a wrap_model_call returns what its handler returned")


@pytest.mark.parametrize("config", ["antler.yaml", {"agent": {}}, 3])
def test_create_agent_given_no_operator_config_says_how_to_load_one(config):
    from antler.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        create_agent(config, registry=make_registry())
    message = str(caught.value)
    assert message.startswith(f"create_agent's config is {type(config).__name__} ")
    assert "load_config(path, registry)" in message
