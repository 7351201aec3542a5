"""The chain plan (`ChainPlan`): who takes part in one chain, and in what order.

`plan_chain` decides participants and order from specs alone (no middleware
module is imported), which is all `antler chain show` needs. Programmatic
custom middlewares and configured extensions become specs here too, so they go
through the same resolver as installed plugins.

An optional plugin whose ordering cannot be satisfied does not stop the chain:
the planner leaves it out (kind `broken`), records the problem and resolves
again, until the chain resolves or a required plugin is at fault. Required
means `always`, Antler's own, marked `plugins: {NAME: {required: true}}`, a
programmatic custom middleware, or a configured extension not marked
`required: false`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from antler.errors import AntlerError, BuildError, ConfigError, ReflectionError, ResolutionError
from antler.plugin_api.context import BuildContext, RuntimeOptions
from antler.plugin_api.diagnostics import did_you_mean
from antler.plugin_api.reflection import instantiate, resolve_middleware_class
from antler.plugin_api.registry import BUILTIN_DISTRIBUTION, PluginRegistry, discover
from antler.plugin_api.spec import CHAIN_NAMES, Ordering, PluginSpec, Provenance

from .config import ExtensionEntry, OperatorConfig, extension_name, extension_ordering
from .resolver import Resolution, resolve

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
                   "load_failed", "broken", "other")


@dataclass(frozen=True)
class Problem:
    """Something wrong with plugins that the planner excluded them for.

    `message` is the full error (a cycle prints every hop); `plugins` are the
    plugins left out because of it; `stage` is "order" (their constraints) or
    "load" (their factory does not import). `required` is set only on the plan
    of `plan_chain(..., keep_going=True)`: required plugins were at fault, so a
    build would stop.
    """

    message: str
    plugins: tuple[str, ...]
    stage: str = "order"
    required: bool = False


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
    problems: list[Problem] = field(default_factory=list)
    """Why plugins were excluded as broken or unloadable, one entry per problem found."""
    required: frozenset[str] = frozenset()
    """The participants whose failure stops the build instead of excluding them."""

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

def participation(spec: PluginSpec, chain: str, config: OperatorConfig,
                  runtime: RuntimeOptions) -> Exclusion | None:
    """None when `spec` joins `chain`, otherwise the `Exclusion` saying why not.

    Enablement and the config section are the chain's (`chain_overrides`), so a
    plugin can be off on the lead chain and on for subagents.
    """
    if chain not in spec.chains:
        return Exclusion(spec, f"does not join the {chain} chain (chains: "
                               f"{', '.join(spec.chains)})", "not_in_chain")
    enabled = spec.enabled_for(chain)
    if enabled == "always":
        return None
    key = spec.section_for(chain)
    section = config.section(key)
    toggle = getattr(section, "enabled", None) if section is not None else None
    if toggle is False:
        return Exclusion(spec, f"disabled by config ({config.locate(key, 'enabled')})",
                         "disabled")
    if toggle is None and enabled == "off":
        return Exclusion(spec, f"off by default; enable with `{key}: {{enabled: true}}`",
                         "off_by_default")
    for condition, wanted in spec.when.items():
        value = runtime.condition(condition)
        if value != wanted:
            unknown = "" if runtime.knows(condition) else " (no runtime option sets it)"
            return Exclusion(spec, f"runtime condition {condition} is {value}{unknown}, "
                                   f"needs {wanted}", "runtime_condition")
    return None


def plan_chain(
    config: OperatorConfig | None = None,
    chain: str = "lead",
    runtime: RuntimeOptions | None = None,
    *,
    registry: PluginRegistry | None = None,
    custom_middlewares: Sequence[Any] = (),
    unloadable: Mapping[str, str] | None = None,
    load_extensions: bool = True,
    keep_going: bool = False,
) -> ChainPlan:
    """Decide participants and order for `chain` from specs alone.

    `unloadable` names optional plugins whose factory failed to import (with the
    error): they are excluded as `load_failed`. `load_extensions=False` leaves
    optional configured extensions unimported (they are planned as if they load).
    `keep_going=True` returns a plan even when required plugins are at fault,
    with those problems marked `required` (for checkers that report everything).
    """
    if chain not in CHAIN_NAMES:
        raise AntlerError(f"unknown chain {chain!r}; choose one of {', '.join(CHAIN_NAMES)}")
    registry = registry or discover()
    config = config or OperatorConfig()
    runtime = runtime or RuntimeOptions()
    specs = dict(registry.specs)
    builders: dict[str, Callable[[BuildContext], Any]] = {}
    required: set[str] = set()
    excluded: dict[str, Exclusion] = {}
    for spec, builder, is_required, load_error in [
            *_custom_specs(custom_middlewares), *_extension_specs(config, load_extensions)]:
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
        if is_required:
            required.add(spec.name)
    required.update(name for name, spec in specs.items()
                    if name not in builders and _required(spec, config, registry))
    problems = [Problem(message, (name,), "load") for name, message in (unloadable or {}).items()]
    participants = []
    for spec in specs.values():
        exclusion = (_unloadable(spec, unloadable) or _switched_off(spec, config, registry)
                     or participation(spec, chain, config, runtime))
        if exclusion is None:
            participants.append(spec)
        else:
            excluded[spec.name] = exclusion
    resolution = _resolve_excluding_broken(participants, chain, excluded, required, problems,
                                           registry, keep_going)
    return ChainPlan(chain, runtime, resolution, excluded, config, registry, builders,
                     problems, frozenset(required & set(resolution.order)))


def _required(spec: PluginSpec, config: OperatorConfig, registry: PluginRegistry) -> bool:
    """Whether a failure of this installed plugin stops the build (see the module doc)."""
    if spec.enabled == "always":
        return True
    source = registry.sources.get(spec.name)
    if (source.distribution if source else spec.provenance.distribution) == \
            BUILTIN_DISTRIBUTION:
        return True
    return any(item.required for _, item in config.load_settings(*registry.names_of(spec)))


def _unloadable(spec: PluginSpec, unloadable: Mapping[str, str] | None) -> Exclusion | None:
    if not unloadable or spec.name not in unloadable:
        return None
    return Exclusion(spec, f"its factory cannot be imported: {unloadable[spec.name]}",
                     "load_failed")


def _switched_off(spec: PluginSpec, config: OperatorConfig,
                  registry: PluginRegistry) -> Exclusion | None:
    """`plugins: {NAME: {enabled: false}}` for the plugin, its entry point or distribution."""
    switch = config.switch(*registry.names_of(spec))
    if switch is None or switch[1] or spec.enabled == "always":
        return None  # the config loader refuses to switch off an `always` plugin
    key = switch[0]
    where = config.locate("plugins", key, "enabled")
    return Exclusion(spec, f"switched off by config ({where}: plugins.{key}.enabled)",
                     "disabled")


def _resolve_excluding_broken(participants: list[PluginSpec], chain: str,
                              excluded: dict[str, Exclusion], required: set[str],
                              problems: list[Problem], registry: PluginRegistry,
                              keep_going: bool = False) -> Resolution:
    """Resolve; while plugins are named at fault, leave them out and resolve again.

    Optional offenders go first: when any is named, only they are left out (a
    third-party plugin on a cycle with built-ins takes the blame). When only
    required plugins are named, they are left out too, so the problems behind
    them are found, and the error raised at the end lists every problem. A plugin
    outside the chain still orders it through its constraints (a zero-width
    node), so one can be at fault too: it is then marked broken, and only its
    name stays. Each round marks one more plugin broken, so this ends.
    """
    fatal: list[tuple[ResolutionError, tuple[str, ...]]] = []
    while True:
        try:
            # An absent plugin keeps its place through its own constraints, unless
            # they are what is broken: then only its name and the reason remain.
            resolution = resolve(
                participants, chain=chain,
                absent={name: ex.reason if ex.kind == "broken" else ex
                        for name, ex in excluded.items()},
                points=registry.points.values(), slots=registry.slots.values(),
                default_slot=registry.default_slot,
            )
        except ResolutionError as exc:
            by_name = {spec.name: spec for spec in participants}
            by_name.update((name, ex.spec) for name, ex in excluded.items()
                           if ex.kind != "broken")
            at_fault = [name for name in dict.fromkeys(exc.plugins) if name in by_name]
            if not at_fault:  # nobody to leave out: nothing more can be found
                _raise_every_problem([*fatal, (exc, ())], problems, chain)
            optional = tuple(name for name in at_fault if name not in required)
            if optional:
                problems.append(Problem(str(exc), optional))
            else:
                fatal.append((exc, tuple(at_fault)))
            first_line = str(exc).splitlines()[0]
            for name in optional or at_fault:
                held = excluded.get(name)
                reason = f"excluded as broken: {first_line}"
                excluded[name] = Exclusion(
                    by_name[name], reason if held is None else f"{held.reason}; {reason}",
                    "broken")
            participants = [spec for spec in participants if spec.name not in excluded]
            continue
        if fatal and not keep_going:
            _raise_every_problem(fatal, problems, chain)
        problems += [Problem(str(exc), plugins, required=True) for exc, plugins in fatal]
        return resolution


def _raise_every_problem(fatal: list[tuple[ResolutionError, tuple[str, ...]]],
                         problems: list[Problem], chain: str) -> NoReturn:
    """Stop planning: with the one problem as the resolver raised it, or with them all."""
    first = fatal[0][0]
    if len(fatal) == 1 and not problems:
        raise first

    def item(plugins: tuple[str, ...], message: str) -> str:
        who = f"{', '.join(plugins)}: " if plugins else ""
        return f"- {who}" + message.replace("\n", "\n  ")

    named = all(plugins for _, plugins in fatal)
    lines = [f"the {chain} chain cannot be resolved: {len(fatal)} problem"
             f"{'s' * (len(fatal) > 1)}{' with required plugins' * named}"]
    lines += [item(plugins, str(exc)) for exc, plugins in fatal]
    if problems:
        lines.append("and optional plugins left out:")
        lines += [item(p.plugins, p.message) for p in problems]
    raise ResolutionError("\n".join(lines), plugins=[
        *(name for _, plugins in fatal for name in plugins),
        *(name for p in problems for name in p.plugins)]) from first


def _custom_specs(
    custom: Sequence[Any],
) -> Iterable[tuple[PluginSpec, Callable, bool, str | None]]:
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
        yield spec, (lambda _ctx, m=middleware: m), True, None


def _extension_specs(
    config: OperatorConfig, load: bool = True,
) -> Iterable[tuple[PluginSpec, Callable, bool, str | None]]:
    for index, entry in enumerate(config.extensions.middlewares):
        ordering, chains, required, kwargs = extension_ordering(entry)
        path = entry if isinstance(entry, str) else entry.use
        where = config.locate("extensions", "middlewares", index)
        if ordering.is_empty():
            ordering = Ordering(slot=EXTENSION_SLOT)
        spec = _extension_spec(
            where, index,
            name=extension_name(entry), factory=path, chains=chains,
            summary=f"configured extension {path}", order=ordering,
            rank=_EXTENSION_RANK + index,
            on_error=None if isinstance(entry, str) else entry.on_error,
            security_gate=f"whatever the configured extension {path} guards against"
            if isinstance(entry, ExtensionEntry) and entry.security_gate else None,
            provenance=Provenance(source=str(getattr(where, "source", where)),
                                  line=getattr(where, "line", None)),
        )
        # An optional extension that cannot load fails open, with the reason shown
        # by `chain show`; a required one fails the build in its factory call.
        error = None if required or not load else _load_error(path)
        yield spec, _extension_builder(path, kwargs, str(where)), required, error


def _extension_spec(where: object, index: int, **fields: Any) -> PluginSpec:
    """The spec of extension entry `index`; what the spec refuses (the entry passed the
    config's own checks) is a config error at the entry, not a validation traceback."""
    from pydantic import ValidationError

    try:
        return PluginSpec(**fields)
    except ValidationError as exc:
        reasons = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
        raise ConfigError(f"{where}: extensions.middlewares[{index}]: {reasons}") from None


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
            problems = constructor_problems(cls, kwargs)
            if problems:
                raise ReflectionError("; ".join(message for _, message in problems))
            return instantiate(cls, path, kwargs)
        except ReflectionError as exc:
            raise BuildError(f"{where}: extensions.middlewares: {exc}") from None

    return build


def constructor_problems(cls: type, kwargs: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    """What keeps `cls(**kwargs)` from binding: (the argument at fault or None, message).

    An extension's `config:` mapping is its constructor's keyword arguments; a
    misspelt or missing one is found before anything is constructed. The last
    message shows the constructor's signature.
    """
    try:
        signature = inspect.signature(cls).replace(return_annotation=inspect.Signature.empty)
    except (TypeError, ValueError):  # a builtin or C type: nothing to compare with
        return []
    params = signature.parameters
    accepted = [name for name, p in params.items()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    problems: list[tuple[str | None, str]] = []
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        problems += [(key, f"unknown argument {key!r}{did_you_mean(key, accepted)}")
                     for key in kwargs if key not in accepted]
    missing = [name for name, p in params.items() if p.default is p.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in kwargs]
    if missing:
        many = len(missing) > 1
        problems.append((None, f"missing required argument{'s' * many} "
                               f"{', '.join(map(repr, missing))}; add {'them' if many else 'it'} "
                               "under `config:`"))
    if problems:
        argument, message = problems[-1]
        problems[-1] = (argument, f"{message} (the constructor is {cls.__qualname__}"
                                  f"{signature})")
    return problems
