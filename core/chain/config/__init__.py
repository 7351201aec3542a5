"""The operator config: one YAML file, validated by the installed plugins' models.

Each plugin owns the top-level section named by its `config_key`; the
platform owns `chain`, `plugins` and `extensions` and the sections below;
plugins may contribute shared sections through the `antler_config_sections`
hook. The schema is assembled from whatever is installed, so a typo in any
section is an error with file, line, column and the nearest valid key, never a
silently ignored setting.

Import from `antler.chain.config`. Its modules, each one concern:

* the platform's sections: `agent` (chain, tools, skills, input, agent,
  server), `models`, `storage`, `mcp`, `plugins` (plugins and extensions);
* `operatorconfig`: `OperatorConfig`, the validated config;
* `schema`: the whole config's model, assembled from the installed plugins;
* `checks`: what the schema cannot see (switches, plugin names, extensions);
* `loader`: `load_config`/`parse_config`, YAML in and one `ConfigError` out.
"""

from __future__ import annotations

from .agent import (
    DEFAULT_SKILL_FILE_BYTES,
    AgentSettings,
    ChainSettings,
    InputSettings,
    MessageRole,
    ServerSettings,
    SkillsSettings,
    ToolEntry,
)
from .checks import silenced_entry_points
from .loader import load_config, parse_config, parse_config_document
from .mcp import McpRouting, McpServerSettings, McpServersSection, McpToolSettings
from .models import ModelEntry, ModelSpec, ModelsSettings, is_model_reference
from .operatorconfig import OperatorConfig
from .plugins import (
    ExtensionEntry,
    ExtensionsSection,
    PluginLoadSettings,
    PluginSection,
    extension_name,
    extension_ordering,
)
from .schema import (
    config_schema,
    forget_config_models,
    schema_model,
    schema_sections,
    section_model,
    section_owners,
)
from .storage import CHECKPOINTER_KINDS, PoolSettings, StorageSettings

__all__ = [
    "CHECKPOINTER_KINDS",
    "DEFAULT_SKILL_FILE_BYTES",
    "AgentSettings",
    "ChainSettings",
    "ExtensionEntry",
    "ExtensionsSection",
    "InputSettings",
    "McpRouting",
    "McpServerSettings",
    "McpServersSection",
    "McpToolSettings",
    "MessageRole",
    "ModelEntry",
    "ModelSpec",
    "ModelsSettings",
    "OperatorConfig",
    "PluginLoadSettings",
    "PluginSection",
    "PoolSettings",
    "ServerSettings",
    "SkillsSettings",
    "StorageSettings",
    "ToolEntry",
    "config_schema",
    "extension_name",
    "extension_ordering",
    "forget_config_models",
    "is_model_reference",
    "load_config",
    "parse_config",
    "parse_config_document",
    "schema_model",
    "schema_sections",
    "section_model",
    "section_owners",
    "silenced_entry_points",
]
