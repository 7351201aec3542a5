"""The operator config: one YAML file, validated by the installed plugins' models.

Each plugin owns the top-level section named by its `config_key`; the
platform owns `chain`, `plugins` and `extensions`; plugins may contribute
shared sections through the `antler_config_sections` hook. The schema is
assembled from whatever is installed, so a typo in any section is an error with
file, line, column and the nearest valid key, never a silently ignored setting.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from antler.chain.modelspec import provider_of
from antler.chain.policy import gate_problems
from antler.errors import ConfigError, ReflectionError
from antler.plugin_api.diagnostics import describe_validation_error, did_you_mean
from antler.plugin_api.reflection import resolve_object, split_path
from antler.plugin_api.registry import LoadDiagnostic, PluginRegistry, canonical_name
from antler.plugin_api.spec import CHAIN_NAMES, Chain, Ordering, PluginSpec, check_plugin_name
from antler.plugin_api.yamlsource import (
    Location,
    YamlDocument,
    YamlSyntaxError,
    load_yaml,
    load_yaml_file,
)

PLATFORM_SECTIONS = ("chain", "plugins", "extensions", "models", "tools", "storage", "skills",
                     "input", "mcp_servers", "server", "agent")




def _both_chains() -> list[Chain]:
    return ["lead", "subagent"]


def _lead_chain() -> list[Chain]:
    return ["lead"]

class ChainSettings(BaseModel):
    """`chain:` — how chains are compiled."""

    model_config = ConfigDict(extra="forbid")

    fuse: bool = Field(True, description="Fuse consecutive node hooks into one graph node.")
    fuse_into_model: bool = Field(
        True, description="With fuse: also run the before_model and after_model hooks inside "
        "the model node, so a model call costs one graph step (see docs/compiler.md).")


class ModelEntry(BaseModel):
    """`models.named.<name>:` — one chat model the config can refer to by name."""

    model_config = ConfigDict(extra="forbid")

    use: str = Field(
        description="An init_chat_model spec ('anthropic:claude-sonnet-4-5') or "
        "'module:Class' of a chat model class ('langchain_openai:ChatOpenAI').")
    model: str | None = Field(
        None, description="Model name passed as `model=` (needed with 'module:Class').")
    api_key: str | None = Field(
        None, description="API key; write an environment reference such as "
        "'${OPENAI_API_KEY}' so the secret stays out of the file.")
    base_url: str | None = Field(
        None, description="Endpoint of an OpenAI-compatible gateway or a local server.")
    max_tokens: int | None = Field(None, ge=1, description="Output cap per model call.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature.")
    timeout: float | None = Field(None, gt=0, description="Seconds per request.")
    max_retries: int | None = Field(
        None, ge=0, description="The provider client's own retries (llm_error_handling "
        "retries on top of them).")
    supports_vision: bool = Field(False, description="The model accepts images.")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Further constructor arguments, passed unchanged "
        "(string values may hold environment references).")

    @field_validator("use")
    @classmethod
    def _use_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; write 'provider:model' or 'module:Class'")
        return value.strip()


class ModelsSettings(BaseModel):
    """`models:` — which chat models the agent uses and what they can do.

    Every model reference (`default`, `title`, `memory`, `subagent`, and the
    `model` keys of plugin sections) is a name under `named` or a model spec.
    """

    model_config = ConfigDict(extra="forbid")

    named: dict[str, ModelEntry] = Field(
        default_factory=dict, description="Models by name, each with its provider settings.")
    default: str = Field(
        "scripted", description="The agent's model: a name under `named`, an init_chat_model "
        "spec such as 'openai:gpt-4o', 'scripted' (the offline model) or "
        "'scripted:path/to/script.yaml'.",
    )
    title: str | None = Field(
        None, description="Model for thread titles (default: `title.model`, else the agent's).")
    memory: str | None = Field(
        None, description="Model that extracts memory facts (default: `memory.model`, else "
        "the agent's).")
    subagent: str | None = Field(None, description="Model for subagents (default: `default`).")
    supports_vision: bool = Field(
        False, description="The default model accepts images (a named model says it with "
        "its own `supports_vision`).")

    @field_validator("default", "title", "memory", "subagent")
    @classmethod
    def _a_name_or_a_spec(cls, reference: str | None, info: ValidationInfo) -> str | None:
        named = info.data.get("named") or {}
        if reference is not None and not _is_model_reference(reference, named):
            names = ", ".join(sorted(named)) or "none"
            raise ValueError(
                f"{reference!r} is neither a model named under `models.named` (named: "
                f"{names}){did_you_mean(reference, named)} nor a model spec "
                "('provider:model', a known model name such as 'gpt-4o', or 'scripted')")
        return reference


def _is_model_reference(reference: str, named: dict[str, Any]) -> bool:
    """A name under `named`, 'scripted...', 'provider:model' or a name whose provider
    LangChain infers."""
    text = reference.strip()
    return (text in named or text == "scripted" or text.startswith("scripted:")
            or ":" in text or provider_of(text) is not None)


class ToolEntry(BaseModel):
    """One `tools:` entry: a LangChain tool the operator adds to the agent."""

    model_config = ConfigDict(extra="forbid")

    use: str = Field(
        description="'module:attr' of a LangChain tool (a BaseTool, such as a function "
        "decorated with @tool) or of a factory that returns one or a list of them.")
    chains: list[Chain] = Field(
        default_factory=_lead_chain, description="Chains whose agent gets the tool(s).")
    config: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the factory (a tool object "
        "takes none).")

    @field_validator("use")
    @classmethod
    def _a_path(cls, value: str) -> str:
        try:
            split_path(value, "tool")
        except ReflectionError as exc:
            raise ValueError(str(exc)) from None
        return value


CHECKPOINTER_KINDS = ("sqlite", "memory", "none")
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
ENV_REFERENCE = r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$"


def _checkpointer_text(value: str) -> str:
    value = value.strip()
    if (value in CHECKPOINTER_KINDS or value.startswith(POSTGRES_SCHEMES)
            or re.match(ENV_REFERENCE, value)):
        return value
    raise ValueError(
        f"{value!r} is not a checkpointer: use 'sqlite' (the default, a file under "
        "base_dir), 'memory' (this process only), 'none' (no history), a Postgres URL "
        "such as 'postgresql://antler@db.example:5432/antler', or an environment "
        "reference such as '${DATABASE_URL}'")


def _store_text(value: str) -> str:
    value = value.strip()
    if value in ("auto", "sqlite", "memory") or value.startswith(POSTGRES_SCHEMES) or (
            re.match(ENV_REFERENCE, value)):
        return value
    raise ValueError(
        f"{value!r} is not a store: use 'auto' (the default: the checkpointer's Postgres "
        "database, else SQLite), 'sqlite', 'memory', a Postgres URL or an environment "
        "reference such as '${DATABASE_URL}'")


class PoolSettings(BaseModel):
    """`storage.pool:` — the Postgres connection pool of one process."""

    model_config = ConfigDict(extra="forbid")

    min: int = Field(1, ge=0, le=1000, description="Connections kept open.")
    max: int = Field(10, ge=2, le=1000, description="Most connections open at once (a "
                     "run holds one for its thread lock, so at least 2).")

    @model_validator(mode="after")
    def _ordered(self) -> PoolSettings:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max}); lower min "
                             "or raise max")
        return self


class StorageSettings(BaseModel):
    """`storage:` — where threads, memory and checkpoints live."""

    model_config = ConfigDict(extra="forbid")

    base_dir: str | None = Field(
        None, description="Base directory (default: $ANTLER_HOME, else ./.antler)."
    )
    checkpointer: Annotated[str, AfterValidator(_checkpointer_text)] = Field(
        "sqlite", description="'sqlite' (a file under base_dir), 'memory', 'none', a "
        "'postgresql://user@host/db' URL, or an environment reference such as "
        "'${DATABASE_URL}' read when the agent is built.",
    )
    store: Annotated[str, AfterValidator(_store_text)] = Field(
        "auto", description="The shared store of cross-thread data (memory, titles): "
        "'auto' (the checkpointer's Postgres database, else 'sqlite'), 'sqlite' "
        "(store.sqlite under base_dir), 'memory', a Postgres URL or '${NAME}'.")
    pool: PoolSettings = Field(
        default_factory=lambda: PoolSettings(),
        description="Postgres only: the connection pool of each process.")
    messages_channel: Literal["full", "delta"] = Field(
        "full", description="'full': every checkpoint stores the whole message list; "
        "'delta': it stores the step's new messages, with the whole list every "
        "`snapshot_every` updates (also applied to growing channels plugins declare).",
    )
    snapshot_every: int = Field(
        100, ge=1, description="Delta mode: store the whole list after this many updates "
        "of the channel (bounds how many writes a read replays).",
    )


class ServerSettings(BaseModel):
    """`server:` — the lead agent as LangGraph Server serves it (`antler.server`)."""

    model_config = ConfigDict(extra="forbid")

    trust_client_identity: bool = Field(
        False, description="Let a run's `context` set user_id, roles, is_internal and "
        "attributes. Only behind a front end that authenticates users itself: by default "
        "the identity is the user the server's auth handler authenticated.",
    )
    plan_mode: bool = Field(False, description="Serve the agent in plan mode (todo list).")
    subagents: bool = Field(False, description="The served agent may delegate with `task`.")
    agent_name: str | None = Field(None, description="The served agent's name.")


DEFAULT_SKILL_FILE_BYTES = 256 * 1024
"""Size limit of one SKILL.md unless `skills.max_file_bytes` says otherwise."""


class SkillsSettings(BaseModel):
    """`skills:` — where the operator's `SKILL.md` files are and which are turned off."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(
        default_factory=lambda: ["skills"],
        description="Skill roots, each holding <category>/<name>/SKILL.md (relative paths "
        "are taken from the working directory).")
    disabled: list[str] = Field(
        default_factory=list, description="Names of installed skills to turn off.")
    max_file_bytes: int = Field(
        default=DEFAULT_SKILL_FILE_BYTES, gt=0,
        description="A SKILL.md larger than this is skipped with its file (read no further).")


MessageRole = Literal["human", "ai", "tool", "system"]


def _human_only() -> list[MessageRole]:
    return ["human"]


class InputSettings(BaseModel):
    """`input:` — what a caller may put in a run's input (see README, "Caller input")."""

    model_config = ConfigDict(extra="forbid")

    allow_roles: list[MessageRole] = Field(
        default_factory=_human_only, min_length=1,
        description="Message roles a caller may send. Human only by default: an assistant "
        "reply, a tool result or a system message in caller input could forge history.")


class AgentSettings(BaseModel):
    """`agent:` — limits of one run of an agent (the lead's, and each subagent task's)."""

    model_config = ConfigDict(extra="forbid")

    max_model_calls: int = Field(
        50, ge=1, description="Model calls one run may make. The graph's step limit is "
        "derived from it and the chain's shape; a run that needs more stops with a "
        "ModelCallBudgetError naming this setting.")


class PluginLoadSettings(BaseModel):
    """`plugins.<name>:` — how the platform treats one installed distribution or plugin."""

    model_config = ConfigDict(extra="forbid")

    required: bool = Field(
        False, description="Stop the build if this plugin's distribution fails to load."
    )
    enabled: bool | None = Field(
        None, description="false: switch off this plugin, entry point or distribution by name "
        "(an `always` plugin cannot be switched off). true only overrides a switch-off under a "
        "broader name (the plugin's entry point or distribution); to turn on a plugin that is "
        "off by default use its own section's `enabled: true`."
    )
    on_error: Literal["fail", "skip"] | None = Field(
        None, description="Override the run-time error policy of this plugin (or of every "
        "plugin of this entry point or distribution)."
    )
    distribution: str | None = Field(
        None, description="For a plugin name: the distribution whose plugin of that name is "
        "used when two installed distributions declare it (the other one's is left out); on "
        "a name only one declares, a check that it comes from this distribution.")


class ExtensionEntry(Ordering):
    """One `extensions.middlewares` entry in mapping form."""

    use: str = Field(description="'module.path:ClassName' of an AgentMiddleware subclass.")
    name: str | None = Field(None, description="Plugin name (default: from the class name).")
    chains: list[Chain] = Field(default_factory=_both_chains)
    config: dict[str, Any] = Field(default_factory=dict, description="Constructor arguments.")
    required: bool = Field(True, description="Fail the build if the class cannot be loaded.")
    on_error: Literal["fail", "skip"] | None = Field(
        None, description="When a hook raises at run time: 'fail' stops the run, 'skip' "
        "(the default for extensions) logs it and runs on as if the hook were absent.")
    security_gate: bool = Field(
        False, description="true: the extension is a security gate and fails closed: a class "
        "that does not load or construct stops the build, a hook that raises stops the run "
        "(`on_error: skip` and `required: false` are refused with it).")

    @model_validator(mode="after")
    def _gate_fails_closed(self) -> ExtensionEntry:
        if self.security_gate and self.on_error == "skip":
            raise ValueError("security_gate: true fails closed, so `on_error: skip` is refused "
                             "with it (a hook that raised would let the run go on without the "
                             "gate); remove `on_error: skip`")
        if self.security_gate and not self.required:
            raise ValueError("security_gate: true fails closed, so `required: false` is refused "
                             "with it (a gate that does not load would be left out); remove "
                             "`required: false`")
        return self

    def ordering(self) -> Ordering:
        return Ordering(**{k: getattr(self, k) for k in Ordering.model_fields
                           if k in self.model_fields_set})


class ExtensionsSection(BaseModel):
    """`extensions:` — operator-configured middlewares (trusted config: it loads code)."""

    model_config = ConfigDict(extra="forbid")

    middlewares: list[str | ExtensionEntry] = Field(default_factory=list)


class PluginSection(BaseModel):
    """The section of a plugin that declares no config model: only the toggle."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(None, description="Turn the plugin on or off.")


@dataclass
class OperatorConfig:
    """A validated operator config, with the means to point back into its file."""

    source: str = "<defaults>"
    sections: dict[str, BaseModel] = field(default_factory=dict)
    document: YamlDocument | None = None

    @property
    def chain(self) -> ChainSettings:
        return self.sections.get("chain") or ChainSettings()  # type: ignore[return-value]

    @property
    def extensions(self) -> ExtensionsSection:
        return self.sections.get("extensions") or ExtensionsSection()  # type: ignore[return-value]

    @property
    def models(self) -> ModelsSettings:
        return self.sections.get("models") or ModelsSettings()  # type: ignore[return-value]

    @property
    def tools(self) -> list[ToolEntry]:
        section = self.sections.get("tools")
        return list(section.root) if section is not None else []  # type: ignore[attr-defined]

    @property
    def storage(self) -> StorageSettings:
        return self.sections.get("storage") or StorageSettings()  # type: ignore[return-value]

    @property
    def server(self) -> ServerSettings:
        return self.sections.get("server") or ServerSettings()  # type: ignore[return-value]

    @property
    def skills(self) -> SkillsSettings:
        return self.sections.get("skills") or SkillsSettings()  # type: ignore[return-value]

    @property
    def input(self) -> InputSettings:
        return self.sections.get("input") or InputSettings()  # type: ignore[return-value]

    @property
    def agent(self) -> AgentSettings:
        return self.sections.get("agent") or AgentSettings()  # type: ignore[return-value]

    @property
    def mcp_servers(self) -> dict[str, McpServerSettings]:
        section = self.sections.get("mcp_servers")
        return dict(section.root) if section is not None else {}  # type: ignore[attr-defined]

    @property
    def plugin_settings(self) -> dict[str, PluginLoadSettings]:
        section = self.sections.get("plugins")
        return dict(section.root) if section is not None else {}  # type: ignore[attr-defined]

    def section(self, key: str) -> BaseModel | None:
        return self.sections.get(key)

    def was_set(self, *path: str | int) -> bool:
        return self.document is not None and tuple(path) in self.document.marks

    def locate(self, *path: str | int) -> Location | str:
        if self.document is None or tuple(path) not in self.document.marks:
            return self.source
        return self.document.locate(tuple(path))

    def required_plugins(self) -> set[str]:
        return {name for name, item in self.plugin_settings.items() if item.required}

    def load_settings(self, *names: str) -> list[tuple[str, PluginLoadSettings]]:
        """The `plugins.<key>` entries naming any of `names`, in the order of `names`.

        Pass the names most specific first (plugin, entry point, distribution). Keys
        compare as packaging compares distribution names ('Acme_X' names 'acme-x').
        """
        table = {canonical_name(key): (key, item) for key, item in self.plugin_settings.items()}
        wanted = dict.fromkeys(canonical_name(name) for name in names)
        return [table[name] for name in wanted if name in table]

    def switch(self, *names: str) -> tuple[str, bool] | None:
        """(key, value) of the most specific `plugins.<key>.enabled` naming any of `names`."""
        return next(((key, item.enabled) for key, item in self.load_settings(*names)
                     if item.enabled is not None), None)

    def switched_off(self, *names: str) -> bool:
        switch = self.switch(*names)
        return switch is not None and not switch[1]


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
    return create_model(
        "AntlerConfig", __config__=ConfigDict(extra="forbid"), **fields
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
    try:
        validated = model.model_validate(
            {key: value for key, value in data.items() if key not in orphans})
    except ValidationError as exc:
        lines = describe_validation_error(exc, doc, model=model, hint=_deerflow_hint)
        raise ConfigError(f"invalid config {doc.source}:\n  "
                          + "\n  ".join([*orphans.values(), *lines])) from None
    if orphans:
        raise ConfigError(f"invalid config {doc.source}:\n  " + "\n  ".join(orphans.values()))
    sections = {key: value for key, value in validated if value is not None}
    if "plugins" in sections:
        sections["plugins"] = _PluginsTable(root=sections["plugins"])
    if "tools" in sections:
        sections["tools"] = _ToolsList(root=sections["tools"])
    config = OperatorConfig(source=doc.source, sections=sections, document=doc)
    problems = (_check_toggles(config, registry) + _check_plugin_settings(config, registry)
                + _check_extensions(config) + gate_problems(config, registry))
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
    plugin's whose distribution is not installed (any other unknown key is left to
    the schema, with its did-you-mean).
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
        elif isinstance(value, dict) and "enabled" in value:
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
    from antler.chain.migrate import deerflow_hint

    return deerflow_hint(str(loc[0]), str(loc[1])) if len(loc) == 2 else None


def silenced_entry_points(config: OperatorConfig, registry: PluginRegistry) -> list[str]:
    """Entry points the operator switched off, by their name or their distribution's.

    Their hooks are not called, unless a more specific `plugins.<plugin>` entry
    keeps one of their plugins on.
    """
    return [ep for ep, source in registry.entry_points.items()
            if config.switched_off(ep, source.distribution)
            and all(config.switched_off(*registry.names_of(registry.specs[name]))
                    for name in registry.entry_point_plugins.get(ep, []))]


class _PluginsTable(BaseModel):
    root: dict[str, PluginLoadSettings]


class _ToolsList(BaseModel):
    root: list[ToolEntry]


def _check_toggles(config: OperatorConfig, registry: PluginRegistry) -> list[str]:
    problems = []
    for key, owners in section_owners(registry).items():
        section = config.section(key)
        if section is None or getattr(section, "enabled", None) is not False:
            continue
        for spec in owners:
            if spec.enabled == "always":
                why = spec.always_reason or "the platform depends on it in every chain"
                problems.append(
                    f"{config.locate(key, 'enabled')}: {key}.enabled: plugin {spec.name!r} "
                    f"cannot be disabled: {why}. Remove `enabled: false`."
                )
    return problems


def _check_plugin_settings(config: OperatorConfig, registry: PluginRegistry) -> list[str]:
    """`plugins.<name>` must name something installed (or a configured extension): a
    typo must not drop `required`.

    An `always` plugin cannot be switched off, by its own name or a broader one.
    """
    known = [*registry.load_names(),
             *(extension_name(entry) for entry in config.extensions.middlewares)]
    canonical = {canonical_name(name) for name in known}
    problems = [
        f"{config.locate('plugins', name)}: plugins.{name}: no installed plugin, entry point "
        f"or distribution is named {name!r}{did_you_mean(name, known)}; install it, fix the "
        "name, or remove the entry"
        for name in config.plugin_settings if canonical_name(name) not in canonical
    ]
    always: dict[str, list[PluginSpec]] = {}
    for spec in registry.specs.values():
        switch = config.switch(*registry.names_of(spec))
        if spec.enabled == "always" and switch is not None and not switch[1]:
            always.setdefault(switch[0], []).append(spec)
    for key, specs in always.items():
        where = f"{config.locate('plugins', key, 'enabled')}: plugins.{key}.enabled"
        if [spec.name for spec in specs] == [key]:
            why = specs[0].always_reason or "the platform depends on it in every chain"
            problems.append(f"{where}: plugin {key!r} cannot be switched off: {why}. Remove "
                            "`enabled: false`.")
        else:
            names = ", ".join(sorted(repr(spec.name) for spec in specs))
            problems.append(f"{where}: {key!r} holds plugins that cannot be switched off "
                            f"({names}: they are `always` enabled). Switch off single plugins "
                            "by name instead.")
    return problems


def _check_extensions(config: OperatorConfig) -> list[str]:
    problems = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(config.extensions.middlewares):
        name = extension_name(entry)
        where = config.locate("extensions", "middlewares", index)
        try:
            check_plugin_name(name)
            split_path(entry if isinstance(entry, str) else entry.use)
        except (ValueError, ReflectionError) as exc:
            problems.append(f"{where}: extensions.middlewares[{index}]: {exc}")
        if isinstance(entry, ExtensionEntry) and entry.security_gate:
            skip = next((key for key, item in config.load_settings(name)
                         if item.on_error == "skip"), None)
            if skip is not None:
                problems.append(
                    f"{config.locate('plugins', skip, 'on_error')}: plugins.{skip}.on_error: "
                    f"skip would open extension {name!r}, which {where} marks "
                    "`security_gate: true`; remove `on_error: skip`")
        if name in seen:
            problems.append(
                f"{where}: extensions.middlewares[{index}]: name {name!r} is already used by "
                f"entry {seen[name]}; give one of them a distinct `name:`"
            )
        seen[name] = index
    return problems


def extension_name(entry: str | ExtensionEntry) -> str:
    """The plugin name of a configured extension: explicit, or the class name in snake_case."""
    if isinstance(entry, ExtensionEntry) and entry.name:
        return entry.name
    path = entry if isinstance(entry, str) else entry.use
    cls_name = path.rpartition(":")[2].rpartition(".")[2] or path
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in cls_name).lstrip("_")
    return snake.replace("__", "_")


def extension_ordering(entry: str | ExtensionEntry) -> tuple[Ordering, list[str], bool, dict]:
    """(ordering, chains, required, constructor kwargs) of one extension entry."""
    if isinstance(entry, str):
        return Ordering(), list(CHAIN_NAMES), True, {}
    return entry.ordering(), list(entry.chains), entry.required, dict(entry.config)



# -- MCP servers (`mcp_servers:`) -----------------------------------------------------


class McpRouting(BaseModel):
    """`routing:` of an MCP server or tool: when mcp_routing promotes its tools unasked."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["off", "prefer"] = Field(
        "off", description="'prefer': with tool_search on, the tools are promoted before a "
        "model call when the user's message contains one of `keywords`.")
    priority: int = Field(
        50, description="Rank among matching tools, higher first (clamped to 0-100).")
    keywords: list[str] = Field(
        default_factory=list, description="Words or phrases matched case-insensitively as "
        "substrings of the user's message (any script).")

    @field_validator("priority")
    @classmethod
    def _clamp(cls, value: int) -> int:
        return max(0, min(100, value))

    @field_validator("keywords")
    @classmethod
    def _keywords(cls, value: list[str]) -> list[str]:
        return [word.strip() for word in value if word.strip()]


class McpToolSettings(BaseModel):
    """`mcp_servers.<name>.tools.<tool>:` settings of one tool of a server."""

    model_config = ConfigDict(extra="forbid")

    routing: McpRouting | None = Field(None, description="Overrides the server's routing.")


class McpServerSettings(BaseModel):
    """One MCP server: a command started over stdio, or a streamable-HTTP `url`."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(None, description="stdio: the program to start.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict, description="stdio: extra environment variables; `${VAR}` "
        "takes VAR from Antler's environment (secrets stay out of the file).")
    cwd: str | None = Field(None, description="stdio: working directory of the server.")
    url: str | None = Field(None, description="Streamable HTTP: the endpoint URL.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Streamable HTTP: request headers (`${VAR}` works).")
    enabled: bool = Field(True, description="false: the server is not started.")
    required: bool = Field(
        False, description="true: an agent is not built when this server fails to start "
        "(otherwise a warning names it and its tools are absent).")
    tool_name_prefix: str | None = Field(
        None, description="Prepended to each of the server's tool names (avoids clashes).")
    start_timeout: float = Field(
        30.0, gt=0, description="Seconds the server may take to start and list its tools.")
    call_timeout: float = Field(
        60.0, gt=0, description="Seconds one tool call may take before it fails.")
    routing: McpRouting = Field(default_factory=McpRouting,
                                description="Auto-promotion of the server's tools.")
    tools: dict[str, McpToolSettings] = Field(
        default_factory=dict, description="Per-tool settings, by the server's tool name "
        "(with or without `tool_name_prefix`).")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of `command` (a stdio server) or `url` (a "
                             "streamable-HTTP server)")
        if self.command is not None and self.headers:
            raise ValueError("`headers` are for a `url` server; a stdio server takes `env`")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("`args`, `env` and `cwd` are for a `command` server")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable_http"

    def routing_for(self, tool: str) -> McpRouting:
        """The routing of the server's tool `tool` (its own, else the server's)."""
        own = self.tools.get(tool)
        if own is None and self.tool_name_prefix:  # keyed by the name `mcp list` shows
            own = self.tools.get(f"{self.tool_name_prefix}{tool}")
        return own.routing if own is not None and own.routing is not None else self.routing

    @property
    def routes_by_keywords(self) -> bool:
        """Whether the server or one of its tools prefers routing by keywords."""
        routings = [self.routing, *(t.routing for t in self.tools.values() if t.routing)]
        return self.enabled and any(r.mode == "prefer" and r.keywords for r in routings)


class McpServersSection(RootModel[dict[str, McpServerSettings]]):
    """`mcp_servers:` — MCP servers whose tools the agent gets, keyed by a name of your choice."""

    @model_validator(mode="before")
    @classmethod
    def _string_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for name in value:
                if not isinstance(name, str):
                    raise ValueError(f"server name {name!r} is not text (YAML reads off, on, "
                                     "yes, no and numbers as other types): quote it")
        return value

    @field_validator("root")
    @classmethod
    def _names(cls, value: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError(f"server name {name!r} may hold only letters, digits, '_', "
                                 "'.' and '-', starting with a letter or digit")
        return value
