"""What the platform does with plugins it cannot use, and with plugins the operator switches off.

Optional plugins whose ordering fails are left out of the chain with the problem
recorded, required ones stop the build with every problem listed; a factory that
does not import is handled the same way at build time. `plugins: {NAME: {enabled:
false}}` switches off a plugin, entry point or distribution, never an `always` one.
Hooks go through pluggy: a switched-off distribution is not asked anything, and a
platform hook that raises costs an optional distribution only its contribution.
"""

from __future__ import annotations

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import tool

from antler.chain import build_chain, plan_chain, prompt_sections, select_tools
from antler.chain.config import parse_config
from antler.errors import BuildError, ConfigError, CycleError, DiscoveryError, ResolutionError
from antler.plugin_api.hookspecs import hookimpl
from antler.plugin_api.spec import PluginSpec
from tests.plugin_api.test_third_party import ACME, NEIGHBOURS, add_acme

HERE = __name__


class Plain(AgentMiddleware):
    def __init__(self, context=None):
        super().__init__()


class Other(Plain):
    pass


def spec(name: str, factory: str = f"{HERE}:Plain", **fields) -> PluginSpec:
    return PluginSpec(name=name, factory=factory, **fields)


class Specs:
    """An in-process entry point contributing `specs`, and recording what it is asked."""

    def __init__(self, *specs: PluginSpec) -> None:
        self.specs = list(specs)
        self.resolved: list[list[str]] = []
        self.tool_contexts: list[str] = []

    @hookimpl
    def antler_plugin_specs(self):
        return self.specs

    @hookimpl
    def antler_chain_resolved(self, chain):
        self.resolved.append(chain.names)

    @hookimpl
    def antler_tools(self, context):
        self.tool_contexts.append(context.spec.name)

        @tool
        def specs_probe() -> str:
            """Say which plugin contributed this tool."""
            return context.spec.name

        return [specs_probe]


def registry_of(antler_discover, **entry_points: Specs):
    return antler_discover(extra_plugins=list(entry_points.items()), builtins=False)


# -- ordering problems -----------------------------------------------------------------------


def test_optional_plugins_on_a_cycle_are_left_out_and_the_rest_resolves(antler_discover):
    registry = registry_of(antler_discover, extra=Specs(
        spec("ring_a", order={"after": ["ring_b"]}),
        spec("ring_b", order={"after": ["ring_a"]}),
        spec("typo", factory=f"{HERE}:Other", order={"before": ["rign_a"]}),
        spec("fine", factory=f"{HERE}:Other"),
    ))

    plan = plan_chain(registry=registry)

    assert plan.order == ["fine"]
    assert {name: plan.excluded[name].kind for name in ("ring_a", "ring_b", "typo")} == \
        dict.fromkeys(("ring_a", "ring_b", "typo"), "broken")
    by_plugins = {problem.plugins: problem for problem in plan.problems}
    assert "(did you mean 'ring_a'?)" in by_plugins[("typo",)].message
    [cycle] = [p for p in plan.problems if "ring_a" in p.plugins]
    assert sorted(cycle.plugins) == ["ring_a", "ring_b"]
    assert cycle.message.startswith("ordering constraints form a cycle in the lead chain")
    assert plan.excluded["ring_a"].reason.startswith(
        "excluded as broken: ordering constraints form a cycle")


def test_only_the_optional_side_of_a_cycle_with_a_required_plugin_is_left_out(antler_discover):
    registry = registry_of(antler_discover, extra=Specs(
        spec("core_guard", enabled="always"),
        spec("intruder", factory=f"{HERE}:Other",
             order={"after": ["core_guard"], "before": ["core_guard"]}),
    ))

    plan = plan_chain(registry=registry)

    assert plan.order == ["core_guard"]
    assert plan.excluded["intruder"].kind == "broken"
    assert plan.required == {"core_guard"}


def test_required_offenders_stop_planning_with_every_problem_listed(antler_discover):
    registry = registry_of(antler_discover, extra=Specs(
        spec("ring_a", order={"after": ["ring_b"]}),
        spec("ring_b", order={"after": ["ring_a"]}),
        spec("typo", factory=f"{HERE}:Other", order={"before": ["rign_a"]}),
    ))
    required = parse_config("plugins:\n  extra: {required: true}\n", registry)

    with pytest.raises(ResolutionError) as caught:
        plan_chain(required, registry=registry)

    message = str(caught.value)
    assert message.startswith("the lead chain cannot be resolved: 2 problems with required "
                              "plugins\n- typo: ")
    assert "(did you mean 'ring_a'?)" in message and "form a cycle" in message
    assert set(caught.value.plugins) == {"ring_a", "ring_b", "typo"}
    kept = plan_chain(required, registry=registry, keep_going=True)
    assert kept.order == [] and [p.required for p in kept.problems] == [True, True]


def test_a_single_required_problem_is_raised_as_the_resolver_raised_it(antler_discover):
    registry = registry_of(antler_discover, extra=Specs(
        spec("ring_a", order={"after": ["ring_b"]}, enabled="always"),
        spec("ring_b", order={"after": ["ring_a"]}, enabled="always"),
    ))

    with pytest.raises(CycleError):
        plan_chain(registry=registry)


# -- factories that do not import ------------------------------------------------------------


def test_an_optional_factory_that_does_not_import_is_left_out_at_build(antler_discover):
    registry = registry_of(antler_discover, extra=Specs(
        spec("fine"),
        spec("needs_native", factory="acme_native_ext.middleware:Fast",
             order={"after": ["fine"]}),
        spec("follower", factory=f"{HERE}:Other", order={"requires": ["needs_native"]}),
    ))

    built = build_chain(registry=registry)

    assert built.names == ["fine"]
    excluded = built.plan.excluded
    assert excluded["needs_native"].kind == "load_failed"
    assert "module 'acme_native_ext' is not installed" in excluded["needs_native"].reason
    # planned again without it, so what depended on it is out with its own reason
    assert excluded["follower"].kind == "broken"
    stages = {problem.plugins: problem.stage for problem in built.plan.problems}
    assert stages == {("needs_native",): "load", ("follower",): "order"}


def test_required_factories_that_do_not_import_are_all_listed(antler_discover):
    registry = registry_of(antler_discover, extra=Specs(
        spec("first_missing", factory="acme_missing_one:Thing", enabled="always"),
        spec("second_missing", factory="acme_missing_two:Thing"),
        spec("fine"),
    ))
    config = parse_config("plugins:\n  second_missing: {required: true}\n", registry)

    with pytest.raises(BuildError) as caught:
        build_chain(config, registry=registry)

    lines = str(caught.value).splitlines()
    assert [line.split("'")[1] for line in lines] == ["first_missing", "second_missing"]
    assert "module 'acme_missing_two' is not installed" in lines[1]


# -- switching off ---------------------------------------------------------------------------


def test_an_always_plugin_cannot_be_switched_off(antler_registry):
    with pytest.raises(ConfigError) as caught:
        parse_config("plugins:\n  input_provenance: {enabled: false}\n", antler_registry,
                     "op.yaml")
    message = str(caught.value)
    assert ("op.yaml:2:22: plugins.input_provenance.enabled: plugin 'input_provenance' "
            "cannot be switched off: without the record") in message
    assert "Remove `enabled: false`." in message

    with pytest.raises(ConfigError) as caught:
        parse_config("plugins:\n  antler: {enabled: false}\n", antler_registry, "op.yaml")
    assert ("op.yaml:2:12: plugins.antler.enabled: 'antler' holds plugins that cannot be "
            "switched off ('clarification', 'dangling_tool_call', 'durable_context', "
            "'input_provenance', ") in \
        str(caught.value)


def test_an_optional_builtin_is_switched_off_with_the_config_line(antler_registry):
    config = parse_config("plugins:\n  title: {enabled: false}\n", antler_registry, "op.yaml")

    plan = plan_chain(config, registry=antler_registry)

    assert "title" not in plan.order
    assert plan.excluded["title"].kind == "disabled"
    assert plan.excluded["title"].reason == (
        "switched off by config (op.yaml:2:11: plugins.title.enabled)")
    assert plan.explain("title").startswith("title is not in the lead chain: switched off")


def test_a_switched_off_distribution_is_not_imported_asked_or_built(site, antler_discover):
    add_acme(site)
    observer = Specs(spec("observed"))
    registry = antler_discover(extra_plugins=[*NEIGHBOURS, ("observer", observer)],
                               builtins=False)
    # acme's own cross-section check would refuse max_calls 99: it is not asked
    text = (f"plugins:\n  {ACME}: {{enabled: false}}\n  observer: {{enabled: false}}\n"
            "acme: {max_calls: 99}\n")
    config = parse_config(text, registry)

    built = build_chain(config, registry=registry)

    assert "acme" not in built.names and "observed" not in built.names
    assert built.plan.excluded["acme"].reason.startswith("switched off by config (<config>:2:")
    assert [tool.name for tool in built.tools] == []
    assert observer.resolved == [] and observer.tool_contexts == []
    with pytest.raises(ConfigError, match=r"exceeds acme_shared\.ceiling"):
        parse_config("acme: {max_calls: 99}\n", registry)


def test_a_plugin_entry_keeps_one_plugin_of_a_switched_off_distribution(antler_discover):
    both = Specs(spec("kept"), spec("dropped", factory=f"{HERE}:Other"))
    registry = registry_of(antler_discover, pair=both)
    config = parse_config("plugins:\n  pair: {enabled: false}\n  kept: {enabled: true}\n",
                          registry)

    built = build_chain(config, registry=registry)

    assert built.names == ["kept"]
    assert built.plan.excluded["dropped"].reason.startswith(
        "switched off by config (<config>:2:10: plugins.pair.enabled)")
    assert both.resolved == [["kept"]]  # the entry point is still asked: one plugin is on
    assert both.tool_contexts == ["kept"]  # with the context of its plugin in the chain
    assert [tool.invoke({}) for tool in built.tools] == ["kept"]


# -- platform hooks that raise ---------------------------------------------------------------


class BrokenHooks(Specs):
    """Healthy specs, but every platform hook after discovery raises."""

    @hookimpl
    def antler_validate_config(self, config):
        raise KeyError("acme_endpoint")

    @hookimpl
    def antler_tools(self, context):
        raise RuntimeError("tool catalogue unreachable")

    @hookimpl
    def antler_prompt_sections(self, context):
        raise RuntimeError("template missing")


def test_an_optional_distribution_whose_hooks_raise_loses_only_its_contribution(
        antler_discover):
    good = Specs(spec("good"))
    registry = registry_of(antler_discover, good=good,
                           shaky=BrokenHooks(spec("shaky", factory=f"{HERE}:Other")))

    config = parse_config("{}\n", registry)  # its config check raised: the config still loads
    built = build_chain(config, registry=registry)

    assert built.names == ["good", "shaky"]  # its middleware is fine, so it stays
    assert [tool.invoke({}) for tool in built.tools] == ["good"]
    assert prompt_sections(built) == []
    causes = sorted(d.cause for d in registry.diagnostics if d.entry_point == "shaky")
    assert causes == [
        "antler_prompt_sections() raised RuntimeError: template missing; what it contributes "
        "is left out",
        "antler_tools() raised RuntimeError: tool catalogue unreachable; what it contributes "
        "is left out",
        "antler_validate_config() raised KeyError: 'acme_endpoint'; what it contributes is "
        "left out"]
    assert good.resolved == [["good", "shaky"]]


def test_a_required_distribution_whose_hook_raises_stops_with_its_name(antler_discover):
    registry = registry_of(antler_discover,
                           shaky=BrokenHooks(spec("shaky", factory=f"{HERE}:Other")))

    with pytest.raises(DiscoveryError) as caught:
        parse_config("plugins:\n  shaky: {required: true}\n", registry)

    assert ("distribution '<in-process>', entry point 'shaky' in group 'antler.plugins': "
            "antler_validate_config() raised KeyError") in str(caught.value)


class NarrowingFails(Specs):
    @hookimpl
    def antler_select_tools(self, context, tools):
        raise RuntimeError("policy server down")


class Vetoes(Specs):
    @hookimpl
    def antler_chain_resolved(self, chain):
        raise BuildError("acme refuses a chain without acme_audit")


def test_a_tool_selection_that_raises_fails_closed(antler_discover):
    registry = registry_of(antler_discover, gate=NarrowingFails(spec("gate")))
    built = build_chain(registry=registry)

    with pytest.raises(BuildError) as caught:
        select_tools(built, list(built.tools))

    message = str(caught.value)
    assert message.startswith("plugin 'gate' [entry point gate (distribution <in-process>, "
                              "entry point 'gate')]: antler_select_tools() raised RuntimeError: "
                              "policy server down; the agent is not built")
    assert "`plugins: {gate: {enabled: false}}`" in message


def test_a_veto_from_chain_resolved_is_shown_as_is(antler_discover):
    registry = registry_of(antler_discover, veto=Vetoes(spec("vetoing")))

    with pytest.raises(BuildError, match=r"^acme refuses a chain without acme_audit$"):
        build_chain(registry=registry)
