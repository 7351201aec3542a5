"""Chain building: instantiate a planned chain's middlewares for `create_agent`.

`build_chain` plans the chain (`antler.chain.plan`), then imports and calls the
participants' factories and returns middleware instances in order, together
with the explanation of every placement and the tools the participants
contribute.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from antler.errors import AntlerError, BuildError, ReflectionError
from antler.plugin_api.context import BuildContext, ChainSecrets, RuntimeOptions, Services
from antler.plugin_api.reflection import resolve_object
from antler.plugin_api.registry import PluginRegistry, discover
from antler.plugin_api.spec import HOOK_NAMES, PluginSpec

from .config import OperatorConfig, section_model
from .plan import ChainPlan, plan_chain


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

def _context(plan: ChainPlan, spec: PluginSpec, services: Services,
             secrets: ChainSecrets) -> BuildContext:
    """What one plugin's factory or hook gets: its section, defaults filled in."""
    section = plan.config.section(spec.section_for(plan.chain))
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


def prompt_sections(built: BuiltChain) -> list[str]:
    """The system-prompt sections of the chain's plugins (`antler_prompt_sections`), in order."""
    registry = built.plan.registry
    # By registered name: a plugin object need not be hashable (pluggy's subset
    # callers need that), and each entry point's own implementations are asked.
    impls: dict[str, list[Any]] = {}
    for impl in registry.plugin_manager.hook.antler_prompt_sections.get_hookimpls():
        impls.setdefault(impl.plugin_name, []).append(impl)
    sections: list[str] = []
    asked: set[str] = set()
    for entry in built.entries:
        source = registry.sources.get(entry.name)
        if source is None or source.entry_point in asked:
            continue
        asked.add(source.entry_point)
        context = _context(built.plan, entry.spec, built.services, built.secrets)
        for impl in reversed(impls.get(source.entry_point, [])):
            result = impl.function(context=context)
            parts = [result] if isinstance(result, str) else list(result or [])
            sections.extend(part.strip() for part in parts if part and part.strip())
    return sections
