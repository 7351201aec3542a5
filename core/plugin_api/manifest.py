"""Plugin manifests: the YAML (or in-code) declaration of plugins, points and slots.

The same format serves Antler's own `plugin-manifest.yaml` and every third-party
distribution's manifest, so built-ins have no private path into the chain.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from antler.errors import ManifestError
from antler.parselimits import SourceLimitError, read_bounded

from .diagnostics import describe_validation_error
from .markers import hookimpl
from .spec import API_VERSION, PluginSpec, PointSpec, Provenance, SlotSpec
from .yamlsource import YamlDocument, YamlSyntaxError, load_yaml, load_yaml_file

BUILTIN_MANIFEST = "plugin-manifest.yaml"


class _ManifestModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_version: int
    default_slot: str | None = Field(
        None, description="Slot for plugins that declare no ordering at all."
    )
    points: list[PointSpec] = Field(default_factory=list)
    slots: list[SlotSpec] = Field(default_factory=list)
    plugins: list[PluginSpec] = Field(default_factory=list)


@dataclass
class Manifest:
    """The validated content of one manifest, each entry stamped with provenance."""

    source: str
    plugins: list[PluginSpec] = field(default_factory=list)
    points: list[PointSpec] = field(default_factory=list)
    slots: list[SlotSpec] = field(default_factory=list)
    default_slot: str | None = None

    def plugin(self, name: str) -> PluginSpec:
        for spec in self.plugins:
            if spec.name == name:
                return spec
        known = ", ".join(spec.name for spec in self.plugins)
        raise ManifestError(f"{self.source}: no plugin named {name!r}; it declares: {known}")


def parse_manifest(
    doc: YamlDocument,
    *,
    distribution: str | None = None,
    version: str | None = None,
    entry_point: str | None = None,
    rank_base: int = 0,
) -> Manifest:
    """Validate a parsed YAML manifest; errors name file, line, column and key."""
    data = doc.data
    if not isinstance(data, dict):
        raise ManifestError(f"{doc.source}: a manifest must be a mapping with 'api_version' "
                            "and 'plugins'")
    api = data.get("api_version")
    if api != API_VERSION:
        where = doc.locate(("api_version",))
        raise ManifestError(
            f"{where}: api_version {api!r} is not supported; this Antler reads manifests with "
            f"api_version: {API_VERSION}", sections=_declared_sections(data))
    try:
        model = _ManifestModel.model_validate(data)
    except ValidationError as exc:
        lines = describe_validation_error(exc, doc, model=_ManifestModel)
        raise ManifestError("invalid plugin manifest:\n  " + "\n  ".join(lines)) from None

    def stamp(item: Any, key: str, index: int) -> Any:
        loc = doc.locate((key, index))
        prov = Provenance(source=doc.source, line=loc.line, distribution=distribution,
                          version=version, entry_point=entry_point)
        return item.model_copy(update={"provenance": prov})

    plugins = []
    seen: dict[str, PluginSpec] = {}
    for index, spec in enumerate(model.plugins):
        spec = stamp(spec, "plugins", index)
        if spec.rank is None:
            spec = spec.model_copy(update={"rank": rank_base + index})
        if spec.name in seen:
            raise ManifestError(
                f"{spec.provenance}: plugin {spec.name!r} is declared twice in one manifest "
                f"(first at {seen[spec.name].provenance})"
            )
        seen[spec.name] = spec
        plugins.append(spec)
    return Manifest(
        source=doc.source,
        plugins=plugins,
        points=[stamp(p, "points", i) for i, p in enumerate(model.points)],
        slots=[stamp(s, "slots", i) for i, s in enumerate(model.slots)],
        default_slot=model.default_slot,
    )


def _declared_sections(data: dict[str, Any]) -> dict[str, str]:
    """Config section -> plugin name, read leniently from a manifest that did not validate."""
    sections: dict[str, str] = {}
    plugins = data.get("plugins")
    for entry in plugins if isinstance(plugins, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            key = entry.get("config_key")
            sections[key if isinstance(key, str) else entry["name"]] = entry["name"]
    return sections


def load_manifest(path: str | Path, **provenance: Any) -> Manifest:
    try:
        doc = load_yaml_file(path)
    except YamlSyntaxError as exc:
        raise ManifestError(str(exc)) from None
    return parse_manifest(doc, **provenance)


def load_manifest_text(text: str, source: str = "<manifest>", **provenance: Any) -> Manifest:
    try:
        doc = load_yaml(text, source)
    except YamlSyntaxError as exc:
        raise ManifestError(str(exc)) from None
    return parse_manifest(doc, **provenance)


def load_package_manifest(package: str, filename: str = BUILTIN_MANIFEST,
                          **provenance: Any) -> Manifest:
    """Load a manifest shipped as package data (how third parties ship theirs)."""
    resource = resources.files(package).joinpath(filename)
    if not resource.is_file():
        raise ManifestError(
            f"package {package!r} has no {filename!r}; ship it as package data")
    try:
        text = read_bounded(resource)
    except SourceLimitError as exc:
        raise ManifestError(f"package {package!r}: {exc}") from None
    return load_manifest_text(text, f"{package}/{filename}", **provenance)


@functools.cache
def builtin_manifest() -> Manifest:
    """Antler's platform manifest: the points and slots of the chain (no plugins).

    Shipped inside the wheel as package data; in a source checkout the
    top-level file is the same file (the package copy is a link to it). Each
    built-in plugin's entry is in its own folder (`builtin_plugins_manifest`).
    """
    from antler import __version__

    return load_package_manifest("antler", distribution="antler", version=__version__)


def package_manifest_of(module: str, filename: str = BUILTIN_MANIFEST) -> str:
    """The package holding the manifest of `module`: `module` itself or the nearest
    package above it that ships `filename` (a plugin's subpackage shares its folder's)."""
    parts = module.split(".")
    while parts:
        package = ".".join(parts)
        try:
            if resources.files(package).joinpath(filename).is_file():
                return package
        except (ModuleNotFoundError, TypeError):  # TypeError: a module, not a package
            pass
        parts.pop()
    raise ManifestError(f"no {filename!r} in {module!r} or a package above it; ship it as "
                        "package data beside the plugin's __init__.py")


def manifest_plugin_hook(module: str, name: str | None = None) -> Any:
    """The `antler_plugin_specs` hook of a plugin package: its manifest's plugins, read
    from the `plugin-manifest.yaml` of `module` (or the nearest package above it);
    with `name`, only that plugin (a manifest declaring two plugins, each its own
    entry point).

    A package's `__init__` then holds only
    ``antler_plugin_specs = manifest_plugin_hook(__name__)``, and its middleware
    module stays unimported until the plugin is enabled. The built-ins use it.
    """

    @hookimpl
    def antler_plugin_specs() -> Manifest | PluginSpec:
        manifest = load_package_manifest(package_manifest_of(module))
        return manifest if name is None else manifest.plugin(name)

    return antler_plugin_specs


BUILTIN_PLUGIN_PACKAGES = "antler.plugins."
"""The prefix of the built-in plugins' entry points (contrib's are extensions)."""


@functools.cache
def builtin_plugins_manifest() -> Manifest:
    """Every built-in plugin, from each one's own manifest, found through Antler's entry
    points as discovery finds them (without registering anything). For tests and
    tools that want the built-ins without discovering the installed distributions."""
    from importlib.metadata import distribution

    from antler import __version__

    modules = sorted(ep.module for ep in distribution("antler").entry_points
                     if ep.group == "antler.plugins" and ep.module.startswith(
                         BUILTIN_PLUGIN_PACKAGES))
    plugins: dict[str, PluginSpec] = {}
    for package in dict.fromkeys(package_manifest_of(module) for module in modules):
        for spec in load_package_manifest(package, distribution="antler",
                                          version=__version__).plugins:
            plugins.setdefault(spec.name, spec)
    specs = sorted(plugins.values(), key=lambda spec: (spec.rank is None, spec.rank or 0))
    return Manifest(source="antler built-in plugins", plugins=specs)


def builtin_plugin_hook(name: str) -> Any:
    """Deprecated: `manifest_plugin_hook(__name__)` (the spec is in the plugin's folder)."""
    import warnings

    warnings.warn("antler.plugin_api.builtin_plugin_hook is deprecated and will be removed "
                  "in the next minor version; use manifest_plugin_hook(__name__) with the "
                  "plugin's own plugin-manifest.yaml", DeprecationWarning, stacklevel=2)

    @hookimpl
    def antler_plugin_specs() -> list[PluginSpec]:
        return [builtin_plugins_manifest().plugin(name)]

    return antler_plugin_specs
