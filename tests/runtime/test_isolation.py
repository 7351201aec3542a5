"""Run-time isolation: a plugin's hook that raises, under `on_error: skip` and `fail`.

Every test runs the real `antler.agent.create_agent` graph over a scripted model, for
every hook kind, sync and async, unfused, fused, and fused into the model node.
The plugins under test are third-party-style specs (a registry built from
manifests, stamped with a distribution that is not Antler's) or configured
`extensions.middlewares` entries.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

import pytest
from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain.tools import tool
from langgraph.types import Command, interrupt
from pydantic import BaseModel

from antler.chain.config import PluginLoadSettings
from antler.chain.policy import error_policy
from antler.errors import AntlerError, PluginHookError
from antler.plugin_api.manifest import builtin_plugins_manifest
from antler.plugin_api.spec import PluginSpec, Provenance
from antler.runtime.agent import create_agent
from antler.runtime.isolation import AUDIT_LOGGER
from antler.runtime.models import ScriptedChatModel
from antler.runtime.tracing import Tracer
from antler.testing import load_test_config, make_registry

HERE = __name__
LOG: list[str] = []
"""What ran, in order: the witness's hooks, the tool, the raiser's handler calls."""


class RaiserSettings(BaseModel):
    """`raiser:` section: whether a wrap hook raises before or after its handler.

    `rewrap`: the model wrapper turns an exception out of its handler into its own.
    """

    when: Literal["before", "after", "rewrap"] = "before"


class Raiser(AgentMiddleware):
    """Base of the plugins under test; each subclass has one hook that raises."""

    error: type[Exception] = ValueError

    def __init__(self, context: Any = None, when: str = "before") -> None:
        super().__init__()
        settings = getattr(context, "config", None)
        self.when = settings.when if isinstance(settings, RaiserSettings) else when

    def fail(self) -> None:
        raise self.error("bad")


class BeforeAgentRaiser(Raiser):
    def before_agent(self, state: Any, runtime: Any) -> Any:
        self.fail()

    async def abefore_agent(self, state: Any, runtime: Any) -> Any:
        self.fail()


class BeforeModelRaiser(Raiser):
    def before_model(self, state: Any, runtime: Any) -> Any:
        self.fail()

    async def abefore_model(self, state: Any, runtime: Any) -> Any:
        self.fail()


class AfterModelRaiser(Raiser):
    def after_model(self, state: Any, runtime: Any) -> Any:
        self.fail()

    async def aafter_model(self, state: Any, runtime: Any) -> Any:
        self.fail()


class AfterAgentRaiser(Raiser):
    def after_agent(self, state: Any, runtime: Any) -> Any:
        self.fail()

    async def aafter_agent(self, state: Any, runtime: Any) -> Any:
        self.fail()


class ModelWrapRaiser(Raiser):
    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        if self.when == "rewrap":
            try:
                return handler(request)
            except RuntimeError as exc:
                raise ValueError("bad") from exc
        if self.when == "after":
            handler(request.override(system_message=None))
        self.fail()

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        if self.when == "rewrap":
            try:
                return await handler(request)
            except RuntimeError as exc:
                raise ValueError("bad") from exc
        if self.when == "after":
            await handler(request.override(system_message=None))
        self.fail()


class ToolWrapRaiser(Raiser):
    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        if self.when == "after":
            LOG.append(f"handler: {handler(request).content}")
        self.fail()

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        if self.when == "after":
            LOG.append(f"handler: {(await handler(request)).content}")
        self.fail()


class RenamedModelWrapRaiser(ModelWrapRaiser):
    """`ModelWrapRaiser` with its parameters named otherwise (and one optional more)."""

    def wrap_model_call(self, req: Any, call_next: Any, *rest: Any) -> Any:
        return super().wrap_model_call(req, call_next)

    async def awrap_model_call(self, req: Any, call_next: Any, *rest: Any) -> Any:
        return await super().awrap_model_call(req, call_next)


class RenamedToolWrapRaiser(ToolWrapRaiser):
    """`ToolWrapRaiser` with its parameters named otherwise (and one optional more)."""

    def wrap_tool_call(self, req: Any, call_next: Any, *rest: Any) -> Any:
        return super().wrap_tool_call(req, call_next)

    async def awrap_tool_call(self, req: Any, call_next: Any, *rest: Any) -> Any:
        return await super().awrap_tool_call(req, call_next)


class Refusing(BeforeModelRaiser):
    """Raises an `AntlerError` on purpose."""

    class Refusal(AntlerError):
        pass

    error = Refusal


class Witness(AgentMiddleware):
    """Records every node hook it runs, so a fused group has two members."""

    def __init__(self, context: Any = None) -> None:
        super().__init__()

    def before_agent(self, state: Any, runtime: Any) -> None:
        LOG.append("before_agent")

    async def abefore_agent(self, state: Any, runtime: Any) -> None:
        LOG.append("before_agent")

    def before_model(self, state: Any, runtime: Any) -> None:
        LOG.append("before_model")

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        LOG.append("before_model")

    def after_model(self, state: Any, runtime: Any) -> None:
        LOG.append("after_model")

    async def aafter_model(self, state: Any, runtime: Any) -> None:
        LOG.append("after_model")

    def after_agent(self, state: Any, runtime: Any) -> None:
        LOG.append("after_agent")

    async def aafter_agent(self, state: Any, runtime: Any) -> None:
        LOG.append("after_agent")


RAISERS = {
    "before_agent": BeforeAgentRaiser, "before_model": BeforeModelRaiser,
    "wrap_model_call": ModelWrapRaiser, "after_model": AfterModelRaiser,
    "wrap_tool_call": ToolWrapRaiser, "after_agent": AfterAgentRaiser,
}
CASES = [("before_agent", "before"), ("before_model", "before"),
         ("wrap_model_call", "before"), ("wrap_model_call", "after"),
         ("after_model", "before"), ("wrap_tool_call", "before"),
         ("wrap_tool_call", "after"), ("after_agent", "before")]
CALLS = {"before_agent": 1, "before_model": 2, "wrap_model_call": 2, "after_model": 2,
         "wrap_tool_call": 1, "after_agent": 1}
"""How often each hook runs in one turn of SCRIPT (two model calls, one tool call)."""
BEFORE_FAILURE = {
    ("before_agent", "before"): (0, 0), ("before_model", "before"): (0, 0),
    ("wrap_model_call", "before"): (0, 0), ("wrap_model_call", "after"): (1, 0),
    ("after_model", "before"): (1, 0), ("wrap_tool_call", "before"): (1, 0),
    ("wrap_tool_call", "after"): (1, 1), ("after_agent", "before"): (2, 1),
}
"""(model calls, tool runs) of SCRIPT before each failing hook stops the run."""
MODES = {"unfused": {"fuse": False}, "fused": {"fuse": True, "fuse_into_model": False},
         "into_model": {"fuse": True, "fuse_into_model": True}}
SCRIPT = [{"content": "", "tool_calls": [{"name": "echo", "args": {"text": "hi"}}]}, "done"]
THIRD_PARTY = Provenance(source="acme_antler/plugin-manifest.yaml", distribution="acme-antler",
                         entry_point="acme")


@tool
def echo(text: str) -> str:
    """Echo the text back."""
    LOG.append("tool")
    return f"echo: {text}"


@tool
def ask(question: str) -> str:
    """Ask the user and return the answer."""
    answer = interrupt(question)
    LOG.append("tool")
    return f"answer: {answer}"


def spec(name: str, cls: type, **fields: Any) -> PluginSpec:
    fields.setdefault("provenance", THIRD_PARTY)
    return PluginSpec(name=name, factory=f"{HERE}:{cls.__name__}", **fields)


def raiser_spec(cls: type, **fields: Any) -> PluginSpec:
    return spec("raiser", cls, config_model=f"{HERE}:RaiserSettings", **fields)


def build(tmp_path: Any, specs: list[PluginSpec], config: str = "", *, mode: str = "unfused",
          script: list[Any] | None = None, tools: list[Any] | None = None,
          tracer: Tracer | None = None) -> tuple[Any, ScriptedChatModel]:
    registry = make_registry(*specs)
    model = ScriptedChatModel(script or SCRIPT)
    agent = create_agent(load_test_config(config, registry), registry=registry, model=model,
                         tools=tools or [echo], checkpointer="memory", base_dir=tmp_path,
                         tracer=tracer, **MODES[mode])
    return agent, model


def turn(agent: Any, use_async: bool, message: Any = "go", thread: str = "t") -> dict[str, Any]:
    """One turn, sync or async; `message` may be a `Command(resume=...)`."""
    payload = message if isinstance(message, Command) else agent.input(message)
    kwargs = {"config": agent.run_config(thread), "context": agent.context(thread)}
    if use_async:
        return asyncio.run(agent.graph.ainvoke(payload, **kwargs))
    return agent.graph.invoke(payload, **kwargs)


def answers(state: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m.type, m.text) for m in state["messages"]]


def check_compiled(agent: Any, hook: str, mode: str) -> None:
    """The isolated chain compiled the way the mode asks: the wrappers hid nothing."""
    if mode == "unfused" or hook.startswith("wrap"):
        return
    plan = agent.fusion
    if mode == "into_model" and hook in ("before_agent", "before_model", "after_model"):
        assert any("raiser" in node.members for node in plan.absorbed)
    else:
        assert any("raiser" in node.members for node in plan.fused)


@pytest.fixture(autouse=True)
def clean_log() -> None:
    LOG.clear()


def baseline(tmp_path: Any, use_async: bool) -> tuple[list[Any], list[str], int]:
    """What one turn does without the raiser: messages, what ran, model calls."""
    agent, model = build(tmp_path / "baseline", [spec("witness", Witness)])
    with agent:
        state = turn(agent, use_async)
    ran, LOG[:] = list(LOG), []
    return answers(state), ran, len(model.calls)


# -- skip -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("hook,when", CASES)
def test_a_skipped_hook_leaves_the_run_as_if_it_were_absent(tmp_path, caplog, hook, when,
                                                            use_async, mode):
    expected, ran, model_calls = baseline(tmp_path, use_async)
    agent, model = build(tmp_path, [raiser_spec(RAISERS[hook]), spec("witness", Witness)],
                         f"raiser: {{when: {when}}}", mode=mode)
    check_compiled(agent, hook, mode)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = turn(agent, use_async)

    assert answers(state) == expected  # the answer and the tool result are all there
    assert len(model.calls) == model_calls == 2  # no model call repeated
    handled = [line for line in LOG if line.startswith("handler: ")]
    assert [line for line in LOG if line not in handled] == ran  # every other hook ran
    assert ran.count("tool") == 1
    if hook == "wrap_tool_call" and when == "after":
        assert handled == ["handler: echo: hi"]  # the result the plugin saw is the one kept
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    assert len(lines) == CALLS[hook]  # one line per failure
    assert all(line.startswith(f"plugin 'raiser' failed in {hook}: ValueError: bad; skipped")
               and "\n" not in line for line in lines)


RENAMED = {"wrap_model_call": RenamedModelWrapRaiser, "wrap_tool_call": RenamedToolWrapRaiser}


@pytest.mark.parametrize("mode", ["unfused", "into_model"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("hook,when", [case for case in CASES if case[0] in RENAMED])
def test_a_wrap_hook_with_other_parameters_is_skipped_and_fails_alike(tmp_path, caplog, hook,
                                                                      when, use_async, mode):
    """Isolation wraps a hook whose parameters are not `request, handler` by another
    wrapper, which passes the call on and keeps both policies' behaviour."""
    expected, ran, model_calls = baseline(tmp_path, use_async)
    agent, model = build(tmp_path / "skip", [raiser_spec(RENAMED[hook]),
                                             spec("witness", Witness)],
                         f"raiser: {{when: {when}}}", mode=mode)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = turn(agent, use_async)
    assert answers(state) == expected and len(model.calls) == model_calls == 2
    handled = [line for line in LOG if line.startswith("handler: ")]
    assert [line for line in LOG if line not in handled] == ran
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    assert [line.split(";")[0] for line in lines] \
        == [f"plugin 'raiser' failed in {hook}: ValueError: bad"] * CALLS[hook]

    LOG.clear()
    agent, model = build(tmp_path / "fail", [raiser_spec(RENAMED[hook]),
                                             spec("witness", Witness)],
                         f"raiser: {{when: {when}}}\nplugins: {{raiser: {{on_error: fail}}}}",
                         mode=mode)
    with agent, pytest.raises(PluginHookError) as caught:
        turn(agent, use_async)
    assert str(caught.value) == f"plugin 'raiser' failed in {hook}: ValueError: bad"
    assert (len(model.calls), LOG.count("tool")) == BEFORE_FAILURE[hook, when]


@pytest.mark.parametrize("mode", ["unfused", "into_model"])
@pytest.mark.parametrize("hook,when", CASES)
def test_a_configured_extension_is_skipped_by_default(tmp_path, caplog, hook, when, mode):
    expected, _ran, _calls = baseline(tmp_path, False)
    config = (f"extensions:\n  middlewares:\n"
              f"    - {{use: '{HERE}:{RAISERS[hook].__name__}', name: raiser,"
              f" config: {{when: {when}}}}}\n"
              f"    - {{use: '{HERE}:Witness', name: witness}}\n")
    agent, model = build(tmp_path, [], config, mode=mode)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        state = agent.invoke("go", thread_id="t")
    assert answers(state) == expected and len(model.calls) == 2
    assert LOG.count("tool") == 1
    assert [r.getMessage().split(";")[0] for r in caplog.records if r.name == AUDIT_LOGGER] \
        == [f"plugin 'raiser' failed in {hook}: ValueError: bad"] * CALLS[hook]


# -- fail -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("hook,when", CASES)
def test_a_failing_hook_stops_the_run_with_one_line_naming_plugin_and_hook(
        tmp_path, caplog, hook, when, use_async, mode):
    agent, model = build(tmp_path, [raiser_spec(RAISERS[hook]), spec("witness", Witness)],
                         f"raiser: {{when: {when}}}\nplugins: {{raiser: {{on_error: fail}}}}",
                         mode=mode)
    check_compiled(agent, hook, mode)
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER), \
            pytest.raises(PluginHookError) as caught:
        turn(agent, use_async)
    assert str(caught.value) == f"plugin 'raiser' failed in {hook}: ValueError: bad"
    assert (caught.value.plugin, caught.value.hook) == ("raiser", hook)
    assert isinstance(caught.value.__cause__, ValueError)  # --debug shows where
    assert not [r for r in caplog.records if r.name == AUDIT_LOGGER]
    # What ran before the failure ran once: no model or tool call was repeated.
    assert (len(model.calls), LOG.count("tool")) == BEFORE_FAILURE[hook, when]


def test_the_plugin_may_declare_fail_and_the_operator_still_wins(tmp_path):
    declared = raiser_spec(BeforeModelRaiser, on_error="fail")
    agent, _ = build(tmp_path / "a", [declared])
    with agent, pytest.raises(PluginHookError, match="failed in before_model"):
        agent.invoke("go", thread_id="t")
    agent, _ = build(tmp_path / "b", [declared], "plugins: {raiser: {on_error: skip}}")
    with agent:
        assert answers(agent.invoke("go", thread_id="t"))[-1] == ("ai", "done")


def test_an_antler_error_raised_on_purpose_fails_unchanged(tmp_path):
    agent, _ = build(tmp_path, [raiser_spec(Refusing, on_error="fail")])
    with agent, pytest.raises(Refusing.Refusal) as caught:
        agent.invoke("go", thread_id="t")
    assert str(caught.value) == "bad"


# -- what is not the plugin's failure ---------------------------------------------------------


@pytest.mark.parametrize("policy", ["skip", "fail"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("when", ["after", "rewrap"])
def test_an_error_out_of_the_model_handler_is_not_the_plugins(tmp_path, caplog, when, policy,
                                                               use_async):
    """It propagates unchanged; a plugin that turns it into its own error is skipped as if
    absent (the model's error propagates) or fails the run, by its policy."""
    def provider_down(messages: Any) -> Any:
        raise RuntimeError("provider unavailable")

    agent, model = build(tmp_path, [raiser_spec(ModelWrapRaiser)],
                         f"raiser: {{when: {when}}}\nplugins: {{raiser: {{on_error: {policy}}}}}",
                         script=[provider_down])
    expected = PluginHookError if (when, policy) == ("rewrap", "fail") else RuntimeError
    with agent, caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER), \
            pytest.raises(expected) as caught:
        turn(agent, use_async)
    assert len(model.calls) == 1
    if expected is RuntimeError:
        assert str(caught.value) == "provider unavailable"
    skipped = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    assert skipped == ([] if (when, policy) != ("rewrap", "skip") else [
        "plugin 'raiser' failed in wrap_model_call: ValueError: bad; skipped (on_error: skip): "
        "the handler's exception propagates"])


@pytest.mark.parametrize("policy", ["skip", "fail"])
@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_inside_the_tool_handler_still_pauses_the_run(tmp_path, policy, mode):
    agent, _ = build(
        tmp_path, [raiser_spec(ToolWrapRaiser), spec("witness", Witness)],
        f"raiser: {{when: after}}\nplugins: {{raiser: {{on_error: {policy}}}}}", mode=mode,
        script=[{"content": "", "tool_calls": [{"name": "ask", "args": {"question": "ok?"}}]},
                "done"], tools=[ask])
    with agent:
        paused = agent.invoke("go", thread_id="t")
        assert [i.value for i in paused["__interrupt__"]] == ["ok?"]
        assert "tool" not in LOG
        resume = Command(resume="yes")
        if policy == "fail":
            with pytest.raises(PluginHookError, match="failed in wrap_tool_call"):
                turn(agent, False, resume)
            return
        state = turn(agent, False, resume)
    assert ("tool", "answer: yes") in answers(state) and answers(state)[-1] == ("ai", "done")
    assert LOG.count("tool") == 1


class AskingPlugin(AgentMiddleware):
    """A third-party plugin whose before_model asks the user (LangGraph's interrupt)."""

    def __init__(self, context: Any = None) -> None:
        super().__init__()

    def before_model(self, state: Any, runtime: Any) -> Any:
        if not any(m.type == "ai" for m in state["messages"]):
            return {"messages": [("user", f"approved: {interrupt('approve?')}")]}
        return None


@pytest.mark.parametrize("mode", MODES)
def test_a_plugins_own_interrupt_propagates_and_its_hook_keeps_its_node(tmp_path, mode):
    agent, _ = build(tmp_path, [spec("asking", AskingPlugin), spec("witness", Witness)],
                     mode=mode, script=["done"])
    if mode != "unfused":
        # The compiler still sees `interrupt` in the hook behind the wrapper.
        assert agent.fusion.node_of("asking", "before_model") == "AskingPlugin.before_model"
    with agent:
        paused = agent.invoke("go", thread_id="t")
        assert [i.value for i in paused["__interrupt__"]] == ["approve?"]
        state = turn(agent, False, Command(resume="yes"))
    assert ("human", "approved: yes") in answers(state)


class Ender(AgentMiddleware):
    """Ends the run before the model is called, with a declared jump."""

    def __init__(self, context: Any = None) -> None:
        super().__init__()

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: Any, runtime: Any) -> Any:
        return {"jump_to": "end", "messages": [("ai", "ended early")]}


@pytest.mark.parametrize("mode", MODES)
def test_declared_jumps_still_route_through_the_wrapper(tmp_path, mode):
    agent, model = build(tmp_path, [spec("witness", Witness), spec("ender", Ender)], mode=mode)
    with agent:
        state = agent.invoke("go", thread_id="t")
    assert answers(state)[-1] == ("ai", "ended early") and not model.calls


def test_state_a_hook_keeps_on_self_is_on_the_built_instance(tmp_path):
    agent, _ = build(tmp_path, [raiser_spec(ModelWrapRaiser)], "raiser: {when: after}")
    with agent:
        built = agent.chain.entries[0].middleware
        built.when = "before"  # the running (isolated) instance sees the change
        agent.invoke("go", thread_id="t")
    assert "tool" in LOG


# -- tracing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_trace_shows_a_skipped_hook_as_skipped(tmp_path, mode):
    tracer = Tracer()
    agent, _ = build(tmp_path, [raiser_spec(ToolWrapRaiser), spec("witness", Witness)],
                     "raiser: {when: after}", mode=mode, tracer=tracer)
    with agent:
        agent.invoke("go", thread_id="t")
    events = [e for e in tracer.events if e.plugin == "raiser"]
    assert [(e.hook, e.summary) for e in events] == [
        ("wrap_tool_call", "skipped ValueError: bad: kept the handler's result")]
    assert "raiser.wrap_tool_call" in tracer.render()
    assert [e.hook for e in tracer.events if e.plugin == "witness"].count("before_model") == 2


def test_the_trace_shows_a_failed_hook_as_raised(tmp_path):
    tracer = Tracer()
    agent, _ = build(tmp_path, [raiser_spec(BeforeModelRaiser, on_error="fail")],
                     tracer=tracer)
    with agent, pytest.raises(PluginHookError):
        agent.invoke("go", thread_id="t")
    event = next(e for e in tracer.events if e.plugin == "raiser")
    assert event.summary == ("raised PluginHookError: plugin 'raiser' failed in before_model: "
                             "ValueError: bad")


# -- policies ---------------------------------------------------------------------------------


def test_antlers_own_plugins_fail_by_default():
    own = builtin_plugins_manifest().plugins
    assert own and {error_policy(s) for s in own} == {"fail"}


def on_error(**policies: str) -> dict[str, PluginLoadSettings]:
    """A `plugins:` table; `acme_antler` stands for the distribution `acme-antler`."""
    return {name.replace("acme_antler", "acme-antler"): PluginLoadSettings.model_validate(
        {"on_error": policy}) for name, policy in policies.items()}


def test_policy_defaults_and_overrides():
    third = spec("raiser", Raiser)
    extension = PluginSpec(name="ext", factory=f"{HERE}:Raiser",
                           provenance=Provenance(source="antler.yaml", line=3))
    assert error_policy(third) == "skip"
    assert error_policy(extension) == "skip"
    assert error_policy(spec("raiser", Raiser, enabled="always")) == "fail"
    assert error_policy(spec("raiser", Raiser, on_error="fail")) == "fail"
    # The operator wins; the most specific name set wins among plugin, entry point and
    # distribution (compared as packaging compares distribution names).
    assert error_policy(third, on_error(acme_antler="fail")) == "fail"
    assert error_policy(third, on_error(Acme_Antler="fail")) == "fail"
    assert error_policy(third, on_error(acme_antler="fail", acme="skip")) == "skip"
    assert error_policy(third, on_error(acme="fail", raiser="skip")) == "skip"
    assert error_policy(spec("raiser", Raiser, on_error="fail"), on_error(raiser="skip")) \
        == "skip"
    assert error_policy(third, {"raiser": PluginLoadSettings(required=True)}) == "skip"


# -- the command line -------------------------------------------------------------------------

FLAKY_PLUGIN = '''
    from antler.plugin_api.hookspecs import hookimpl
    from antler.plugin_api.spec import PluginSpec


    @hookimpl
    def antler_plugin_specs():
        return [PluginSpec(name="flaky_audit", factory="flaky_antler.middleware:FlakyAudit",
                           summary="Audits every model call, badly", hooks=["before_model"])]
'''

FLAKY_MIDDLEWARE = '''
    from langchain.agents.middleware import AgentMiddleware


    class FlakyAudit(AgentMiddleware):
        def __init__(self, context):
            super().__init__()

        def before_model(self, state, runtime):
            raise ValueError("audit store unreachable")
'''


@pytest.mark.parametrize("policy", ["default", "fail"])
def test_antler_run_prints_one_line_for_a_failing_plugin(tmp_path, site, policy):
    """A third-party plugin is skipped by default; its operator can make it fail the run."""
    from click.testing import CliRunner

    from antler.cli import cli

    site.distribution("flaky-antler", files={
        "flaky_antler/__init__.py": "", "flaky_antler/plugin.py": FLAKY_PLUGIN,
        "flaky_antler/middleware.py": FLAKY_MIDDLEWARE,
    }, entry_points={"antler.plugins": {"flaky": "flaky_antler.plugin"}})
    script = tmp_path / "script.yaml"
    script.write_text("- The answer.\n", encoding="utf-8")
    config = tmp_path / "antler.yaml"
    config.write_text("plugins: {flaky-antler: {on_error: fail}}\n" if policy == "fail" else "",
                      encoding="utf-8")
    args = ["run", "hello", "--model", f"scripted:{script}", "--home", str(tmp_path / "home"),
            "--config", str(config)]

    result = CliRunner().invoke(cli, args)
    if policy == "default":
        assert result.exit_code == 0, result.stderr
        assert result.stdout.strip() == "The answer."
        return
    line = "error: plugin 'flaky_audit' failed in before_model: ValueError: audit store unreachable"
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == line
    assert "Traceback" not in result.stderr
    debug = CliRunner().invoke(cli, ["--debug", *args])
    assert debug.exit_code == 1 and "Traceback" in debug.stderr
    assert 'raise ValueError("audit store unreachable")' in debug.stderr  # the original


# -- the write guard's reading of a wrap hook's result ---------------------------------------


def _messages_carrying(command: Any) -> list[Any]:
    from langchain_core.messages import AIMessage, ToolMessage

    in_dict = ToolMessage("mine", tool_call_id="c")
    object.__setattr__(in_dict, "command", command)  # in the instance's own dictionary
    return [ToolMessage("mine", tool_call_id="c", command=command),  # an extra field
            AIMessage("mine", command=command), in_dict]


def test_the_wrap_guard_finds_a_command_wherever_attribute_lookup_would():
    """A message of the hook's own is read without pydantic's failing lookup, and still a
    `Command` it carries (an extra field, or set on the instance) is found and refused as
    `getattr` finds it; a message carrying none, or something else, passes."""
    from langchain.agents.middleware.types import ExtendedModelResponse, ModelResponse
    from langchain_core.messages import AIMessage, ToolMessage

    from antler.errors import StateWriteError
    from antler.runtime.isolation import _command_of, _WriteGuard

    guard = _WriteGuard("raiser", frozenset({"messages"}), {"title": ["title"]})
    foreign = Command(update={"title": "x"})
    handled = ToolMessage("the tool's", tool_call_id="c")
    for result in _messages_carrying(foreign):
        with pytest.raises(StateWriteError) as caught:
            guard.check_wrap(result, handled, "wrap_tool_call")
        assert caught.value.keys == ["title"]
    for result in [*_messages_carrying("not a command"), ToolMessage("mine", tool_call_id="c"),
                   AIMessage("mine"), ModelResponse(result=[AIMessage("mine")]), None]:
        guard.check_wrap(result, handled, "wrap_tool_call")  # nothing to refuse

    own = Command(update={"messages": []})
    cases = [*_messages_carrying(foreign), *_messages_carrying(own), *_messages_carrying(1),
             ToolMessage("m", tool_call_id="c"), AIMessage("m"), ModelResponse(result=[]),
             ExtendedModelResponse(model_response=ModelResponse(result=[]), command=foreign),
             foreign, None, "text"]
    for result in cases * 2:  # the second time through the reader kept for its class
        expected = getattr(result, "command", result)
        assert _command_of(result) is (expected if isinstance(expected, Command) else None)


def test_result_classes_made_on_the_fly_do_not_pile_up_in_the_guard():
    from langchain_core.messages import ToolMessage

    from antler.runtime import isolation

    foreign = Command(update={"title": "x"})
    for index in range(isolation._KEPT_READERS + 50):
        made = type(f"Made{index}", (ToolMessage,), {})
        assert isolation._command_of(made("m", tool_call_id="c", command=foreign)) is foreign
        assert isolation._command_of(made("m", tool_call_id="c")) is None
    assert len(isolation._COMMAND_READERS) <= isolation._KEPT_READERS
