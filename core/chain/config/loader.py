"""Reading an operator config: YAML in, a validated `OperatorConfig` out, or one error.

A typo in any section is an error with file, line, column and the nearest
valid key, never a silently ignored setting; a section of a plugin that was
skipped or is not installed says so; a DeerFlow key gets a hint to
`antler config migrate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from antler.chain.policy import gate_problems
from antler.errors import ConfigError
from antler.plugin_api.diagnostics import describe_validation_error, did_you_mean
from antler.plugin_api.registry import PluginRegistry
from antler.plugin_api.yamlsource import YamlDocument, YamlSyntaxError, load_yaml, load_yaml_file

from .agent import ToolEntry
from .checks import (
    extension_problems,
    plugin_setting_problems,
    silenced_entry_points,
    toggle_problems,
)
from .operatorconfig import OperatorConfig
from .plugins import PluginLoadSettings
from .schema import schema_model

__all__ = ["load_config", "parse_config", "parse_config_document"]


def load_config(path: str | Path | None, registry: PluginRegistry) -> OperatorConfig:
    """Read and validate an operator config file; None means all defaults."""
    if path is None:
        return parse_config_document(YamlDocument(data={}, source="<defaults>"), registry)
    try:
        doc = load_yaml_file(path)
    except YamlSyntaxError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config_document(doc, registry)


def parse_config(text: str, registry: PluginRegistry, source: str = "<config>") -> OperatorConfig:
    try:
        doc = load_yaml(text, source)
    except YamlSyntaxError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config_document(doc, registry)


def parse_config_document(doc: YamlDocument, registry: PluginRegistry) -> OperatorConfig:
    data = {} if doc.data is None else doc.data
    if not isinstance(data, dict):
        raise ConfigError(f"{doc.source}:1:1: the config must be a mapping of sections, got "
                          f"{type(data).__name__}")
    _choose_distributions(doc, data, registry)
    model = schema_model(registry)
    orphans = _orphan_sections(doc, data, model, registry)
    payload = {key: value for key, value in data.items() if key not in orphans}
    try:
        # Every section is optional: a document without one validates to all unset, so
        # the model (built on first use) is built only for a document that has sections.
        validated = dict(model.model_validate(payload)) if payload else {}
    except ValidationError as exc:
        lines = describe_validation_error(exc, doc, model=model, hint=_deerflow_hint)
        raise ConfigError(f"invalid config {doc.source}:\n  "
                          + "\n  ".join([*orphans.values(), *lines])) from None
    if orphans:
        raise ConfigError(f"invalid config {doc.source}:\n  " + "\n  ".join(orphans.values()))
    sections = {key: value for key, value in validated.items() if value is not None}
    if "plugins" in sections:
        sections["plugins"] = _PluginsTable(root=sections["plugins"])
    if "tools" in sections:
        sections["tools"] = _ToolsList(root=sections["tools"])
    config = OperatorConfig(source=doc.source, sections=sections, document=doc)
    problems = (toggle_problems(config, registry) + plugin_setting_problems(config, registry)
                + extension_problems(config) + gate_problems(config, registry))
    silenced = silenced_entry_points(config, registry)
    for entry_point in registry.entry_points:
        if entry_point not in silenced:
            for extra in registry.ask(entry_point, "antler_validate_config",
                                      config.required_plugins(), config=config):
                problems.extend(extra)
    if problems:
        raise ConfigError(f"invalid config {doc.source}:\n  " + "\n  ".join(problems))
    return config


def _orphan_sections(doc: YamlDocument, data: dict[str, Any], model: type[BaseModel],
                     registry: PluginRegistry) -> dict[str, str]:
    """Sections no installed plugin reads that look like a plugin's -> what to say of each.

    A section of a plugin that was skipped names the plugin, its distribution and
    why; a mapping with `enabled:` that no installed plugin owns is most likely a
    plugin's whose distribution is not installed, unless its name is close to a
    section's (any other unknown key is left to the schema, with its did-you-mean).
    """
    found = {}
    for key, value in data.items():
        if not isinstance(key, str) or key in model.model_fields:
            continue
        where = doc.locate((key,))
        skipped = registry.skipped_section(key)
        if skipped is not None:
            plugin, diagnostic = skipped
            found[key] = (
                f"{where}: section {key!r} configures plugin {plugin!r} of distribution "
                f"{diagnostic.distribution!r} (entry point {diagnostic.entry_point!r}), which "
                f"was skipped: {diagnostic.cause}. Fix or upgrade that distribution, or "
                "remove the section")
        elif (isinstance(value, dict) and "enabled" in value
              and not did_you_mean(key, model.model_fields)):  # a misspelt section's is kept
            found[key] = (
                f"{where}: section {key!r}: no installed plugin is named {key!r}; install "
                "the distribution that provides it, or remove the section")
    return found


def _choose_distributions(doc: YamlDocument, data: dict[str, Any],
                          registry: PluginRegistry) -> None:
    """Apply `plugins.<name>.distribution` before the schema is assembled: the chosen
    plugin's config model validates its section. Names not chosen get the default."""
    table = data.get("plugins")
    wanted = {key: entry.get("distribution") for key, entry in table.items()
              if isinstance(entry, dict) and isinstance(entry.get("distribution"), str)} \
        if isinstance(table, dict) else {}
    problems = []
    for name in sorted({*registry.contenders, *wanted}):
        problem = registry.choose(name, wanted.get(name))
        if problem:
            where = doc.locate(("plugins", name, "distribution"))
            problems.append(f"{where}: plugins.{name}.distribution: {problem}")
    if problems:
        raise ConfigError(f"invalid config {doc.source}:\n  " + "\n  ".join(problems))


def _deerflow_hint(loc: tuple[Any, ...]) -> str | None:
    """A hint to `antler config migrate` when the key at `loc` is a DeerFlow one.

    Imported here, on the error path: a valid config never needs the DeerFlow
    key table (and `antler.deerflow` imports nothing of the config).
    """
    from antler.deerflow import deerflow_hint

    return deerflow_hint(str(loc[0]), str(loc[1])) if len(loc) == 2 else None


class _PluginsTable(BaseModel):
    root: dict[str, PluginLoadSettings]


class _ToolsList(BaseModel):
    root: list[ToolEntry]
