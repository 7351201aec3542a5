"""Plugin discovery: entry points through stevedore, hooks through pluggy.

Every plugin, built-in or third-party, is an entry point in the
`antler.plugins` group. Stevedore finds and imports the entry point's target
(a light module that only declares specs); pluggy registers it and calls its
`antler_plugin_specs` hook. Nothing here imports a middleware module.

A distribution that fails (import error, a hook that raises, a wrong return
type, a duplicate name) produces a `LoadDiagnostic` naming the distribution,
the entry point and the cause. Optional ones fail open with that diagnostic;
required ones (Antler's own, and any the operator marks required) stop the
build in `PluginRegistry.raise_for_required`.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy
from pydantic import ValidationError

from . import hookspecs
from .diagnostics import did_you_mean
from .errors import DiscoveryError, ManifestError
from .manifest import Manifest, builtin_manifest
from .spec import PluginSpec, PointSpec, Provenance, SlotSpec

ENTRY_POINT_GROUP = "antler.plugins"
BUILTIN_DISTRIBUTION = "antler"
THIRD_PARTY_RANK_BASE = 100_000
"""Third-party plugins rank after every built-in unless they say otherwise."""


@dataclass(frozen=True)
class LoadDiagnostic:
    """Why one entry point contributed nothing (or less than it tried to)."""

    entry_point: str
    distribution: str
    cause: str
    plugin: str | None = None

    def __str__(self) -> str:
        what = f"plugin {self.plugin!r} from " if self.plugin else ""
        return (f"{what}distribution {self.distribution!r}, entry point {self.entry_point!r} "
                f"in group {ENTRY_POINT_GROUP!r}: {self.cause}")


@dataclass
class PluginSource:
    """Which entry point and distribution a plugin came from."""

    entry_point: str
    distribution: str
    version: str | None


@dataclass
class PluginRegistry:
    """Everything discovered: specs by name, points, slots, and what failed."""

    specs: dict[str, PluginSpec] = field(default_factory=dict)
    points: dict[str, PointSpec] = field(default_factory=dict)
    slots: dict[str, SlotSpec] = field(default_factory=dict)
    default_slot: str | None = None
    sources: dict[str, PluginSource] = field(default_factory=dict)
    diagnostics: list[LoadDiagnostic] = field(default_factory=list)
    plugin_manager: pluggy.PluginManager = field(default_factory=lambda: new_plugin_manager())
    entry_point_plugins: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_manifests(cls, manifests: Iterable[Manifest]) -> PluginRegistry:
        """A registry from explicit manifests, bypassing entry points (tests, tools)."""
        registry = cls()
        for manifest in manifests:
            registry.add_manifest(manifest, source=None)
        return registry

    def add_manifest(self, manifest: Manifest, source: PluginSource | None) -> list[str]:
        for point in manifest.points:
            self._add_unique(self.points, point, "point")
        for slot in manifest.slots:
            self._add_unique(self.slots, slot, "slot")
        if manifest.default_slot:
            if self.default_slot not in (None, manifest.default_slot):
                raise ManifestError(
                    f"{manifest.source} sets default_slot {manifest.default_slot!r}, but "
                    f"another manifest already set {self.default_slot!r}"
                )
            self.default_slot = manifest.default_slot
        return [self.add_spec(spec, source) for spec in manifest.plugins]

    def add_spec(self, spec: PluginSpec, source: PluginSource | None) -> str:
        held = self.specs.get(spec.name)
        if held is not None:
            raise ManifestError(
                f"plugin name {spec.name!r} is declared twice: at {held.provenance} and at "
                f"{spec.provenance}; names must be unique across all installed plugins"
            )
        self.specs[spec.name] = spec
        if source:
            self.sources[spec.name] = source
        return spec.name

    @staticmethod
    def _add_unique(table: dict[str, Any], item: Any, what: str) -> None:
        held = table.get(item.name)
        if held is None:
            table[item.name] = item
        elif held.model_dump() != item.model_dump():
            raise ManifestError(
                f"{what} {item.name!r} is declared differently at {held.provenance} and at "
                f"{item.provenance}; declare it once"
            )

    def require(self, name: str) -> PluginSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise KeyError(
                f"no installed plugin is named {name!r}{did_you_mean(name, self.specs)}"
            ) from None

    def raise_for_required(self, required: Iterable[str] = ()) -> None:
        """Stop when a required distribution, entry point or plugin failed to load."""
        wanted = set(required)
        fatal = [d for d in self.diagnostics
                 if d.distribution == BUILTIN_DISTRIBUTION
                 or wanted & {d.distribution, d.entry_point, d.plugin}]
        if fatal:
            raise DiscoveryError(
                "required plugins failed to load:\n  " + "\n  ".join(map(str, fatal))
                + "\nFix or reinstall the distribution, or stop marking it required."
            )


def new_plugin_manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager


def discover(*, extra_plugins: Iterable[tuple[str, Any]] = (),
             refresh: bool = False) -> PluginRegistry:
    """Find every installed plugin. Failures become diagnostics, never crashes.

    `extra_plugins` are (name, object) pairs registered as if they were entry
    points of an in-process distribution named '<in-process>'.
    """
    from stevedore import ExtensionManager

    registry = PluginRegistry()
    registry.add_manifest(_platform_manifest(), source=None)
    if refresh:
        ExtensionManager.ENTRY_POINT_CACHE.pop(ENTRY_POINT_GROUP, None)
        _clear_stevedore_path_cache()
    distributions = _entry_point_distributions()
    failures: list[tuple[Any, BaseException]] = []
    manager = ExtensionManager(
        ENTRY_POINT_GROUP,
        invoke_on_load=False,
        on_load_failure_callback=lambda _mgr, ep, exc: failures.append((ep, exc)),
    )
    for ep, exc in failures:
        dist, _ = distributions.get((ep.name, ep.value), ("<unknown>", None))
        registry.diagnostics.append(LoadDiagnostic(
            ep.name, dist, f"importing {ep.value!r} failed: {type(exc).__name__}: {exc}"))
    loaded = []
    for ext in manager.extensions:
        dist, version = distributions.get((ext.entry_point.name, ext.entry_point.value),
                                          ("<unknown>", None))
        loaded.append((PluginSource(ext.entry_point.name, dist, version), ext.plugin))
    for name, obj in extra_plugins:
        loaded.append((PluginSource(name, "<in-process>", None), obj))
    # Built-ins first, then by distribution and entry point: a duplicate name is
    # always blamed on the same party, whatever order the environment lists them.
    loaded.sort(key=lambda item: (item[0].distribution != BUILTIN_DISTRIBUTION,
                                  item[0].distribution, item[0].entry_point))
    for source, obj in loaded:
        _register(registry, source, obj)
    return registry


def _platform_manifest() -> Manifest:
    """Only the points and slots of Antler's manifest; its plugins come via entry points."""
    manifest = builtin_manifest()
    return Manifest(source=manifest.source, points=manifest.points, slots=manifest.slots,
                    default_slot=manifest.default_slot)


def _register(registry: PluginRegistry, source: PluginSource, obj: Any) -> None:
    def fail(cause: str, plugin: str | None = None) -> None:
        registry.diagnostics.append(
            LoadDiagnostic(source.entry_point, source.distribution, cause, plugin))

    manager = registry.plugin_manager
    try:
        manager.register(obj, name=source.entry_point)
    except ValueError as exc:
        fail(f"could not register its hooks: {exc} (another distribution uses the same "
             "entry point name; rename one)")
        return
    except pluggy.PluginValidationError as exc:
        fail(f"its hook implementation is invalid: {exc}")
        return
    unknown = [name for name in dir(obj) if name.startswith("antler_")
               and callable(getattr(obj, name, None))
               and not hasattr(manager.hook, name)]
    if unknown:
        manager.unregister(obj)
        fail(f"implements unknown hook(s) {unknown}; known hooks: "
             f"{', '.join(sorted(n for n in dir(manager.hook) if n.startswith('antler_')))}")
        return
    impl = next((i for i in manager.hook.antler_plugin_specs.get_hookimpls()
                 if i.plugin_name == source.entry_point), None)
    if impl is None:
        return  # a hooks-only plugin (tools, config checks) with no middleware
    try:
        contributed = impl.function()
    except Exception as exc:  # a broken third-party hook must not take the platform down
        manager.unregister(obj)
        fail(f"antler_plugin_specs() raised {type(exc).__name__}: {exc}")
        return
    try:
        manifest = _as_manifest(contributed, source)
        names = registry.add_manifest(manifest, source)
    except (ManifestError, ValidationError, TypeError) as exc:
        manager.unregister(obj)
        fail(str(exc))
        return
    registry.entry_point_plugins[source.entry_point] = names


def _as_manifest(contributed: Any, source: PluginSource) -> Manifest:
    if isinstance(contributed, Manifest):
        manifest = contributed
    elif isinstance(contributed, PluginSpec):
        manifest = Manifest(source=f"entry point {source.entry_point}", plugins=[contributed])
    elif isinstance(contributed, (list, tuple)) and all(
            isinstance(item, (PluginSpec, dict)) for item in contributed):
        specs = [item if isinstance(item, PluginSpec) else PluginSpec.model_validate(item)
                 for item in contributed]
        manifest = Manifest(source=f"entry point {source.entry_point}", plugins=specs)
    else:
        raise TypeError(
            f"antler_plugin_specs() returned {type(contributed).__name__}; it must return a "
            "PluginSpec, a list of PluginSpec (or dicts), or a Manifest"
        )
    third_party = source.distribution != BUILTIN_DISTRIBUTION
    stamped = []
    for index, spec in enumerate(manifest.plugins):
        prov = spec.provenance
        update: dict[str, Any] = {"provenance": Provenance(
            source=prov.source if prov.source != "<code>" else manifest.source,
            line=prov.line, distribution=source.distribution, version=source.version,
            entry_point=source.entry_point)}
        if third_party and (spec.rank is None or spec.rank < THIRD_PARTY_RANK_BASE):
            update["rank"] = THIRD_PARTY_RANK_BASE + (spec.rank or index)
        stamped.append(spec.model_copy(update=update))
    return Manifest(source=manifest.source, plugins=stamped, points=manifest.points,
                    slots=manifest.slots, default_slot=manifest.default_slot)


def _entry_point_distributions() -> dict[tuple[str, str], tuple[str, str | None]]:
    """(entry point name, value) -> (distribution name, version), for diagnostics."""
    table: dict[tuple[str, str], tuple[str, str | None]] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        name = dist.metadata["Name"] if dist is not None else "<unknown>"
        table.setdefault((ep.name, ep.value), (name, dist.version if dist else None))
    return table


def _clear_stevedore_path_cache() -> None:
    try:
        from stevedore import _cache

        _cache._c._internal.clear()
    except (ImportError, AttributeError):  # pragma: no cover - stevedore internals moved
        pass
