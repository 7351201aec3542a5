"""Chain planning: who takes part in one chain, and in what order.

`plan_chain` decides participants and order from specs alone (no middleware
module is imported), which is all `antler chain show` needs. Programmatic
custom middlewares and configured extensions become specs here too, so they go
through the same resolver as installed plugins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from antler.errors import AntlerError, BuildError, ReflectionError
from antler.plugin_api.context import BuildContext, RuntimeOptions
from antler.plugin_api.reflection import instantiate, resolve_middleware_class
from antler.plugin_api.registry import PluginRegistry, discover
from antler.plugin_api.spec import CHAIN_NAMES, Ordering, PluginSpec, Provenance

from .config import OperatorConfig, extension_name, extension_ordering
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
        absent=excluded,
        points=registry.points.values(), slots=registry.slots.values(),
        default_slot=registry.default_slot,
    )
    return ChainPlan(chain, runtime, resolution, excluded, config, registry, builders)

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
