"""`antler.testing`: the pytest plugin third parties use to test their Antler plugins.

Installing Antler registers this module as a pytest plugin (entry point
`antler` in the `pytest11` group), so its fixtures are available in every
test session without a `conftest.py`. Importing it is cheap: Antler's modules
(and LangChain) are imported only when a fixture or helper runs.

Fixtures:

`antler_registry`
    A fresh `discover()` of every installed plugin, with stevedore's entry
    point caches isolated to the test (in memory and on disk), so a
    distribution installed or put on `sys.path` by the test is seen, and
    nothing leaks into the next test.
`antler_discover`
    The factory behind `antler_registry`:
    `antler_discover(extra_plugins=(), builtins=True)`. Call it after putting a
    distribution on the path; `builtins=False` leaves Antler's own plugins out,
    to build a chain of just the plugins under test.
`antler_manifest_registry`
    A factory building a registry from manifests instead of entry points:
    YAML manifest text, `Manifest` objects, `PluginSpec` objects or spec
    dicts. Antler's synchronization points and slots are included, so
    `@custom_end`, `@tail_start` and the `extensions` slot resolve.
`antler_plan` / `antler_build`
    Helpers taking operator-config YAML text (or a path, mapping or
    `OperatorConfig`), a chain name and runtime options, returning the
    `ChainPlan` (nothing imported) or the `BuiltChain` (middlewares
    instantiated). They use `antler_registry` unless given `registry=`.

The conformance battery, `PluginConformance`: subclass it naming your plugin and
pytest runs every rule of docs/plugins.md section 4 against it through real
graphs (see `antler.testing.conformance`).

Assertions, importable from this module: `assert_before(plan, a, b)`,
`assert_adjacent(plan, a, b)` and `assert_in_slot(plan, name, slot)`. On
failure they print the chain and `plan.explain(...)` of the plugins involved.

Example, in the test suite of a distribution shipping the plugin `acme`::

    from antler.testing import assert_before, assert_in_slot


    def test_acme_joins_both_chains_in_the_extension_slot(antler_plan):
        for chain in ("lead", "subagent"):
            plan = antler_plan("acme: {greeting: hello}", chain=chain)
            assert_in_slot(plan, "acme", "extensions")


    def test_acme_runs_after_the_audit_plugin(antler_manifest_registry, antler_plan):
        registry = antler_manifest_registry('''
            api_version: 1
            plugins:
              - {name: audit, factory: "acme_antler.audit:make_audit"}
              - name: acme
                factory: "acme_antler.middleware:AcmeMiddleware"
                order: {after: [audit]}
        ''')
        assert_before(antler_plan(registry=registry), "audit", "acme")


    def test_acme_builds_and_contributes_its_tool(antler_discover, antler_build):
        registry = antler_discover(builtins=False)  # just the plugins under test
        built = antler_build("acme: {greeting: hi}", registry=registry,
                             runtime={"plan_mode": True})
        assert built.names == ["acme"]
        assert [tool.name for tool in built.tools] == ["acme_lookup"]
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .conformance import PluginConformance

if TYPE_CHECKING:
    from antler.chain import BuiltChain, ChainPlan
    from antler.chain.config import OperatorConfig
    from antler.plugin_api.context import RuntimeOptions
    from antler.plugin_api.manifest import Manifest
    from antler.plugin_api.registry import PluginRegistry

__all__ = [
    "PluginConformance",
    "assert_adjacent",
    "assert_before",
    "assert_in_slot",
    "drop_builtins",
    "forget_config_models",
    "isolate_entry_points",
    "load_test_config",
    "make_chain",
    "make_plan",
    "make_registry",
    "slot_members",
]

# -- entry point isolation ------------------------------------------------------------------


def isolate_entry_points(monkeypatch: pytest.MonkeyPatch, cache_dir: str | os.PathLike) -> None:
    """Give stevedore empty entry point caches for the rest of the test.

    Stevedore caches entry points per group in `ExtensionManager.ENTRY_POINT_CACHE`
    and per `sys.path` in memory and in a file under `$XDG_CACHE_HOME`. All
    three are pointed at fresh storage; `monkeypatch` restores them afterwards.
    """
    import importlib

    from stevedore import ExtensionManager

    cache_dir = os.fspath(cache_dir)
    monkeypatch.setenv("XDG_CACHE_HOME", cache_dir)
    monkeypatch.setattr(ExtensionManager, "ENTRY_POINT_CACHE", {})
    from antler.compat import isolate_stevedore_path_cache

    isolate_stevedore_path_cache(monkeypatch, cache_dir)
    importlib.invalidate_caches()


def forget_config_models() -> None:
    """Drop the config models Antler cached by 'module:Model' path.

    A test that writes a distribution afresh must not validate against the
    class an earlier test imported under the same path.
    """
    from antler.chain.config import forget_config_models as forget

    forget()


@pytest.fixture
def antler_isolated_entry_points(monkeypatch: pytest.MonkeyPatch,
                                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Stevedore's entry point caches, emptied for this test and restored after it."""
    isolate_entry_points(monkeypatch, tmp_path_factory.mktemp("antler-entry-point-cache"))
    forget_config_models()
    yield
    forget_config_models()


def drop_builtins(registry: PluginRegistry) -> PluginRegistry:
    """`registry` without Antler's own plugins, their hooks and their diagnostics.

    For testing a plugin discovered through its real entry point, but built
    without the built-ins (which need services such as a sandbox or a model).
    Antler's points and slots stay, so placement is unchanged.
    """
    import importlib.metadata

    from antler.plugin_api.registry import BUILTIN_DISTRIBUTION, ENTRY_POINT_GROUP

    builtin_eps = {source.entry_point for source in registry.sources.values()
                   if source.distribution == BUILTIN_DISTRIBUTION}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        if dist is not None and dist.metadata["Name"] == BUILTIN_DISTRIBUTION:
            builtin_eps.add(ep.name)
    for name, source in list(registry.sources.items()):
        if source.distribution == BUILTIN_DISTRIBUTION:
            del registry.sources[name]
            registry.specs.pop(name, None)
    for name in builtin_eps:
        registry.entry_point_plugins.pop(name, None)
        registry.entry_points.pop(name, None)
        if registry.plugin_manager.get_plugin(name) is not None:
            registry.plugin_manager.unregister(name=name)
    registry.diagnostics[:] = [d for d in registry.diagnostics
                               if d.distribution != BUILTIN_DISTRIBUTION]
    return registry


@pytest.fixture
def antler_discover(antler_isolated_entry_points: None) -> Callable[..., PluginRegistry]:
    """`antler_discover(extra_plugins=(), *, builtins=True)`: discover plugins afresh, now.

    With `builtins=False` Antler's own plugins are left out (see `drop_builtins`).
    """
    from antler.plugin_api.registry import discover

    def run(extra_plugins: Iterable[tuple[str, Any]] = (), *,
            builtins: bool = True) -> PluginRegistry:
        registry = discover(extra_plugins=extra_plugins, refresh=True)
        return registry if builtins else drop_builtins(registry)

    return run


@pytest.fixture
def antler_registry(antler_discover: Callable[..., PluginRegistry]) -> PluginRegistry:
    """Every installed plugin, discovered for this test through its entry point."""
    return antler_discover()


# -- registries from manifests ----------------------------------------------------------------


def make_registry(*items: Any, platform: bool = True, builtins: bool = False) -> PluginRegistry:
    """A registry from manifests, bypassing entry points.

    Each item is YAML manifest text, a `Manifest`, a `PluginSpec`, a spec dict,
    a manifest dict (one with `api_version`) or a list of these. Loose specs
    keep the order given as their tie-break rank. `platform` adds Antler's
    points and slots; `builtins` adds Antler's built-in plugins as well.
    """
    from antler.plugin_api.manifest import Manifest, builtin_manifest, builtin_plugins_manifest
    from antler.plugin_api.registry import PluginRegistry

    manifests: list[Manifest] = []
    if builtins:
        manifests += [builtin_manifest(), builtin_plugins_manifest()]
    elif platform:
        own = builtin_manifest()
        manifests.append(Manifest(source=own.source, points=own.points, slots=own.slots,
                                  default_slot=own.default_slot))
    loose: list[Any] = []
    rank = 1_000
    for item in _flatten(items):
        manifest = _as_manifest(item, rank)
        if manifest is None:
            loose.append(item)
            continue
        manifests.append(manifest)
        rank += 1_000
    if loose:
        manifests.append(_loose_manifest(loose, rank))
    return PluginRegistry.from_manifests(manifests)


def _flatten(items: Iterable[Any]) -> Iterable[Any]:
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from _flatten(item)
        else:
            yield item


def _as_manifest(item: Any, rank: int) -> Manifest | None:
    from antler.plugin_api.manifest import Manifest, load_manifest_text, parse_manifest
    from antler.plugin_api.yamlsource import YamlDocument

    if isinstance(item, Manifest):
        return item
    if isinstance(item, str):
        return load_manifest_text(textwrap.dedent(item), "<test manifest>", rank_base=rank)
    if isinstance(item, Mapping) and "api_version" in item:
        doc = YamlDocument(data=dict(item), source="<test manifest>")
        return parse_manifest(doc, rank_base=rank)
    return None


def _loose_manifest(items: list[Any], rank: int) -> Manifest:
    from antler.plugin_api.manifest import Manifest
    from antler.plugin_api.spec import PluginSpec, Provenance

    specs = []
    for index, item in enumerate(items):
        if isinstance(item, Mapping):
            item = PluginSpec.model_validate(dict(item))
        if not isinstance(item, PluginSpec):
            raise TypeError(
                f"make_registry() takes manifests, manifest text, PluginSpec objects or spec "
                f"dicts, not {type(item).__name__}"
            )
        update: dict[str, Any] = {}
        if item.rank is None:
            update["rank"] = rank + index
        if item.provenance == Provenance():
            update["provenance"] = Provenance(source="<test specs>")
        specs.append(item.model_copy(update=update))
    return Manifest(source="<test specs>", plugins=specs)


@pytest.fixture
def antler_manifest_registry() -> Callable[..., PluginRegistry]:
    """`antler_manifest_registry(*manifests, platform=True, builtins=False)`.

    See `make_registry` for what each argument may be.
    """
    return make_registry


# -- plans and builds -------------------------------------------------------------------------


def load_test_config(config: Any, registry: PluginRegistry,
                     source: str = "<test config>") -> OperatorConfig:
    """An `OperatorConfig` from YAML text (dedented), a path, a mapping, or as is."""
    from antler.chain.config import OperatorConfig, load_config, parse_config

    if config is None:
        return load_config(None, registry)
    if isinstance(config, OperatorConfig):
        return config
    if isinstance(config, os.PathLike):
        return load_config(Path(config), registry)
    if isinstance(config, Mapping):
        import yaml

        return parse_config(yaml.safe_dump(dict(config), sort_keys=False), registry, source)
    if isinstance(config, str):
        return parse_config(textwrap.dedent(config), registry, source)
    raise TypeError(f"config must be YAML text, a path, a mapping or an OperatorConfig, "
                    f"not {type(config).__name__}")


def _runtime(runtime: RuntimeOptions | Mapping[str, Any] | None) -> RuntimeOptions | None:
    from antler.plugin_api.context import RuntimeOptions

    if runtime is None or isinstance(runtime, RuntimeOptions):
        return runtime
    return RuntimeOptions(**dict(runtime))


def make_plan(registry: PluginRegistry, config: Any = None, chain: str = "lead",
         runtime: RuntimeOptions | Mapping[str, Any] | None = None, *,
         custom_middlewares: Sequence[Any] = (), source: str = "<test config>") -> ChainPlan:
    """`plan_chain` for `registry` with config given as text, path, mapping or object."""
    from antler.chain import plan_chain

    return plan_chain(load_test_config(config, registry, source), chain, _runtime(runtime),
                      registry=registry, custom_middlewares=custom_middlewares)


def make_chain(registry: PluginRegistry, config: Any = None, chain: str = "lead",
          runtime: RuntimeOptions | Mapping[str, Any] | None = None,
          services: Any = None, *, custom_middlewares: Sequence[Any] = (),
          source: str = "<test config>") -> BuiltChain:
    """`build_chain` for `registry` with config given as text, path, mapping or object.

    The build has the runtime's default services (the model catalog, the sandbox and
    skills loaders, the store opener), as under `create_agent`.
    """
    import antler.runtime  # noqa: F401 - registers the default services
    from antler.chain import build_chain

    return build_chain(load_test_config(config, registry, source), chain, _runtime(runtime),
                       services, registry=registry, custom_middlewares=custom_middlewares)


@pytest.fixture
def antler_plan(request: pytest.FixtureRequest) -> Callable[..., ChainPlan]:
    """`antler_plan(config=None, chain="lead", runtime=None, *, registry=None, ...)`."""

    def run(config: Any = None, chain: str = "lead", runtime: Any = None, *,
            registry: PluginRegistry | None = None, **kwargs: Any) -> ChainPlan:
        registry = registry or request.getfixturevalue("antler_registry")
        return make_plan(registry, config, chain, runtime, **kwargs)

    return run


@pytest.fixture
def antler_build(request: pytest.FixtureRequest) -> Callable[..., BuiltChain]:
    """`antler_build(config=None, chain="lead", runtime=None, services=None, *, registry=None)`."""

    def run(config: Any = None, chain: str = "lead", runtime: Any = None, services: Any = None,
            *, registry: PluginRegistry | None = None, **kwargs: Any) -> BuiltChain:
        registry = registry or request.getfixturevalue("antler_registry")
        return make_chain(registry, config, chain, runtime, services, **kwargs)

    return run


# -- assertions -------------------------------------------------------------------------------


def _plan_of(subject: Any) -> ChainPlan:
    return getattr(subject, "plan", subject)


def _position(subject: Any, name: str) -> int:
    __tracebackhide__ = True
    chain_plan = _plan_of(subject)
    if name in chain_plan.order:
        return chain_plan.order.index(name)
    if name in chain_plan.excluded:
        pytest.fail(f"{name!r} is not in the {chain_plan.chain} chain: "
                    f"{chain_plan.excluded[name].reason}\n{_show(chain_plan)}")
    pytest.fail(f"no plugin named {name!r} is known to this plan\n{_show(chain_plan)}")


def _show(chain_plan: ChainPlan, *names: str) -> str:
    lines = [f"{chain_plan.chain} chain: {' -> '.join(chain_plan.order) or '(empty)'}"]
    lines += [chain_plan.explain(name) for name in names if name in chain_plan.order]
    return "\n".join(lines)


def assert_before(plan: Any, a: str, b: str) -> None:
    """`a` comes earlier than `b` in the list (its `before_*` hooks run first)."""
    __tracebackhide__ = True
    if not _position(plan, a) < _position(plan, b):
        pytest.fail(f"expected {a!r} before {b!r}\n{_show(_plan_of(plan), a, b)}")


def assert_adjacent(plan: Any, a: str, b: str) -> None:
    """`b` directly follows `a`, with nothing in between."""
    __tracebackhide__ = True
    if _position(plan, b) != _position(plan, a) + 1:
        pytest.fail(f"expected {b!r} immediately after {a!r}\n{_show(_plan_of(plan), a, b)}")


def slot_members(plan: Any, slot: str) -> list[str]:
    """The plugins of the plan that sit between the two points bounding `slot`.

    Points have no position of their own: the resolver reaches a point as soon
    as everything ordered before it is placed, and records how many plugins
    precede it then.
    """
    chain_plan = _plan_of(plan)
    spec = chain_plan.registry.slots.get(slot)
    if spec is None:
        known = ", ".join(sorted(chain_plan.registry.slots)) or "none"
        raise KeyError(f"no slot named {slot!r} (known slots: {known})")
    start, end = (_point_index(chain_plan, point) for point in (spec.start, spec.end))
    return chain_plan.order[start:end]


def _point_index(chain_plan: ChainPlan, point: str) -> int:
    return chain_plan.resolution.point_positions[point]


def assert_in_slot(plan: Any, name: str, slot: str) -> None:
    """`name` sits inside `slot` (after its start point, before its end point)."""
    __tracebackhide__ = True
    _position(plan, name)
    members = slot_members(plan, slot)
    if name not in members:
        chain_plan = _plan_of(plan)
        spec = chain_plan.registry.slots[slot]
        pytest.fail(
            f"expected {name!r} in slot {slot!r} ({spec.start} .. {spec.end}), which holds "
            f"{members or 'nothing'}\n{_show(chain_plan, name)}"
        )
