"""Plugin discovery: entry points through stevedore, hooks through pluggy.

Every plugin, built-in or third-party, is an entry point in the
`antler.plugins` group. Stevedore finds and imports the entry point's target
(a light module that only declares specs); pluggy registers it and calls its
`antler_plugin_specs` hook. Nothing here imports a middleware module.

A distribution that fails (import error, a hook that raises, a wrong return
type) produces a `LoadDiagnostic` naming the distribution, the entry point and
the cause. A plugin name two distributions declare is a clash: only the
clashing plugin of the later one (built-ins first, then by distribution name)
is left out, with a diagnostic naming both; the operator picks the other with
`plugins: {NAME: {distribution: DIST}}` (`PluginRegistry.choose`). Optional
distributions fail open with their diagnostic; required ones (Antler's own,
and any the operator marks required) stop the build in
`PluginRegistry.raise_for_required`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import re
import sys
import time
import types
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy
from pydantic import ValidationError

from antler.errors import AntlerError, DiscoveryError, ManifestError, UnknownPluginError
from antler.plugin_api import hookspecs

from .diagnostics import did_you_mean
from .manifest import Manifest, builtin_manifest
from .spec import PluginSpec, PointSpec, Provenance, SlotSpec

ENTRY_POINT_GROUP = "antler.plugins"
BUILTIN_DISTRIBUTION = "antler"
log = logging.getLogger("antler.plugins")
THIRD_PARTY_RANK_BASE = 100_000
"""Third-party plugins rank after every built-in unless they say otherwise."""


@dataclass(frozen=True)
class LoadDiagnostic:
    """Why one entry point contributed nothing (or less than it tried to)."""

    entry_point: str
    distribution: str
    cause: str
    plugin: str | None = None
    clash: str | None = None
    """The plugin name this entry point lost to another distribution (see `contenders`)."""
    chosen: bool = False
    """The operator chose the other distribution: not a failure, even of a required one."""
    sections: tuple[tuple[str, str], ...] = ()
    """(config section, plugin) pairs of the plugins this failure left out, where known."""

    def __str__(self) -> str:
        what = f"plugin {self.plugin!r} from " if self.plugin else ""
        return (f"{what}distribution {self.distribution!r}, entry point {self.entry_point!r} "
                f"in group {ENTRY_POINT_GROUP!r}: {self.cause}")


SLOW_IMPORT_ENV = "ANTLER_SLOW_IMPORT_SECONDS"
SLOW_IMPORT_SECONDS = 1.0
"""An entry point or factory import slower than this is named in a warning (and by
`antler doctor`); `$ANTLER_SLOW_IMPORT_SECONDS` changes the threshold."""


def slow_import_threshold() -> float:
    """The slow-import threshold in seconds: `$ANTLER_SLOW_IMPORT_SECONDS`, else 1.0."""
    try:
        return float(os.environ.get(SLOW_IMPORT_ENV, SLOW_IMPORT_SECONDS))
    except ValueError:
        return SLOW_IMPORT_SECONDS


@dataclass(frozen=True)
class ImportTiming:
    """How long importing one entry point's module or one plugin's factory took."""

    what: str
    """'entry point NAME' or 'factory of plugin NAME'."""
    module: str
    distribution: str
    seconds: float

    def __str__(self) -> str:
        return (f"{self.what} ({self.module}, distribution {self.distribution!r}) took "
                f"{self.seconds:.2f} s to import")


def record_import(timings: list[ImportTiming], timing: ImportTiming) -> None:
    """Keep `timing`, and warn when it is past the slow-import threshold."""
    timings.append(timing)
    threshold = slow_import_threshold()
    if timing.seconds > threshold:
        log.warning("slow plugin import: %s (threshold %.2f s, $%s); every command that "
                    "loads it pays this: move heavy imports into the functions that need "
                    "them", timing, threshold, SLOW_IMPORT_ENV)


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
    entry_points: dict[str, PluginSource] = field(default_factory=dict)
    """Every registered entry point (hooks-only ones included) by name."""
    import_timings: list[ImportTiming] = field(default_factory=list)
    """How long each entry point's module (and, once planned, each factory) took to import."""
    contenders: dict[str, list[tuple[PluginSpec, PluginSource]]] = field(default_factory=dict)
    """Plugin names two or more distributions declare -> every declaration, default first."""

    @classmethod
    def from_manifests(cls, manifests: Iterable[Manifest]) -> PluginRegistry:
        """A registry from explicit manifests, bypassing entry points (tests, tools)."""
        registry = cls()
        for manifest in manifests:
            registry.add_manifest(manifest, source=None)
        return registry

    def add_manifest(self, manifest: Manifest, source: PluginSource | None) -> list[str]:
        """Add everything `manifest` declares, or nothing when any of it conflicts."""
        # Check first, then add: a distribution that fails must not stay half-registered.
        for items, table, what in ((manifest.points, self.points, "point"),
                                   (manifest.slots, self.slots, "slot")):
            seen = dict(table)
            for item in items:
                self._check_unique(seen, item, what)
                seen.setdefault(item.name, item)
        if manifest.default_slot and self.default_slot not in (None, manifest.default_slot):
            raise ManifestError(
                f"{manifest.source} sets default_slot {manifest.default_slot!r}, but "
                f"another manifest already set {self.default_slot!r}"
            )
        pending: dict[str, PluginSpec] = {}
        clashing = []
        for spec in manifest.plugins:
            held = self.sources.get(spec.name)
            if source is not None and held is not None and held.entry_point != \
                    source.entry_point and spec.name not in pending:
                clashing.append(spec)  # another distribution's name: only this plugin is out
                continue
            self._check_new_spec(spec, pending)
            pending[spec.name] = spec
        for point in manifest.points:
            self.points.setdefault(point.name, point)
        for slot in manifest.slots:
            self.slots.setdefault(slot.name, slot)
        self.default_slot = manifest.default_slot or self.default_slot
        for spec in clashing:
            assert source is not None
            self.contenders.setdefault(spec.name, [(self.specs[spec.name],
                                                    self.sources[spec.name])])
            self.contenders[spec.name].append((spec, source))
            self._note_clash(spec.name)
        return [self.add_spec(spec, source) for spec in manifest.plugins
                if spec not in clashing]

    def choose(self, name: str, distribution: str | None) -> str | None:
        """Make the plugin `name` the one `distribution` declares (None: the default).

        Returns a problem (one line) when no installed distribution of that name
        declares it. The plugins left out get a diagnostic naming the chosen one.
        """
        candidates = self.contenders.get(name)
        if distribution is None:
            if candidates:
                self._install(name, *candidates[0], chosen=False)
            return None
        wanted = canonical_name(distribution)
        if not candidates:
            if name not in self.specs:
                return f"no installed plugin is named {name!r}{did_you_mean(name, self.specs)}"
            source = self.sources.get(name)
            if source is None or canonical_name(source.distribution) == wanted:
                return None
            return (f"plugin {name!r} comes from distribution {source.distribution!r}, not "
                    f"{distribution!r}, and no other installed distribution declares it")
        for spec, source in candidates:
            if canonical_name(source.distribution) == wanted:
                self._install(name, spec, source, chosen=True)
                return None
        offered = ", ".join(repr(source.distribution) for _, source in candidates)
        return (f"no installed distribution {distribution!r} declares plugin {name!r}; the "
                f"distributions that do: {offered}")

    def _install(self, name: str, spec: PluginSpec, source: PluginSource, *,
                 chosen: bool) -> None:
        """Make (`spec`, `source`) the plugin `name`, the other contenders left out."""
        for _, other in self.contenders[name]:
            names = self.entry_point_plugins.get(other.entry_point)
            if names is not None and name in names:
                names.remove(name)
        self.specs[name] = spec
        self.sources[name] = source
        names = self.entry_point_plugins.setdefault(source.entry_point, [])
        if name not in names:
            names.append(name)
        self._note_clash(name, chosen)

    def _note_clash(self, name: str, chosen: bool = False) -> None:
        """One diagnostic per contender of `name` left out, naming the one that holds it."""
        self.diagnostics = [d for d in self.diagnostics if d.clash != name]
        holder = self.sources[name]
        for spec, source in self.contenders[name]:
            if source.entry_point == holder.entry_point:
                continue
            self.diagnostics.append(LoadDiagnostic(
                source.entry_point, source.distribution,
                f"plugin name {name!r} is also declared by distribution "
                f"{holder.distribution!r} (entry point {holder.entry_point!r}, at "
                f"{self.specs[name].provenance}); this distribution's {name!r} (at "
                f"{spec.provenance}) is left out and its other plugins stay. To use this one "
                f"instead, set `plugins: {{{name}: {{distribution: {source.distribution}}}}}` "
                "in the operator config", clash=name, chosen=chosen))

    def add_spec(self, spec: PluginSpec, source: PluginSource | None) -> str:
        self._check_new_spec(spec)
        self.specs[spec.name] = spec
        if source:
            self.sources[spec.name] = source
        return spec.name

    def _check_new_spec(self, spec: PluginSpec, pending: dict[str, PluginSpec] | None = None,
                        ) -> None:
        held = self.specs.get(spec.name) or (pending or {}).get(spec.name)
        if held is not None:
            raise ManifestError(
                f"plugin name {spec.name!r} is declared twice: at {held.provenance} and at "
                f"{spec.provenance}; names must be unique across all installed plugins"
            )

    @staticmethod
    def _check_unique(table: dict[str, Any], item: Any, what: str) -> None:
        held = table.get(item.name)
        if held is not None and held.model_dump() != item.model_dump():
            raise ManifestError(
                f"{what} {item.name!r} is declared differently at {held.provenance} and at "
                f"{item.provenance}; declare it once"
            )

    def require(self, name: str) -> PluginSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise UnknownPluginError(
                f"no installed plugin is named {name!r}{did_you_mean(name, self.specs)}"
            ) from None

    def names_of(self, spec: PluginSpec) -> tuple[str, ...]:
        """The names `plugins.<name>` may use for `spec`: plugin, entry point, distribution.

        Most specific first; a plugin from a --manifest file has only its own name.
        """
        source = self.sources.get(spec.name)
        prov = spec.provenance
        names = (spec.name, source.entry_point if source else prov.entry_point,
                 source.distribution if source else prov.distribution)
        return tuple(name for name in names if name)

    def call_one(self, entry_point: str, hook: str, **kwargs: Any) -> list[Any]:
        """`hook` as the plugin registered as `entry_point` alone implements it.

        pluggy drops None results, so an empty list means "nothing to say" (or no
        implementation). Hooks such as `antler_tools` are called this way because each
        plugin gets its own build context.
        """
        manager = self.plugin_manager
        others = [plugin for name, plugin in manager.list_name_plugin()
                  if name != entry_point and plugin is not None]
        return list(manager.subset_hook_caller(hook, others)(**kwargs))

    def ask(self, entry_point: str, hook: str, required: Iterable[str] = (),
            **kwargs: Any) -> list[Any]:
        """`call_one`, where a hook that raises is a load diagnostic of its distribution.

        A broken optional distribution then costs only its own contribution (its
        tools, its config checks), shown wherever load diagnostics are; a required
        one (Antler's own, or named in `required`) stops with `DiscoveryError`. An
        `AntlerError` the hook raises on purpose (a veto) goes through unchanged.
        """
        try:
            return self.call_one(entry_point, hook, **kwargs)
        except AntlerError:
            raise
        except Exception as exc:
            source = self.entry_points.get(entry_point)
            diagnostic = LoadDiagnostic(
                entry_point, source.distribution if source else "<unknown>",
                f"{hook}() raised {type(exc).__name__}: {exc}; what it contributes is left out")
            if diagnostic not in self.diagnostics:
                self.diagnostics.append(diagnostic)
            self.raise_for_required(required)
            return []

    def load_names(self) -> set[str]:
        """Every name `plugins.<name>` may use: plugins, entry points, distributions."""
        names = {*self.specs, *self.entry_point_plugins, BUILTIN_DISTRIBUTION}
        names.update(name for name, _ in self.plugin_manager.list_name_plugin())
        for source in self.sources.values():
            names.update((source.entry_point, source.distribution))
        for d in self.diagnostics:
            names.update(n for n in (d.entry_point, d.distribution, d.plugin) if n)
        return names

    def skipped_section(self, key: str) -> tuple[str, LoadDiagnostic] | None:
        """(plugin, why) when config section `key` belongs to a plugin that failed to load.

        Known from the failed manifest where it could be read, else when the section
        is named as the failed entry point or plugin is.
        """
        for diagnostic in self.diagnostics:
            if diagnostic.clash:
                continue
            owners = dict(diagnostic.sections)
            if key in owners:
                return owners[key], diagnostic
            if key in (diagnostic.plugin, diagnostic.entry_point):
                return key, diagnostic
        return None

    def required_failures(self, required: Iterable[str] = ()) -> list[LoadDiagnostic]:
        """The load failures that stop a build: Antler's own, and those named in `required`."""
        wanted = {canonical_name(name) for name in required}
        return [d for d in self.diagnostics if not d.chosen and (
                d.distribution == BUILTIN_DISTRIBUTION
                or wanted & {canonical_name(n) for n in (d.distribution, d.entry_point, d.plugin)
                             if n})]

    def raise_for_required(self, required: Iterable[str] = ()) -> None:
        """Stop when a required distribution, entry point or plugin failed to load."""
        fatal = self.required_failures(required)
        if fatal:
            raise DiscoveryError(
                "required plugins failed to load:\n  " + "\n  ".join(map(str, fatal))
                + "\nFix or reinstall the distribution, or stop marking it required."
            )


def canonical_name(name: str) -> str:
    """A distribution name as packaging compares them: 'Acme_Antler' == 'acme-antler'."""
    return re.sub(r"[-_.]+", "-", name).lower()


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

    from .entrypoints import ListedExtensionManager, listed_entry_points

    registry = PluginRegistry()
    registry.add_manifest(_platform_manifest(), source=None)
    if refresh:
        ExtensionManager.ENTRY_POINT_CACHE.pop(ENTRY_POINT_GROUP, None)
        _clear_stevedore_path_cache()
    # Listing entry points scans every installed distribution: list them once here, and
    # let stevedore load these (its own listing would hash sys.path and read its cache).
    entry_points = listed_entry_points(ENTRY_POINT_GROUP)
    distributions = _entry_point_distributions(entry_points)
    registry.import_timings.extend(_timed_entry_point_imports(entry_points, distributions))
    failures: list[tuple[Any, BaseException]] = []
    manager = ListedExtensionManager(
        ENTRY_POINT_GROUP, entry_points,
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
    # Checked before registering: pluggy accepts an implementation of a hook it has
    # no spec for (creating a spec-less caller), so a misspelt hook would be ignored.
    known = sorted(n for n in dir(hookspecs) if n.startswith("antler_"))
    hooks = {name: getattr(obj, name) for name in dir(obj) if name.startswith("antler_")
             and callable(getattr(obj, name, None))}
    unknown = [name for name in hooks if name not in known]
    if unknown:
        hints = "".join(did_you_mean(name, known) for name in unknown)
        fail(f"implements unknown hook(s) {unknown}{hints}; known hooks: {', '.join(known)}")
        return
    if not isinstance(obj, Hashable):
        # pluggy's subset callers keep plugins in a set: an unhashable object (a
        # SimpleNamespace) is registered as a module holding its hooks.
        obj = types.ModuleType(source.entry_point)
        vars(obj).update(hooks)
    try:
        manager.register(obj, name=source.entry_point)
    except ValueError as exc:
        fail(f"could not register its hooks: {exc} (another distribution uses the same "
             "entry point name; rename one)")
        return
    except pluggy.PluginValidationError as exc:
        fail(f"its hook implementation is invalid: {exc}")
        return
    try:
        results = registry.call_one(source.entry_point, "antler_plugin_specs")
    except Exception as exc:  # a broken third-party hook must not take the platform down
        manager.unregister(obj)
        registry.diagnostics.append(LoadDiagnostic(
            source.entry_point, source.distribution,
            f"antler_plugin_specs() raised {type(exc).__name__}: {exc}",
            sections=tuple(getattr(exc, "sections", {}).items())))
        return
    names: list[str] = []
    if results:  # else a hooks-only plugin (tools, config checks) with no middleware
        try:
            names = registry.add_manifest(_as_manifest(results[0], source), source)
        except (ManifestError, ValidationError, TypeError) as exc:
            manager.unregister(obj)
            fail(str(exc))
            return
    registry.entry_points[source.entry_point] = source
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


def _timed_entry_point_imports(entry_points: Iterable[importlib.metadata.EntryPoint],
                               distributions: dict[tuple[str, str], tuple[str, str | None]],
                               ) -> list[ImportTiming]:
    """Import each entry point's module once, timed, before stevedore loads them.

    Stevedore then finds the modules imported; a module that fails to import is
    left to it, so the failure is reported where every other load failure is.
    """
    timings: list[ImportTiming] = []
    for ep in entry_points:
        module = ep.value.partition(":")[0].strip()
        if module in sys.modules:
            continue
        started = time.perf_counter()
        try:
            importlib.import_module(module)
        except Exception:
            continue
        dist = distributions.get((ep.name, ep.value), ("<unknown>", None))[0]
        record_import(timings, ImportTiming(f"entry point {ep.name!r}", module, dist,
                                            time.perf_counter() - started))
    return timings


def _entry_point_distributions(entry_points: Iterable[importlib.metadata.EntryPoint],
                               ) -> dict[tuple[str, str], tuple[str, str | None]]:
    """(entry point name, value) -> (distribution name, version), for diagnostics."""
    table: dict[tuple[str, str], tuple[str, str | None]] = {}
    # Each entry point carries its own Distribution object, and each read of its
    # metadata parses the METADATA file again: read it once per distribution.
    identities: dict[Any, tuple[str, str | None]] = {}
    for ep in entry_points:
        dist = getattr(ep, "dist", None)
        if dist is None:
            identity: tuple[str, str | None] = ("<unknown>", None)
        else:
            where = getattr(dist, "_path", None)
            key = str(where) if where is not None else id(dist)
            if key not in identities:
                metadata = dist.metadata
                identities[key] = (metadata["Name"], metadata["Version"])
            identity = identities[key]
        table.setdefault((ep.name, ep.value), identity)
    return table


def _clear_stevedore_path_cache() -> None:
    from antler.compat import clear_stevedore_path_cache

    clear_stevedore_path_cache()
