"""`OperatorConfig`: a validated operator config, section by section, with its file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast, overload

from pydantic import BaseModel

from antler.plugin_api.registry import canonical_name
from antler.plugin_api.yamlsource import Location, YamlDocument
from antler.replay.settings import RecordSettings

from .agent import (
    AgentSettings,
    ChainSettings,
    InputSettings,
    ServerSettings,
    SkillsSettings,
    ToolEntry,
)
from .mcp import McpServerSettings
from .models import ModelsSettings
from .plugins import ExtensionsSection, PluginLoadSettings
from .storage import StorageSettings

__all__ = ["OperatorConfig"]

SectionModel = TypeVar("SectionModel", bound=BaseModel)


class _Section(Generic[SectionModel]):
    """An `OperatorConfig` attribute named as its section: the validated section, or
    a fresh instance of the section's model (its defaults) where the file has none."""

    def __init__(self, model: type[SectionModel]) -> None:
        self.model = model
        self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    @overload
    def __get__(self, config: None, owner: type) -> _Section[SectionModel]: ...
    @overload
    def __get__(self, config: OperatorConfig, owner: type | None = None) -> SectionModel: ...
    def __get__(self, config: OperatorConfig | None,
                owner: type | None = None) -> SectionModel | _Section[SectionModel]:
        if config is None:
            return self
        found = config.sections.get(self.key)
        return cast(SectionModel, found) if found is not None else self.model()


@dataclass
class OperatorConfig:
    """A validated operator config, with the means to point back into its file."""

    source: str = "<defaults>"
    sections: dict[str, BaseModel] = field(default_factory=dict)
    document: YamlDocument | None = None

    chain = _Section(ChainSettings)
    extensions = _Section(ExtensionsSection)
    models = _Section(ModelsSettings)
    storage = _Section(StorageSettings)
    server = _Section(ServerSettings)
    skills = _Section(SkillsSettings)
    input = _Section(InputSettings)
    agent = _Section(AgentSettings)
    record = _Section(RecordSettings)

    @property
    def tools(self) -> list[ToolEntry]:
        section = self.sections.get("tools")
        return list(section.root) if section is not None else []  # type: ignore[attr-defined]

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
