"""Chain composition: enabled plugins, resolved order, instantiated middlewares.

`plan_chain` decides who takes part and in what order using specs only (no
middleware module is imported), which is all `antler chain show` needs.
`build_chain` then imports and calls the participants' factories and returns
middleware instances ready for `langchain.agents.create_agent`, together with
the explanation of every placement.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import (
    OperatorConfig,
    extension_name,
    extension_ordering,
    section_model,
)
from .context import BuildContext, ChainSecrets, RuntimeOptions, Services
from .errors import AntlerError, BuildError, ReflectionError
from .reflection import instantiate, resolve_middleware_class, resolve_object
from .registry import PluginRegistry, discover
from .resolver import Resolution, resolve
from .spec import CHAIN_NAMES, HOOK_NAMES, Ordering, PluginSpec, Provenance

CUSTOM_SLOT = "custom"
EXTENSION_SLOT = "extensions"
_CUSTOM_RANK = 200_000
_EXTENSION_RANK = 300_000


@dataclass
class Exclusion:
    """A known plugin that does not take part in a chain, and why.

    `kind` is one of EXCLUSION_KINDS, stable for tools and JSON output.
    """

    spec: PluginSpec
    reason: str
    kind: str = "other"


EXCLUSION_KINDS = ("not_in_chain", "disabled", "off_by_default", "runtime_condition",
                   "load_failed", "other")


@dataclass
class ChainPlan:
    """Who takes part in one chain and in what order; nothing imported yet."""

    chain: str
    runtime: RuntimeOptions
    resolution: Resolution
    excluded: dict[str, Exclusion]
    config: OperatorConfig
    registry: PluginRegistry
    builders: dict[str, Callable[[BuildContext], Any]] = field(default_factory=dict)

    @property
    def order(self) -> list[str]:
        return self.resolution.order

    def explain(self, name: str) -> str:
        """Why `name` is where it is (or why it is not in the chain)."""
        if name in self.resolution.placements:
            placement = self.resolution.placements[name]
            lines = [f"{name} is at position {placement.position} of {len(self.order)} in the "
                     f"{self.chain} chain", f"  declared at {placement.spec.provenance}"]
            neighbours = self.order[max(0, placement.position - 2):placement.position + 1]
            lines.append(f"  neighbours: {' -> '.join(neighbours)}")
            lines += [f"  {reason}" for reason in placement.reasons()] or ["  (unconstrained)"]
            return "\n".join(lines)
        if name in self.excluded:
            ex = self.excluded[name]
            return (f"{name} is not in the {self.chain} chain: {ex.reason}\n"
                    f"  declared at {ex.spec.provenance}")
        self.registry.require(name)  # raises with a did-you-mean
        raise AssertionError("unreachable")


@dataclass
class ChainEntry:
    """One middleware of a built chain."""

    name: str
    position: int
    spec: PluginSpec
    middleware: Any
    hooks: list[str]


@dataclass
class BuiltChain:
    """A built chain: instances in order, the plan that placed them, and extra tools."""

    plan: ChainPlan
    entries: list[ChainEntry]
    tools: list[Any] = field(default_factory=list)
    services: Services = field(default_factory=Services)
    secrets: ChainSecrets = field(default_factory=ChainSecrets)

    @property
    def chain(self) -> str:
        return self.plan.chain

    @property
    def middlewares(self) -> list[Any]:
        return [entry.middleware for entry in self.entries]

    @property
    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]

    def explain(self, name: str) -> str:
        return self.plan.explain(name)


def participation(spec: PluginSpec, chain: str, config: OperatorConfig,
                  runtime: RuntimeOptions) -> Exclusion | None:
    """None when `spec` joins `chain`, otherwise the `Exclusion` saying why not."""
    if chain not in spec.chains:
        return Exclusion(spec, f"does not join the {chain} chain (chains: "
                               f"{', '.join(spec.chains)})", "not_in_chain")
    if spec.enabled == "always":
        return None
    section = config.section(spec.section)
    toggle = getattr(section, "enabled", None) if section is not None else None
    if toggle is False:
        return Exclusion(spec, f"disabled by config ({config.locate(spec.section, 'enabled')})",
                         "disabled")
    if toggle is None and spec.enabled == "off":
        return Exclusion(spec, f"off by default; enable with `{spec.section}: "
                               "{enabled: true}`", "off_by_default")
    for condition, wanted in spec.when.items():
        if runtime.condition(condition) != wanted:
            return Exclusion(spec, f"runtime condition {condition} is "
                                   f"{runtime.condition(condition)}, needs {wanted}",
                             "runtime_condition")
    return None


def plan_chain(
    config: OperatorConfig | None = None,
    chain: str = "lead",
    runtime: RuntimeOptions | None = None,
    *,
    registry: PluginRegistry | None = None,
    custom_middlewares: Sequence[Any] = (),
) -> ChainPlan:
    """Decide participants and order for `chain` from specs alone."""
    if chain not in CHAIN_NAMES:
        raise AntlerError(f"unknown chain {chain!r}; choose one of {', '.join(CHAIN_NAMES)}")
    registry = registry or discover()
    config = config or OperatorConfig()
    runtime = runtime or RuntimeOptions()
    specs = dict(registry.specs)
    builders: dict[str, Callable[[BuildContext], Any]] = {}
    participants, excluded = [], {}
    for spec, builder, load_error in [*_custom_specs(custom_middlewares),
                                      *_extension_specs(config)]:
        if spec.name in specs:
            raise AntlerError(
                f"extension {spec.name!r} [{spec.provenance}] has the same name as an installed "
                f"plugin [{specs[spec.name].provenance}]; give it another `name:`"
            )
        if load_error is not None:
            excluded[spec.name] = Exclusion(
                spec, f"optional extension failed to load: {load_error}", "load_failed")
            continue
        specs[spec.name] = spec
        builders[spec.name] = builder
    for spec in specs.values():
        exclusion = participation(spec, chain, config, runtime)
        if exclusion is None:
            participants.append(spec)
        else:
            excluded[spec.name] = exclusion
    resolution = resolve(
        participants, chain=chain,
        absent={name: ex.reason for name, ex in excluded.items()},
        points=registry.points.values(), slots=registry.slots.values(),
        default_slot=registry.default_slot,
    )
    return ChainPlan(chain, runtime, resolution, excluded, config, registry, builders)


def build_chain(
    config: OperatorConfig | None = None,
    chain: str = "lead",
    runtime: RuntimeOptions | None = None,
    services: Services | dict[str, Any] | None = None,
    *,
    registry: PluginRegistry | None = None,
    custom_middlewares: Sequence[Any] = (),
) -> BuiltChain:
    """Resolve `chain` and instantiate its middlewares, ready for `create_agent`.

    `custom_middlewares` (instances) take the `custom` slot, just before the
    configured extensions. Only participants' factories are imported.
    """
    registry = registry or discover()
    config = config or OperatorConfig()
    registry.raise_for_required(config.required_plugins())
    plan = plan_chain(config, chain, runtime, registry=registry,
                      custom_middlewares=custom_middlewares)
    if not isinstance(services, Services):
        services = Services(dict(services or {}))
    secrets = ChainSecrets()
    entries = []
    for index, name in enumerate(plan.order, start=1):
        spec = plan.resolution.placements[name].spec
        context = _context(plan, spec, services, secrets)
        middleware = _instantiate(spec, plan.builders.get(name), context)
        entries.append(ChainEntry(name, index, spec, middleware, _checked_hooks(spec,
                                                                                 middleware)))
    built = BuiltChain(plan, entries, services=services, secrets=secrets)
    built.tools = _contributed_tools(built)
    registry.plugin_manager.hook.antler_chain_resolved(chain=built)
    return built


def implemented_hooks(middleware_class: type) -> list[str]:
    """The LangChain hooks a middleware class overrides (sync or async form)."""
    from langchain.agents.middleware import AgentMiddleware

    found = []
    for hook in HOOK_NAMES:
        for variant in (hook, "a" + hook):
            mine = getattr(middleware_class, variant, None)
            base = getattr(AgentMiddleware, variant, None)
            if mine is not None and mine is not base:
                found.append(hook)
                break
    return found


def _checked_hooks(spec: PluginSpec, middleware: Any) -> list[str]:
    actual = implemented_hooks(type(middleware))
    if spec.hooks is not None:
        undeclared = [h for h in actual if h not in spec.hooks]
        if undeclared:
            raise BuildError(
                f"plugin {spec.name!r} [{spec.provenance}] implements {undeclared} but its "
                f"manifest declares hooks {spec.hooks}; add them to `hooks:` (the chain "
                "compiler plans graph nodes from the declaration)"
            )
    return actual


def _instantiate(spec: PluginSpec, builder: Callable[[BuildContext], Any] | None,
                 context: BuildContext) -> Any:
    from langchain.agents.middleware import AgentMiddleware

    try:
        factory = builder or resolve_object(spec.factory, f"factory of plugin {spec.name!r}")
    except ReflectionError as exc:
        raise BuildError(f"plugin {spec.name!r} [{spec.provenance}]: {exc}") from None
    try:
        middleware = factory(context)
    except AntlerError:
        raise
    except Exception as exc:
        raise BuildError(
            f"plugin {spec.name!r} [{spec.provenance}]: factory {spec.factory!r} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(middleware, AgentMiddleware):
        raise BuildError(
            f"plugin {spec.name!r} [{spec.provenance}]: factory {spec.factory!r} returned "
            f"{type(middleware).__name__}, not an AgentMiddleware instance"
        )
    return middleware


def _custom_specs(custom: Sequence[Any]) -> Iterable[tuple[PluginSpec, Callable, str | None]]:
    if not custom:
        return  # planning from specs alone must not pay for importing langchain
    from langchain.agents.middleware import AgentMiddleware

    for index, middleware in enumerate(custom):
        if not isinstance(middleware, AgentMiddleware):
            raise BuildError(
                f"custom_middlewares[{index}] is a {type(middleware).__name__}, not an "
                "AgentMiddleware instance"
            )
        cls = type(middleware)
        spec = PluginSpec(
            name=f"custom_{index}_{extension_name(':' + cls.__name__)}",
            factory=f"{cls.__module__}:{cls.__qualname__}",
            summary=f"programmatic custom middleware {cls.__name__}",
            order=Ordering(slot=CUSTOM_SLOT), rank=_CUSTOM_RANK + index,
            provenance=Provenance(source=f"custom_middlewares[{index}]"),
        )
        yield spec, (lambda _ctx, m=middleware: m), None


def _extension_specs(
    config: OperatorConfig,
) -> Iterable[tuple[PluginSpec, Callable, str | None]]:
    for index, entry in enumerate(config.extensions.middlewares):
        ordering, chains, required, kwargs = extension_ordering(entry)
        path = entry if isinstance(entry, str) else entry.use
        where = config.locate("extensions", "middlewares", index)
        if ordering.is_empty():
            ordering = Ordering(slot=EXTENSION_SLOT)
        spec = PluginSpec(
            name=extension_name(entry), factory=path, chains=chains,
            summary=f"configured extension {path}", order=ordering,
            rank=_EXTENSION_RANK + index,
            provenance=Provenance(source=str(getattr(where, "source", where)),
                                  line=getattr(where, "line", None)),
        )
        # An optional extension that cannot load fails open, with the reason shown
        # by `chain show`; a required one fails the build in its factory call.
        error = None if required else _load_error(path)
        yield spec, _extension_builder(path, kwargs, str(where)), error


def _load_error(path: str) -> str | None:
    try:
        resolve_middleware_class(path)
    except ReflectionError as exc:
        return str(exc)
    return None


def _extension_builder(path: str, kwargs: dict[str, Any], where: str) -> Callable:
    def build(_context: BuildContext) -> Any:
        try:
            cls = resolve_middleware_class(path)
            return instantiate(cls, path, kwargs)
        except ReflectionError as exc:
            raise BuildError(f"{where}: extensions.middlewares: {exc}") from None

    return build


def _context(plan: ChainPlan, spec: PluginSpec, services: Services,
             secrets: ChainSecrets) -> BuildContext:
    """What one plugin's factory or hook gets: its section, defaults filled in."""
    section = plan.config.section(spec.section)
    if section is None and spec.config_model is not None:
        section = section_model(spec)()
    return BuildContext(plan.chain, spec, section, plan.runtime, services, secrets,
                        plan.config, plan)


def _contributed_tools(built: BuiltChain) -> list[Any]:
    """Tools from the `antler_tools` hook of plugins that take part in the chain."""
    registry = built.plan.registry
    participating_eps = {registry.sources[n].entry_point for n in built.names
                         if n in registry.sources}
    tools: list[Any] = []
    for impl in registry.plugin_manager.hook.antler_tools.get_hookimpls():
        if impl.plugin_name not in participating_eps:
            continue
        names = registry.entry_point_plugins.get(impl.plugin_name, [])
        if not names:
            continue
        context = _context(built.plan, registry.specs[names[0]], built.services, built.secrets)
        params = inspect.signature(impl.function).parameters
        result: Any = impl.function(context=context) if "context" in params else impl.function()
        tools.extend(result or [])
    return tools


def select_tools(built: BuiltChain, tools: list[Any]) -> list[Any]:
    """Apply the `antler_select_tools` hooks of the chain's plugins, in chain order."""
    registry = built.plan.registry
    impls = {impl.plugin_name: impl
             for impl in registry.plugin_manager.hook.antler_select_tools.get_hookimpls()}
    if not impls:
        return tools
    for entry in built.entries:
        source = registry.sources.get(entry.name)
        impl = impls.get(source.entry_point) if source else None
        if impl is None:
            continue
        context = _context(built.plan, entry.spec, built.services, built.secrets)
        selected: Any = impl.function(context=context, tools=list(tools))
        if selected is not None:
            tools = list(selected)
    return tools
