"""`plugins:` and `extensions:` — how installed plugins load, and operator middlewares.

`plugins.<name>` switches a plugin, entry point or distribution on or off and
sets its error policy; `extensions.middlewares` adds middlewares by
'module:Class' (trusted config: it loads code).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from antler.plugin_api.spec import CHAIN_NAMES, Chain, Ordering

__all__ = ["ExtensionEntry", "ExtensionsSection", "PluginLoadSettings", "PluginSection",
           "extension_name", "extension_ordering"]


def _both_chains() -> list[Chain]:
    return ["lead", "subagent"]


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
    time_budget: float | None = Field(
        None, gt=0, description="Seconds one call of one of this plugin's hooks (or of every "
        "plugin of this entry point or distribution) may take, the handler's time not "
        "counted; a hook over it fails under its `on_error`. Default: "
        "`agent.plugin_time_budget` for third-party plugins, none for Antler's own.")
    output_limit: int | None = Field(
        None, ge=1, description="Text characters plus items one hook call of this plugin may "
        "return (its update, or a wrap hook's own result); more fails the hook under its "
        "`on_error`. Default: `agent.plugin_output_limit` for third-party plugins, none for "
        "Antler's own.")
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

    @field_validator("chains")
    @classmethod
    def _joins_a_chain(cls, chains: list[Chain]) -> list[Chain]:
        if not chains:
            raise ValueError("is empty, so the extension would join no chain; list the chains "
                             "it joins ([lead], [subagent] or both), or leave `chains` out for "
                             "both")
        return chains

    @field_validator("use")
    @classmethod
    def _use_not_blank(cls, use: str) -> str:
        if not use.strip():
            raise ValueError("is empty; write the 'package.module:ClassName' of an "
                             "AgentMiddleware subclass")
        return use

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
