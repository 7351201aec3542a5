"""Third-party hooks that change the state in place, return huge output or take too long.

Through the real `create_agent` graph, unfused, fused and fused into the model node,
sync and async. The plugins are configured `extensions.middlewares` (third-party code,
`skip` by default): under `skip` the run goes on as if the hook were absent (its
change in place undone) with one audit line naming plugin, hook and what it did;
under `fail` the run stops with the error naming the same.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any, NotRequired

import pytest
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from antler.errors import HookOutputError, HookTimeError, StateMutationError
from antler.runtime.isolation import AUDIT_LOGGER
from tests.plugin_api.test_hostile_plugins import MODES, agent_with, run, tool_call_agent

HERE = __name__


class NotesState(AgentState):
    notes: NotRequired[list[str]]
    ledger: NotRequired[dict[str, str]]


class NotesOwner(AgentMiddleware):
    """Owns `notes` and `ledger`, written once before the model is called."""

    state_schema = NotesState
    seen: list[Any] = []

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        return {"notes": ["mine"], "ledger": {"k": "owner's"}}

    def after_agent(self, state: Any, runtime: Any) -> None:
        NotesOwner.seen.append((list(state["notes"]), dict(state["ledger"])))


ATTACKS = {
    "clear_messages": (["messages"], lambda state: state["messages"].clear()),
    "append_to_notes": (["notes"], lambda state: state["notes"].append("forged")),
    "replace_a_message": (["messages"], lambda state: state["messages"].__setitem__(
        0, HumanMessage("forged", id=state["messages"][0].id))),
    "rewrite_ledger": (["ledger"], lambda state: state["ledger"].__setitem__("k", "forged")),
    "raise_after_clearing": (["messages"], lambda state: (state["messages"].clear(), 1 / 0)),
}


class Mutator(AgentMiddleware):
    """Its `before_model` changes the state it is handed in place and returns None."""

    def __init__(self, attack: str = "clear_messages") -> None:
        super().__init__()
        self.attack = ATTACKS[attack][1]

    def before_model(self, state: Any, runtime: Any) -> None:
        self.attack(state)

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        self.attack(state)


class ShippedMutator(Mutator):
    """`Mutator` clearing the messages, built by a factory (which is given the build context)."""

    def __init__(self, context: Any = None) -> None:
        super().__init__()


def mutator_entries(attack: str, policy: str = "skip") -> str:
    return (f"    - '{HERE}:NotesOwner'\n"
            f"    - {{use: '{HERE}:Mutator', name: hostile, on_error: {policy},"
            f" config: {{attack: {attack}}}}}\n")


def audit(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_change_in_place_is_undone_and_skipped(tmp_path, caplog, attack, use_async, mode):
    NotesOwner.seen = []
    agent, model = agent_with(tmp_path, mutator_entries(attack), mode)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = run(agent, use_async)

    # The model saw the user's message, and the state is as if the hook were absent.
    assert [m.text for m in model.calls[0] if m.type != "system"] == ["hi"]
    assert [(m.type, m.text) for m in state["messages"]] == [("human", "hi"), ("ai", "done")]
    assert NotesOwner.seen == [(["mine"], {"k": "owner's"})]
    keys = ATTACKS[attack][0]
    assert [line.split(" (undone)")[0] for line in audit(caplog)] == [
        f"plugin 'hostile' failed in before_model: StateMutationError: plugin 'hostile' "
        f"changed state key {keys[0]!r} in place in before_model"]


@pytest.mark.parametrize("mode", MODES)
def test_under_fail_a_change_in_place_stops_the_run_naming_plugin_hook_and_key(tmp_path, mode):
    agent, model = agent_with(tmp_path, mutator_entries("append_to_notes", "fail"), mode)
    with agent, pytest.raises(StateMutationError) as caught:
        agent.invoke("hi", thread_id="t")

    assert (caught.value.plugin, caught.value.keys) == ("hostile", ["notes"])
    assert str(caught.value).startswith(
        "plugin 'hostile' changed state key 'notes' in place in before_model (undone); a hook "
        "returns its changes as an update")
    assert not model.calls


HUGE = {
    "long_text": lambda: {"messages": [AIMessage("x" * (16 * 2**20 + 1))]},
    "deep": lambda: {"messages": [AIMessage("", additional_kwargs={"a": _nested(150)})]},
}


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


class Flooder(AgentMiddleware):
    """Its `before_model` returns `HUGE[size]`; `many` returns `count` messages."""

    def __init__(self, size: str = "long_text", count: int = 0) -> None:
        super().__init__()
        self.size, self.count = size, count

    def update(self) -> dict[str, Any]:
        if self.size == "many":
            message = AIMessage("m")
            return {"messages": [message] * self.count}
        return HUGE[self.size]()

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self.update()

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self.update()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("size", "use_async"), [
    ("long_text", False), ("deep", True), ("many", False), ("many", True)])
def test_a_huge_update_is_refused_naming_the_limit_and_how_to_raise_it(
        tmp_path, caplog, size, use_async, mode):
    limit = "plugins: {hostile: {output_limit: 50000}}\n" if size == "many" else ""
    entries = (f"    - {{use: '{HERE}:Flooder', name: hostile, "
               f"config: {{size: {size}, count: 100000}}}}\n")
    agent, _model = agent_with(tmp_path, entries, mode, limit)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = run(agent, use_async)

    assert [(m.type, m.text) for m in state["messages"]] == [("human", "hi"), ("ai", "done")]
    (line,) = audit(caplog)
    prefix = "plugin 'hostile' failed in before_model: HookOutputError: plugin 'hostile' "
    if size == "deep":
        assert line.startswith(prefix + "returned a value nested more than 100 levels deep "
                                        "from before_model")
    else:
        limit_text = "50000" if size == "many" else str(16 * 2**20)
        source = "plugins.hostile.output_limit" if size == "many" else \
            "agent.plugin_output_limit"
        assert line.startswith(prefix + f"returned more than {limit_text} characters and "
                                        "items from before_model")
        assert f"over its output limit ({source}); raise it there, or under `plugins: " \
               "{hostile: {output_limit: N}}`" in line


@pytest.mark.parametrize("mode", MODES)
def test_under_fail_a_huge_update_stops_the_run(tmp_path, mode):
    entries = (f"    - {{use: '{HERE}:Flooder', name: hostile, on_error: fail, "
               "config: {size: many, count: 300}}\n")
    agent, model = agent_with(tmp_path, entries, mode,
                              "plugins: {hostile: {output_limit: 1000}}\n")
    with agent, pytest.raises(HookOutputError) as caught:
        agent.invoke("hi", thread_id="t")

    assert str(caught.value).startswith("plugin 'hostile' returned more than 1000 characters "
                                        "and items from before_model")
    assert not model.calls


class Slow(AgentMiddleware):
    """Its `before_model` takes `seconds` (asleep; the async one awaits)."""

    def __init__(self, seconds: float = 0.2) -> None:
        super().__init__()
        self.seconds = seconds

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        time.sleep(self.seconds)
        return {"messages": [AIMessage("late")]}

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        await asyncio.sleep(self.seconds)
        return {"messages": [AIMessage("late")]}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_hook_over_its_time_budget_is_skipped_and_an_async_one_cancelled(
        tmp_path, caplog, use_async, mode):
    seconds = 30 if use_async else 0.15  # the async hook would sleep for 30 s
    entries = f"    - {{use: '{HERE}:Slow', name: hostile, config: {{seconds: {seconds}}}}}\n"
    agent, _model = agent_with(tmp_path, entries, mode,
                               "plugins: {hostile: {time_budget: 0.05}}\n")
    started = time.monotonic()
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = run(agent, use_async)

    assert time.monotonic() - started < 10
    assert [(m.type, m.text) for m in state["messages"]] == [("human", "hi"), ("ai", "done")]
    (line,) = audit(caplog)
    what = r"was cancelled in before_model at" if use_async else \
        r"took 0\.[1-9]\d* s in before_model, over"
    assert re.match(r"plugin 'hostile' failed in before_model: HookTimeError: plugin "
                    f"'hostile' {what} its time budget", line), line
    assert ("its time budget of 0.05 s (plugins.hostile.time_budget); raise it there, or "
            "under `plugins: {hostile: {time_budget: SECONDS}}`") in line


@pytest.mark.parametrize("mode", MODES)
def test_under_fail_a_hook_over_its_time_budget_stops_the_run(tmp_path, mode):
    entries = (f"    - {{use: '{HERE}:Slow', name: hostile, on_error: fail, "
               "config: {seconds: 0.15}}\n")
    agent, model = agent_with(tmp_path, entries, mode,
                              "plugins: {hostile: {time_budget: 0.05}}\n")
    with agent, pytest.raises(HookTimeError) as caught:
        agent.invoke("hi", thread_id="t")

    assert (caught.value.plugin, caught.value.hook) == ("hostile", "before_model")
    assert caught.value.seconds >= 0.15 and not model.calls


class SlowWrap(AgentMiddleware):
    """Its `wrap_tool_call` takes `own` seconds of its own after its handler, the slow tool,
    returned; with `huge`, it returns a huge ToolMessage of its own."""

    def __init__(self, own: float = 0.0, huge: bool = False) -> None:
        super().__init__()
        self.own, self.huge = own, huge

    def finish(self, result: Any) -> Any:
        if self.huge:
            return ToolMessage("x" * 2000, tool_call_id=result.tool_call_id)
        return result

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = handler(request)
        time.sleep(self.own)
        return self.finish(result)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = await handler(request)
        await asyncio.sleep(self.own)
        return self.finish(result)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", ["slow_tool", "slow_hook", "huge"])
def test_a_wrap_hook_is_held_to_its_own_time_and_output_not_its_handlers(
        tmp_path, caplog, case, use_async, mode):
    own = (30 if use_async else 0.15) if case == "slow_hook" else 0.0
    entries = (f"    - {{use: '{HERE}:SlowWrap', name: hostile, "
               f"config: {{own: {own}, huge: {str(case == 'huge').lower()}}}}}\n")
    limits = "plugins: {hostile: {time_budget: 0.1, output_limit: 1000}}\n"
    agent, _model = tool_call_agent(tmp_path, entries, mode, limits,
                                    tool_seconds=0.15 if case == "slow_tool" else 0)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = run(agent, use_async)

    # The tool's own answer is kept either way.
    assert state["messages"][2].text == "value of k"
    lines = audit(caplog)
    if case == "slow_tool":
        assert lines == []  # the handler's 0.15 s is not the hook's
    else:
        error = "HookTimeError" if case == "slow_hook" else "HookOutputError"
        assert [line.split(": plugin")[0] for line in lines] == [
            f"plugin 'hostile' failed in wrap_tool_call: {error}"]
        assert lines[0].endswith("; skipped (on_error: skip): kept the handler's result")
        if case == "slow_hook" and use_async:  # cancelled at its budget, not waited for
            assert "plugin 'hostile' was cancelled in wrap_tool_call at its time budget of " \
                   "0.1 s" in lines[0]



@pytest.mark.parametrize(("distribution", "settings", "expected"), [
    ("antler", "", (None, "", None, "", False)),
    ("antler", "plugins: {antler: {time_budget: 2}, shipped: {output_limit: 9}}\n",
     (2.0, "plugins.antler.time_budget", 9, "plugins.shipped.output_limit", False)),
    ("acme-x", "", (120.0, "agent.plugin_time_budget", 16 * 2**20,
                    "agent.plugin_output_limit", True)),
    ("acme-x", "agent: {plugin_time_budget: null}\nplugins: {shipped: {output_limit: 5}}\n",
     (None, "", 5, "plugins.shipped.output_limit", True)),
])
def test_hook_limits_third_party_by_default_antlers_own_when_the_operator_says(
        distribution, settings, expected):
    """Antler's own plugins are neither limited nor watched unless the operator sets a limit;
    a third-party plugin has the agent's defaults; the most specific `plugins.<key>` wins."""
    from antler.chain.hooklimits import hook_limits
    from antler.plugin_api.spec import PluginSpec, Provenance
    from antler.testing import load_test_config, make_registry

    spec = PluginSpec(name="shipped", factory=f"{HERE}:ShippedMutator",
                      provenance=Provenance(source="plugin-manifest.yaml",
                                            distribution=distribution))
    limits = hook_limits(spec, load_test_config(settings, make_registry(spec)))
    assert (limits.time_budget, limits.time_from, limits.output_limit, limits.output_from,
            limits.untrusted) == expected
