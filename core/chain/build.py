"""Chain building: instantiate a planned chain's middlewares for `create_agent`.

`build_chain` plans the chain (`antler.chain.chainplan`), then imports and calls the
participants' factories and returns middleware instances in order, together
with the explanation of every placement and the tools the participants
contribute.
"""

from __future__ import annotations

import inspect
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from antler.errors import AntlerError, BuildError, ReflectionError
from antler.plugin_api.context import BuildContext, ChainSecrets, RuntimeOptions, Services
from antler.plugin_api.reflection import resolve_object
from antler.plugin_api.registry import ImportTiming, PluginRegistry, discover, record_import
from antler.plugin_api.spec import HOOK_NAMES, PluginSpec

from .chainplan import ChainPlan, plan_chain
from .config import OperatorConfig, section_model, silenced_entry_points
from .policy import gate_warnings
from .stateowners import StateClaim, check_owners, claim

log = logging.getLogger("antler.chain")


@dataclass
class ChainEntry:
    """One middleware of a built chain."""

    name: str
    position: int
    spec: PluginSpec
    middleware: Any
    hooks: list[str]
    state: StateClaim | None = None
    """The state keys it owns, reads and may write (`antler.chain.stateowners`)."""


@dataclass
class BuiltChain:
    """A built chain: instances in order, the plan that placed them, and extra tools."""

    plan: ChainPlan
    entries: list[ChainEntry]
    tools: list[Any] = field(default_factory=list)
    services: Services = field(default_factory=Services)
    secrets: ChainSecrets = field(default_factory=ChainSecrets)
    state_owners: dict[str, list[str]] = field(default_factory=dict)
    """Each owned state key -> the plugins that own it (one distribution's)."""
    tool_sources: list[tuple[str, ...]] = field(default_factory=list)
    """For each of `tools`, the plugins in the chain of the entry point that contributed it,
    in chain order (the first one's build context was passed to `antler_tools`)."""

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
    configured extensions. Only participants' factories are imported. An
    optional plugin whose factory does not import is left out (the plan records
    the problem) and the chain is planned again without it; a required one
    stops the build, with every other such failure listed.
    """
    registry = registry or discover()
    config = config or OperatorConfig()
    registry.raise_for_required(config.required_plugins())
    plan = plan_chain(config, chain, runtime, registry=registry,
                      custom_middlewares=custom_middlewares)
    failures = factory_import_failures(plan)
    fatal = [f"plugin {name!r} [{plan.registry.specs[name].provenance}]: {message}"
             for name, message in failures.items() if name in plan.required]
    if fatal:
        raise BuildError("\n".join(fatal))
    if failures:
        plan = plan_chain(config, chain, runtime, registry=registry,
                          custom_middlewares=custom_middlewares, unloadable=failures)
    if not isinstance(services, Services):
        services = Services(dict(services or {}))
    secrets = ChainSecrets()
    entries = []
    for index, name in enumerate(plan.order, start=1):
        spec = plan.resolution.placements[name].spec
        context = _context(plan, spec, services, secrets)
        middleware = _instantiate(spec, plan.builders.get(name), context)
        entries.append(ChainEntry(name, index, spec, middleware,
                                  _checked_hooks(spec, middleware),
                                  claim(name, spec, type(middleware))))
    owners = check_owners(entry.state for entry in entries if entry.state is not None)
    built = BuiltChain(plan, entries, services=services, secrets=secrets, state_owners=owners)
    built.tools, built.tool_sources = _contributed_tools(built)
    for warning in gate_warnings((entry.spec for entry in entries), config):
        log.warning(warning)
    silenced = silenced_entry_points(config, registry)
    for entry_point in registry.entry_points:
        if entry_point not in silenced:
            registry.ask(entry_point, "antler_chain_resolved", config.required_plugins(),
                         chain=built)
    return built


def factory_import_failures(plan: ChainPlan) -> dict[str, str]:
    """The participants whose factory cannot be imported, with the error, in chain order.

    Configured extensions and custom middlewares are not looked at: they are
    checked when planned or when their builder runs. Each factory module imported
    here for the first time is timed into `registry.import_timings` (a slow one
    is warned about: `antler.plugin_api.registry.record_import`).
    """
    failures: dict[str, str] = {}
    if any(name not in plan.builders for name in plan.order):
        # Every factory needs LangChain's middleware: imported first, its cost is not
        # counted against whichever plugin happens to be first.
        import langchain.agents.middleware  # noqa: F401
    for name in plan.order:
        if name in plan.builders:
            continue
        spec = plan.resolution.placements[name].spec
        module = spec.factory.partition(":")[0]
        fresh = module not in sys.modules
        started = time.perf_counter()
        try:
            resolve_object(spec.factory, f"factory of plugin {name!r}")
        except ReflectionError as exc:
            failures[name] = str(exc)
            continue
        if fresh:  # a module imported earlier costs nothing now: not timed
            record_import(plan.registry.import_timings, ImportTiming(
                f"factory of plugin {name!r}", module,
                spec.provenance.distribution or "<unknown>", time.perf_counter() - started))
    return failures


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


def hook_signature_problems(middleware_class: type) -> list[str]:
    """Each hook of `middleware_class` LangChain could not call, and the signature it needs.

    A node hook is called with the state (and the runtime, positionally or by the
    keyword `runtime`), a wrap hook with the request and the handler. A hook that
    cannot take them fails on every call (skipped, or stopping the run, by its
    plugin's `on_error`), so `antler config check` names it first.
    """
    from langchain.agents.middleware import AgentMiddleware

    problems = []
    for hook in implemented_hooks(middleware_class):
        wrap = hook.startswith("wrap_")
        usual = "request, handler" if wrap else "state, runtime"
        for variant in (hook, "a" + hook):
            method = getattr(middleware_class, variant, None)
            if method is getattr(AgentMiddleware, variant, None) or method is None:
                continue
            if not callable(method):
                problems.append(f"`{variant}` is {type(method).__name__}, not a method; define "
                                f"`def {variant}(self, {usual})`")
                continue
            try:
                signature = inspect.signature(method)
            except (TypeError, ValueError):  # a builtin: nothing to compare with
                continue
            calls = [(3, {})] if wrap else [(3, {}), (2, {}), (2, {"runtime": None})]
            if not any(_binds(signature, count, keywords) for count, keywords in calls):
                problems.append(
                    f"`{variant}{_shown_signature(signature)}` cannot be called with "
                    f"({usual}); define `def {variant}(self, {usual})`")
    return problems


def _binds(signature: inspect.Signature, positional: int, keywords: dict[str, Any]) -> bool:
    try:
        signature.bind(*([None] * positional), **keywords)
    except TypeError:
        return False
    return True


def _shown_signature(signature: inspect.Signature) -> str:
    return str(signature.replace(return_annotation=inspect.Signature.empty,
                                 parameters=[p.replace(annotation=p.empty)
                                             for p in signature.parameters.values()]))


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
    problem = middleware_name_problem(middleware)
    if problem:
        raise BuildError(f"plugin {spec.name!r} [{spec.provenance}]: the middleware "
                         f"{spec.factory!r} built: {problem}")
    return middleware


def middleware_name_problem(middleware: Any) -> str | None:
    """Why `middleware.name` is unusable (None when it is a non-empty string): LangChain
    names the graph's nodes after it, and Antler its errors and trace."""
    try:
        name = middleware.name
    except Exception as exc:
        return (f"reading its `name` raised {type(exc).__name__}: {exc}; make `name` a plain "
                "string attribute (or drop it: the class name is the default)")
    if isinstance(name, str) and name:
        return None
    return (f"its `name` is {name!r}, not a non-empty string; make it a string (or drop it: "
            "the class name is the default)")

def _context(plan: ChainPlan, spec: PluginSpec, services: Services,
             secrets: ChainSecrets) -> BuildContext:
    """What one plugin's factory or hook gets: its section, defaults filled in."""
    section = plan.config.section(spec.section_for(plan.chain))
    if section is None and spec.config_model is not None:
        section = section_model(spec)()
    return BuildContext(plan.chain, spec, section, plan.runtime, services, secrets,
                        plan.config, plan)


def _contributed_tools(built: BuiltChain) -> tuple[list[Any], list[tuple[str, ...]]]:
    """Tools from the `antler_tools` hook of the entry points that take part in the chain,
    and for each the names of its entry point's plugins in the chain.

    Each entry point's implementation is called on its own, with the build
    context of its first plugin in the chain.
    """
    registry = built.plan.registry
    tools: list[Any] = []
    sources: list[tuple[str, ...]] = []
    for entry_point, entry in _entry_points_in_chain(built).items():
        context = _context(built.plan, entry.spec, built.services, built.secrets)
        plugins = tuple(other.name for other in built.entries
                        if (source := registry.sources.get(other.name)) is not None
                        and source.entry_point == entry_point)
        for contributed in registry.ask(entry_point, "antler_tools",
                                        built.plan.config.required_plugins(), context=context):
            contributed = list(contributed)
            tools.extend(contributed)
            sources.extend([plugins] * len(contributed))
    return tools, sources


def select_tools(built: BuiltChain, tools: list[Any]) -> list[Any]:
    """Apply the `antler_select_tools` hooks of the chain's plugins, in chain order.

    Each plugin's entry point is asked with that plugin's build context and the
    previous selection. A hook that raises stops the build, whoever ships it:
    leaving a narrowing out would offer the model tools it should not see.
    """
    registry = built.plan.registry
    for entry in built.entries:
        source = registry.sources.get(entry.name)
        if source is None:
            continue
        context = _context(built.plan, entry.spec, built.services, built.secrets)
        try:
            selections = registry.call_one(source.entry_point, "antler_select_tools",
                                           context=context, tools=list(tools))
        except AntlerError:
            raise
        except Exception as exc:
            raise BuildError(
                f"plugin {entry.name!r} [{entry.spec.provenance}]: antler_select_tools() raised "
                f"{type(exc).__name__}: {exc}; the agent is not built, because without this "
                "selection the model could see tools it must not use. Fix the plugin or switch "
                f"it off (`plugins: {{{entry.name}: {{enabled: false}}}}`)."
            ) from exc
        for selected in selections:
            tools = list(selected)
    return tools


def prompt_sections(built: BuiltChain) -> list[str]:
    """The system-prompt sections of the chain's plugins (`antler_prompt_sections`), in order.

    Each entry point is asked once, with the build context of its first plugin in the chain.
    """
    registry = built.plan.registry
    sections: list[str] = []
    for entry_point, entry in _entry_points_in_chain(built).items():
        context = _context(built.plan, entry.spec, built.services, built.secrets)
        for result in registry.ask(entry_point, "antler_prompt_sections",
                                   built.plan.config.required_plugins(), context=context):
            parts = [result] if isinstance(result, str) else list(result or [])
            sections.extend(part.strip() for part in parts if part and part.strip())
    return sections


def _entry_points_in_chain(built: BuiltChain) -> dict[str, ChainEntry]:
    """Entry point name -> its first plugin in the chain, in chain order."""
    found: dict[str, ChainEntry] = {}
    for entry in built.entries:
        source = built.plan.registry.sources.get(entry.name)
        if source is not None:
            found.setdefault(source.entry_point, entry)
    return found
