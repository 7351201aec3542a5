"""The config's schema: assembled from the platform's sections and the installed plugins'.

Each plugin owns the top-level section named by its `config_key` (validated by
its `config_model`); plugins may contribute shared sections through the
`antler_config_sections` hook. `config_schema` gives the JSON Schema editors use.
"""

from __future__ import annotations

import functools
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, create_model

from antler.errors import ConfigError, ReflectionError
from antler.plugin_api.reflection import resolve_object
from antler.plugin_api.registry import LoadDiagnostic, PluginRegistry
from antler.plugin_api.spec import PluginSpec
from antler.replay.settings import RecordSettings

# The platform's section models, as `operatorconfig` imports them too: the schema
# validates each section, `OperatorConfig` hands each out typed.
from .agent import (
    AgentSettings,
    ChainSettings,
    InputSettings,
    ServerSettings,
    SkillsSettings,
    ToolEntry,
)
from .mcp import McpServersSection
from .models import ModelsSettings
from .plugins import ExtensionsSection, PluginLoadSettings, PluginSection
from .storage import StorageSettings

__all__ = ["config_schema", "forget_config_models", "schema_model", "schema_sections",
           "section_model", "section_owners"]


@functools.cache
def _config_model_cached(path: str) -> type[BaseModel]:
    target = resolve_object(path, "config_model")
    if not (isinstance(target, type) and issubclass(target, BaseModel)):
        raise ReflectionError(f"config_model {path!r} is not a pydantic BaseModel subclass")
    if "enabled" in target.model_fields:
        return target
    # Every section carries the plugin's toggle, whatever the plugin's own model says.
    return create_model(
        target.__name__, __base__=target,
        enabled=(bool | None, Field(None, description="Turn the plugin on or off.")),
    )


def section_model(spec: PluginSpec) -> type[BaseModel]:
    if spec.config_model is None:
        return PluginSection
    try:
        return _config_model_cached(spec.config_model)
    except ReflectionError as exc:
        raise ConfigError(f"plugin {spec.name!r} [{spec.provenance}]: {exc}") from None


def section_owners(registry: PluginRegistry) -> dict[str, list[PluginSpec]]:
    owners: dict[str, list[PluginSpec]] = {}
    for spec in registry.specs.values():
        for key in spec.sections():
            owners.setdefault(key, []).append(spec)
    return owners


def schema_model(registry: PluginRegistry) -> type[BaseModel]:
    """The pydantic model of the whole config for the plugins in `registry`."""
    fields: dict[str, Any] = {
        "chain": (ChainSettings | None, Field(None, description=ChainSettings.__doc__)),
        "extensions": (ExtensionsSection | None,
                       Field(None, description=ExtensionsSection.__doc__)),
        "models": (ModelsSettings | None, Field(None, description=ModelsSettings.__doc__)),
        "tools": (list[ToolEntry] | None,
                  Field(None, description="Tools added to the agents, by 'module:attr'.")),
        "storage": (StorageSettings | None, Field(None, description=StorageSettings.__doc__)),
        "skills": (SkillsSettings | None, Field(None, description=SkillsSettings.__doc__)),
        "input": (InputSettings | None, Field(None, description=InputSettings.__doc__)),
        "mcp_servers": (McpServersSection | None,
                        Field(None, description=McpServersSection.__doc__)),
        "server": (ServerSettings | None, Field(None, description=ServerSettings.__doc__)),
        "agent": (AgentSettings | None, Field(None, description=AgentSettings.__doc__)),
        "record": (RecordSettings | None, Field(None, description=RecordSettings.__doc__)),
        "plugins": (dict[str, PluginLoadSettings] | None,
                    Field(None, description="Per-plugin load settings, by plugin, entry "
                          "point or distribution name.")),
    }
    for key, owners in sorted(section_owners(registry).items()):
        models = {section_model(spec) for spec in owners}
        if len(models) > 1:
            names = ", ".join(f"{s.name} [{s.provenance}]" for s in owners)
            raise ConfigError(
                f"config section {key!r} is claimed by plugins with different config models: "
                f"{names}; they must share one config_model"
            )
        if key in fields:
            raise ConfigError(f"plugin {owners[0].name!r} claims config section {key!r}, "
                              "which the platform owns; choose another config_key")
        summary = "; ".join(f"{s.name}: {s.summary}" for s in owners)
        fields[key] = (models.pop() | None, Field(None, description=summary))
    contributors: dict[str, str] = {}
    for entry_point in registry.entry_points:
        for contributed in registry.ask(entry_point, "antler_config_sections"):
            for key, model in contributed.items():
                if key in contributors:
                    # The later distribution's section is left out, as a clashing plugin is.
                    _note_section_clash(registry, entry_point, key, contributors[key])
                    continue
                if key in fields:
                    raise ConfigError(f"config section {key!r} is contributed by entry point "
                                      f"{entry_point!r} but is a plugin's or the platform's; "
                                      "choose another name")
                contributors[key] = entry_point
                fields[key] = (model | None, Field(None, description=model.__doc__))
    # Built on first use (a validation, a JSON Schema): a config without sections needs
    # neither, and building it builds every section's model.
    return create_model(
        "AntlerConfig", __config__=ConfigDict(extra="forbid", defer_build=True), **fields
    )


def _note_section_clash(registry: PluginRegistry, entry_point: str, key: str,
                        holder: str) -> None:
    source, held = registry.entry_points[entry_point], registry.entry_points[holder]
    diagnostic = LoadDiagnostic(
        entry_point, source.distribution,
        f"its config section {key!r} (antler_config_sections) is also contributed by "
        f"distribution {held.distribution!r} (entry point {holder!r}); this one is left out")
    if diagnostic not in registry.diagnostics:
        registry.diagnostics.append(diagnostic)


def schema_sections(registry: PluginRegistry) -> dict[str, type[BaseModel] | None]:
    """Each top-level config section and its model (None where it is not one model)."""
    sections: dict[str, type[BaseModel] | None] = {}
    for key, info in schema_model(registry).model_fields.items():
        found = [alt for alt in get_args(info.annotation) or (info.annotation,)
                 if isinstance(alt, type) and issubclass(alt, BaseModel)]
        sections[key] = found[0] if found else None
    return sections


def config_schema(registry: PluginRegistry) -> dict[str, Any]:
    """JSON Schema of the operator config, for editors (yaml-language-server)."""
    schema = schema_model(registry).model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Antler operator config"
    return schema


def forget_config_models() -> None:
    """Drop the config models cached by 'module:Model' path (a test that writes a
    distribution afresh must not validate against a class imported earlier)."""
    _config_model_cached.cache_clear()
