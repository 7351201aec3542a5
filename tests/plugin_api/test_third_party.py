"""A third-party plugin shipped as a real distribution, healthy and broken.

Each test writes a tiny `acme-antler` distribution (package + `.dist-info` with an
`antler.plugins` entry point) into a temporary site directory on `sys.path`, and
discovers it through stevedore exactly as an operator's environment would.
"""

from __future__ import annotations

import sys

import pytest
from langchain.agents.middleware import AgentMiddleware

from antler.chain import build_chain, plan_chain
from antler.chain.config import config_schema, load_config, parse_config
from antler.errors import ConfigError, DiscoveryError
from antler.plugin_api.hookspecs import hookimpl
from antler.plugin_api.spec import PluginSpec
from antler.testing import assert_adjacent, assert_before, assert_in_slot, slot_members

ACME = "acme-antler"
ACME_EP = "acme"

MANIFEST = """
    # Acme's plugins, in Antler's manifest format.
    api_version: 1
    plugins:
      - name: acme
        factory: "acme_antler.middleware:AcmeMiddleware"
        summary: Greets the model before every call
        config_key: acme
        config_model: "acme_antler.settings:AcmeSettings"
        hooks: [before_model]
{order}"""

SETTINGS = '''
    from pydantic import BaseModel, ConfigDict, Field


    class AcmeSettings(BaseModel):
        """`acme:` section."""

        model_config = ConfigDict(extra="forbid")

        greeting: str = Field("hello", description="What Acme says to the model.")
        max_calls: int = Field(3, description="Calls per turn.")
'''

MIDDLEWARE = '''
    from langchain.agents.middleware import AgentMiddleware


    class AcmeMiddleware(AgentMiddleware):
        """Acme's middleware; built from a BuildContext like every plugin factory."""

        def __init__(self, context):
            super().__init__()
            self.settings = context.config
            self.chain = context.chain

        def before_model(self, state, runtime):
            return None
'''

PLUGIN = '''
    """Acme's Antler entry point: declares specs and hooks; imports no middleware."""

    from pydantic import BaseModel, ConfigDict, Field

    from antler.plugin_api.hookspecs import hookimpl
    from antler.plugin_api.manifest import load_package_manifest


    class AcmeShared(BaseModel):
        """Limits shared by every Acme plugin."""

        model_config = ConfigDict(extra="forbid")

        ceiling: int = Field(10, description="Upper bound for acme.max_calls.")


    @hookimpl
    def antler_plugin_specs():
        return load_package_manifest(__package__)


    @hookimpl
    def antler_config_sections():
        return {"acme_shared": AcmeShared}


    @hookimpl
    def antler_validate_config(config):
        acme, shared = config.section("acme"), config.section("acme_shared") or AcmeShared()
        if acme is not None and acme.max_calls > shared.ceiling:
            return [f"{config.locate('acme', 'max_calls')}: acme.max_calls ({acme.max_calls}) "
                    f"exceeds acme_shared.ceiling ({shared.ceiling}); lower it or raise the "
                    "ceiling"]
        return None


    @hookimpl
    def antler_tools(context):
        from langchain_core.tools import tool

        greeting = context.config.greeting if context.config is not None else "hello"

        @tool
        def acme_lookup(query: str) -> str:
            """Look a term up in Acme's catalogue."""
            return f"{greeting}: {query}"

        return [acme_lookup]
'''


def acme_files(package: str = "acme_antler", plugin: str = PLUGIN, order: str = "",
               manifest: str = MANIFEST) -> dict[str, str]:
    return {
        f"{package}/__init__.py": '"""Acme: an Antler plugin distribution."""\n',
        f"{package}/plugin.py": plugin,
        f"{package}/settings.py": SETTINGS,
        f"{package}/middleware.py": MIDDLEWARE,
        f"{package}/plugin-manifest.yaml": manifest.format(order=order),
    }


def add_acme(site, name: str = ACME, entry_point: str = ACME_EP, **files) -> None:
    package = files.get("package", "acme_antler")
    site.distribution(name, "1.0", files=acme_files(**files),
                      entry_points={"antler.plugins": {entry_point: f"{package}.plugin"}})


# -- in-process neighbours, so placement is checked against real plugins --------------------


class TailGuard(AgentMiddleware):
    """Stands in for the terminal-response tail."""

    def __init__(self, context=None):
        super().__init__()


class EarlyGuard(TailGuard):
    """Stands in for a built-in guard placed before `@guards_end`."""


class CustomProbe(AgentMiddleware):
    """A programmatic custom middleware (custom slot)."""


class NeighbourPlugins:
    @hookimpl
    def antler_plugin_specs(self):
        return [
            PluginSpec(name="early_guard", factory=f"{__name__}:EarlyGuard",
                       order={"before": ["@guards_end"]}),
            PluginSpec(name="tail_guard", factory=f"{__name__}:TailGuard",
                       order={"after": ["@tail_start"]}),
        ]


NEIGHBOURS = [("neighbours", NeighbourPlugins())]


@pytest.fixture
def acme_site(site):
    add_acme(site)
    return site


# -- the healthy distribution ---------------------------------------------------------------


def test_discovered_with_distribution_name_and_version(acme_site, antler_discover):
    registry = antler_discover()

    source = registry.sources["acme"]
    assert (source.distribution, source.version, source.entry_point) == (ACME, "1.0", ACME_EP)
    assert registry.entry_point_plugins[ACME_EP] == ["acme"]
    assert [d for d in registry.diagnostics if d.distribution == ACME] == []
    provenance = registry.specs["acme"].provenance
    assert provenance.source == "acme_antler/plugin-manifest.yaml"
    assert provenance.line == 4  # the `- name: acme` line
    assert "acme_antler.middleware" not in sys.modules  # discovery imports specs only


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_unconstrained_plugin_lands_in_the_extension_slot(acme_site, antler_discover,
                                                          antler_plan, chain):
    registry = antler_discover(extra_plugins=NEIGHBOURS)  # with Antler's own plugins

    plan = antler_plan(registry=registry, chain=chain, custom_middlewares=[CustomProbe()])

    assert_in_slot(plan, "acme", "extensions")
    assert_in_slot(plan, "custom_0_custom_probe", "custom")
    assert_before(plan, "early_guard", "custom_0_custom_probe")
    assert_before(plan, "custom_0_custom_probe", "acme")  # after @custom_end
    assert_before(plan, "acme", "tail_guard")  # before @tail_start
    assert "acme slot bound: extensions (after @custom_end)" in plan.explain("acme")
    assert "acme slot bound: extensions (before @tail_start)" in plan.explain("acme")
    assert ("declared at acme_antler/plugin-manifest.yaml:4 (distribution acme-antler 1.0, "
            "entry point 'acme')") in plan.explain("acme")
    assert "acme_antler.middleware" not in sys.modules  # planning imports nothing


def test_third_party_ranks_after_configured_neighbours_in_its_slot(site, antler_discover,
                                                                   antler_plan):
    """Third-party plugins tie-break after built-ins, but before configured extensions."""
    add_acme(site)
    registry = antler_discover(extra_plugins=NEIGHBOURS, builtins=False)

    plan = antler_plan(f"extensions: {{middlewares: ['{__name__}:CustomProbe']}}",
                       registry=registry)

    assert_adjacent(plan, "acme", "custom_probe")
    assert slot_members(plan, "extensions") == ["acme", "custom_probe"]


CONSTRAINED = """\
        order:
          after: ["@tail_start"]
          immediately_before: tail_guard
        chain_overrides:
          subagent:
            order: {immediately_before: null, after: ["@guards_end"], before: ["@custom_end"]}
"""


def test_declared_constraints_are_honoured_per_chain(site, antler_discover, antler_plan):
    add_acme(site, order=CONSTRAINED)
    registry = antler_discover(extra_plugins=NEIGHBOURS, builtins=False)

    lead = antler_plan(registry=registry, chain="lead")
    sub = antler_plan(registry=registry, chain="subagent",
                      custom_middlewares=[CustomProbe()])

    assert_adjacent(lead, "acme", "tail_guard")
    assert "acme" not in slot_members(lead, "extensions")
    explained = lead.explain("acme")
    assert "acme declares immediately_before: tail_guard" in explained
    assert "distribution acme-antler 1.0, entry point 'acme'" in explained
    assert_in_slot(sub, "acme", "custom")  # the per-chain override moved it
    assert_before(sub, "early_guard", "acme")


def test_config_section_validates_with_location_and_suggestion(acme_site, antler_discover,
                                                               tmp_path):
    registry = antler_discover(builtins=False)
    path = tmp_path / "antler.yaml"
    path.write_text("acme:\n  greeting: hi\n  max_cals: 4\n", encoding="utf-8")

    with pytest.raises(ConfigError) as caught:
        load_config(path, registry)

    message = str(caught.value)
    assert f"{path}:3:3: acme.max_cals: unknown key 'max_cals'" in message
    assert "(did you mean 'max_calls'?)" in message

    path.write_text("acme:\n  greeting: hi\n  max_calls: many\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"antler\.yaml:3:3: acme\.max_calls: expects a whole "
                                          r"number \(Calls per turn\), e\.g\. `max_calls: 3`; "
                                          r"got a string \('many'\)"):
        load_config(path, registry)


def test_contributed_config_section_and_cross_section_check(acme_site, antler_discover):
    registry = antler_discover(builtins=False)

    config = parse_config("acme_shared: {ceiling: 5}\nacme: {max_calls: 5}\n", registry)
    assert config.section("acme_shared").ceiling == 5

    with pytest.raises(ConfigError) as caught:
        parse_config("acme_shared: {ceiling: 5}\nacme: {max_calls: 6}\n", registry, "op.yaml")
    assert "op.yaml:2:8: acme.max_calls (6) exceeds acme_shared.ceiling (5)" in str(caught.value)

    with pytest.raises(ConfigError, match=r"unknown key 'celing' \(did you mean 'ceiling'\?\)"):
        parse_config("acme_shared: {celing: 5}\n", registry)

    schema = config_schema(registry)
    assert {"acme", "acme_shared"} <= set(schema["properties"])
    assert "acme: Greets the model before every call" in schema["properties"]["acme"][
        "description"]


def test_build_instantiates_it_and_contributes_its_tool(acme_site, antler_discover,
                                                       antler_build):
    registry = antler_discover(extra_plugins=NEIGHBOURS, builtins=False)

    for chain in ("lead", "subagent"):
        built = antler_build("acme: {greeting: bonjour}", chain=chain, registry=registry)

        middleware = built.middlewares[built.names.index("acme")]
        assert type(middleware).__module__ == "acme_antler.middleware"
        assert (middleware.settings.greeting, middleware.chain) == ("bonjour", chain)
        assert built.entries[built.names.index("acme")].hooks == ["before_model"]
        [tool] = built.tools
        assert tool.name == "acme_lookup"
        assert tool.invoke({"query": "anvil"}) == "bonjour: anvil"


def test_disabled_plugin_module_is_never_imported(acme_site, antler_discover, antler_build):
    registry = antler_discover(extra_plugins=NEIGHBOURS, builtins=False)
    assert "acme_antler.plugin" in sys.modules  # the entry point was loaded...

    built = antler_build("acme:\n  enabled: false\n", registry=registry)

    assert "acme_antler.middleware" not in sys.modules  # ...its middleware never was
    assert "acme" not in built.names
    assert built.tools == []  # a plugin outside the chain contributes no tools
    assert built.plan.explain("acme").startswith(
        "acme is not in the lead chain: disabled by config (<test config>:2:3)")


# -- broken distributions -------------------------------------------------------------------

BETA_PLUGIN = '''
    from antler.plugin_api.hookspecs import hookimpl
    from antler.plugin_api.spec import PluginSpec


    @hookimpl
    def antler_plugin_specs():
        return [PluginSpec(name="beta", factory="beta_antler.middleware:BetaMiddleware")]
'''

BETA_MIDDLEWARE = '''
    from langchain.agents.middleware import AgentMiddleware


    class BetaMiddleware(AgentMiddleware):
        def __init__(self, context):
            super().__init__()
'''


def specs_hook(body: str) -> str:
    return f'''
    from antler.plugin_api.hookspecs import hookimpl


    @hookimpl
    def antler_plugin_specs():
        {body}
'''


FORK_MANIFEST = """
    api_version: 1
    plugins:
      - {{name: acme_fork_extra, factory: "acme_fork.middleware:AcmeMiddleware"}}
      - {{name: acme, factory: "acme_fork.middleware:AcmeMiddleware"}}
{order}"""

BROKEN = {
    "import_error": dict(
        plugin='from acme_antler import _native  # a compiled extension that did not build\n',
        cause="importing 'acme_antler.plugin' failed: ImportError: cannot import name "
              "'_native' from 'acme_antler'"),
    "hook_raises": dict(
        plugin=specs_hook('raise RuntimeError("licence file /etc/acme.lic is missing")'),
        cause="antler_plugin_specs() raised RuntimeError: licence file /etc/acme.lic is "
              "missing"),
    "wrong_type": dict(
        plugin=specs_hook('return "acme"'),
        cause="antler_plugin_specs() returned str; it must return a PluginSpec, a list of "
              "PluginSpec (or dicts), or a Manifest"),
    "invalid_spec": dict(
        plugin=specs_hook('return [{"name": "Acme", "factory": "acme_antler.middleware"}]'),
        cause="plugin name 'Acme' must be snake_case"),
    "unknown_hook": dict(
        plugin=specs_hook("return []").replace("antler_plugin_specs", "antler_plugin_spec"),
        cause="implements unknown hook(s) ['antler_plugin_spec'] (did you mean "
              "'antler_plugin_specs'?)"),
}


@pytest.fixture(params=[*BROKEN, "duplicate_name"])
def broken(request, site):
    """(distribution, entry point, cause) of one broken variant, next to healthy `beta`."""
    site.distribution("beta-antler", files={"beta_antler/__init__.py": "",
                                            "beta_antler/plugin.py": BETA_PLUGIN,
                                            "beta_antler/middleware.py": BETA_MIDDLEWARE},
                      entry_points={"antler.plugins": {"beta": "beta_antler.plugin"}})
    if request.param == "duplicate_name":
        add_acme(site)
        add_acme(site, name="acme-fork", entry_point="acme_fork", package="acme_fork",
                 manifest=FORK_MANIFEST)
        return "acme-fork", "acme_fork", ("plugin name 'acme' is also declared by distribution "
                                          "'acme-antler'")
    variant = BROKEN[request.param]
    add_acme(site, plugin=variant["plugin"])
    return ACME, ACME_EP, variant["cause"]


def test_broken_distribution_is_diagnosed_by_name(broken, antler_discover):
    distribution, entry_point, cause = broken

    registry = antler_discover()

    [diagnostic] = [d for d in registry.diagnostics if d.distribution == distribution]
    assert diagnostic.entry_point == entry_point
    assert cause in diagnostic.cause
    assert (f"distribution {distribution!r}, entry point {entry_point!r} in group "
            f"'antler.plugins': ") in str(diagnostic)


def test_broken_distribution_fails_open_by_default(broken, antler_discover):
    registry = antler_discover(builtins=False)

    assert "beta" in registry.specs
    registry.raise_for_required()  # nothing required, nothing raised
    built = build_chain(registry=registry)
    assert "beta" in built.names
    if broken[0] == "acme-fork":  # the first declaration of the name still stands...
        assert registry.sources["acme"].distribution == ACME
        # ...and only the fork's clashing plugin is out: its other plugin stays
        assert registry.sources["acme_fork_extra"].distribution == "acme-fork"
    else:
        assert "acme" not in registry.specs


@pytest.mark.parametrize("by", ["entry point", "distribution", "import-style distribution"])
def test_broken_distribution_marked_required_stops_the_build(broken, antler_discover, by):
    distribution, entry_point, cause = broken
    registry = antler_discover(builtins=False)
    key = {"entry point": entry_point, "distribution": distribution,
           "import-style distribution": distribution.replace("-", "_")}[by]
    config = parse_config(f"plugins:\n  {key}: {{required: true}}\n", registry)

    with pytest.raises(DiscoveryError) as caught:
        build_chain(config, registry=registry)

    message = str(caught.value)
    assert f"distribution {distribution!r}, entry point {entry_point!r}" in message
    assert cause in message
    with pytest.raises(DiscoveryError):
        registry.raise_for_required({key})
    # requiring the healthy distribution is fine
    build_chain(parse_config("plugins:\n  beta: {required: true}\n", registry),
                registry=registry)
    assert plan_chain(registry=registry).order.count("beta") == 1


def test_requiring_a_distribution_that_is_not_installed_is_a_config_error(acme_site,
                                                                          antler_discover):
    registry = antler_discover(builtins=False)

    with pytest.raises(ConfigError) as caught:
        parse_config("plugins:\n  acme-antlr: {required: true}\n", registry, "op.yaml")

    assert ("op.yaml:2:3: plugins.acme-antlr: no installed plugin, entry point or distribution "
            "is named 'acme-antlr' (did you mean 'acme-antler'?)") in str(caught.value)


# -- the pytest plugin, as a third party uses it ---------------------------------------------


def test_the_documented_pytest_plugin_example_passes(acme_site, tmp_path):
    """Run `antler.testing`'s docstring example in a fresh pytest session against acme."""
    import os
    import subprocess
    import textwrap

    import antler.testing

    example = antler.testing.__doc__.split("::\n", 1)[1]
    project = tmp_path / "acme-tests"
    project.mkdir()
    (project / "test_acme.py").write_text(textwrap.dedent(example), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(acme_site.path), "XDG_CACHE_HOME": str(tmp_path)}

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_acme.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
