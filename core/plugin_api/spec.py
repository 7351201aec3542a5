"""The declarative description of one plugin: what it is, where it goes, when it runs.

A `PluginSpec` is what a manifest entry parses into, for built-ins and third
parties alike. The resolver reads only specs, never middleware classes, which is
why a disabled plugin's module never has to be imported.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

API_VERSION = 1
"""The manifest format this Antler understands. Bumped on incompatible change."""

CHAIN_NAMES = ("lead", "subagent")
"""The chains one plugin set composes. A spec may name only these."""

HOOK_NAMES = (
    "before_agent",
    "before_model",
    "wrap_model_call",
    "after_model",
    "wrap_tool_call",
    "after_agent",
)
"""LangChain middleware hooks, in the order one turn first reaches them."""

POINT_PREFIX = "@"
"""References starting with this name a synchronization point, not a plugin."""

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CALLER_KEYS = frozenset({"files", "tool_calls", "function_call", "refusal"})
"""`additional_kwargs` keys callers (upload records) or providers (raw tool calls, refusals)
write: no plugin may declare them server-owned."""
_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

Hook = Literal[
    "before_agent", "before_model", "wrap_model_call", "after_model", "wrap_tool_call",
    "after_agent",
]
Chain = Literal["lead", "subagent"]
Enablement = Literal["always", "on", "off"]
OnError = Literal["fail", "skip"]
HookRank = Literal["first", "last"]
RuntimeCondition = Literal["plan_mode", "supports_vision", "subagents_enabled"]
"""The runtime conditions every run decides; `when:` may also name others (see
`RuntimeOptions.conditions`)."""


def check_plugin_name(value: str, what: str = "plugin name") -> str:
    if not _NAME_RE.match(value):
        raise ValueError(
            f"{what} {value!r} must be snake_case: a lowercase letter, then lowercase "
            "letters, digits or underscores"
        )
    return value


def check_target(value: str, what: str) -> str:
    if not _TARGET_RE.match(value):
        raise ValueError(
            f"{what} {value!r} must be 'module.path:attribute' (for example "
            "'my_package.middleware:MyMiddleware')"
        )
    return value


def _both_chains() -> list[Chain]:
    return ["lead", "subagent"]


SHARED_STATE_KEYS = frozenset({"messages", "jump_to", "structured_response"})
"""LangChain's own agent-state channels: every plugin may write them (`messages` through
its reducer, `jump_to` to a destination its hook declares). No plugin may own them."""


class StateAccess(BaseModel):
    """`state:` of a manifest entry: the agent-state keys a plugin owns and reads.

    A plugin writes only the keys it owns, the shared channels
    (`SHARED_STATE_KEYS`) and the contract channels of `antler.contracts` its
    state schema takes. Every key its middleware's `state_schema` declares is
    owned too, unless listed under `reads`.
    """

    model_config = ConfigDict(extra="forbid")

    owns: list[str] = Field(
        default_factory=list, description="State keys only this plugin (or another plugin of "
        "its distribution) writes; also every key of its `state_schema` not under `reads`.")
    reads: list[str] = Field(
        default_factory=list, description="Keys its `state_schema` declares so it can read "
        "them, which other plugins own: not written, not owned.")

    @field_validator("owns", "reads", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("owns", "reads")
    @classmethod
    def _keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not _KEY_RE.match(key):
                raise ValueError(f"state key {key!r} must be an identifier: a letter or "
                                 "underscore, then letters, digits or underscores")
        return value

    @model_validator(mode="after")
    def _not_shared(self) -> StateAccess:
        shared = sorted(SHARED_STATE_KEYS & set(self.owns))
        if shared:
            raise ValueError(f"state.owns lists {shared}: LangChain's shared channels "
                             f"({', '.join(sorted(SHARED_STATE_KEYS))}) belong to no plugin; "
                             "every plugin may write them, so leave them out")
        both = sorted(set(self.owns) & set(self.reads))
        if both:
            raise ValueError(f"state lists {both} under both `owns` and `reads`; a plugin "
                             "either owns a key or reads another plugin's")
        return self


class Provenance(BaseModel):
    """Where a spec (or one of its constraints) was declared, for error messages."""

    model_config = ConfigDict(frozen=True)

    source: str = "<code>"
    line: int | None = None
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        if self.distribution:
            dist = self.distribution + (f" {self.version}" if self.version else "")
            where += f" (distribution {dist}"
            if self.entry_point:
                where += f", entry point {self.entry_point!r}"
            where += ")"
        return where


class Ordering(BaseModel):
    """Ordering constraints of one plugin, all expressed by name, never by index.

    List order is LangChain's: `before_*` hooks run in list order, `after_*`
    hooks in reverse list order, and the first `wrap_*` middleware is the
    outermost wrapper. The hook-level fields (`outer_of`, `after_model_before`,
    ...) let a plugin state what it means and leave the inversion to the
    resolver.
    """

    model_config = ConfigDict(extra="forbid")

    after: list[str] = Field(default_factory=list, description="Come later in the list than these.")
    before: list[str] = Field(default_factory=list, description="Come earlier than these.")
    requires: list[str] = Field(
        default_factory=list, description="These plugins must be enabled in the same chain."
    )
    immediately_after: str | None = Field(None, description="Sit directly after this plugin.")
    immediately_before: str | None = Field(None, description="Sit directly before this plugin.")
    position: Literal["first", "last"] | None = Field(None, description="First or last of all.")
    slot: str | None = Field(
        None, description="A named slot between two synchronization points (e.g. 'extensions')."
    )
    outer_of: list[str] = Field(
        default_factory=list, description="Wrap hooks: this plugin's wrapper encloses theirs."
    )
    inner_of: list[str] = Field(
        default_factory=list, description="Wrap hooks: their wrapper encloses this plugin's."
    )
    after_model_before: list[str] = Field(
        default_factory=list, description="This plugin's after_model runs before theirs."
    )
    after_model_after: list[str] = Field(
        default_factory=list, description="This plugin's after_model runs after theirs."
    )
    hook_order: dict[Hook, HookRank] = Field(
        default_factory=dict,
        description="Hook-level invariants: `{before_agent: last}` means this plugin's "
        "before_agent runs after every other participant's before_agent. The resolver "
        "places the plugin to respect it.")

    @field_validator("after", "before", "requires", "outer_of", "inner_of",
                     "after_model_before", "after_model_after", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def is_empty(self) -> bool:
        return not any(getattr(self, field) for field in type(self).model_fields)

    def merged(self, override: Ordering) -> Ordering:
        """This ordering with every field that `override` sets replaced."""
        return self.model_copy(
            update={field: getattr(override, field) for field in override.model_fields_set}
        )


class ChainOverride(BaseModel):
    """Per-chain differences: each field set here replaces the base one in that chain.

    `order` replaces only the ordering fields it sets; `enabled` and `config_key`
    let one plugin be, say, off on the lead chain but on for subagents, configured
    by a section of its own there.
    """

    model_config = ConfigDict(extra="forbid")

    order: Ordering = Field(default_factory=Ordering)
    enabled: Enablement | None = Field(None, description="Enablement in this chain.")
    config_key: str | None = Field(
        None, description="The operator-config section that configures it in this chain.")


class PluginSpec(BaseModel):
    """One plugin as its manifest entry declares it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Unique snake_case name.")
    factory: str = Field(
        description="'module:attr' of a callable taking a BuildContext and returning a "
        "middleware (or an AgentMiddleware subclass constructed the same way)."
    )
    summary: str = Field("", description="One line: what the plugin does.")
    chains: list[Chain] = Field(default_factory=_both_chains)
    order: Ordering = Field(default_factory=Ordering)
    chain_overrides: dict[Chain, ChainOverride] = Field(default_factory=dict)
    enabled: Enablement = Field("on", description="always (cannot be disabled), on or off.")
    always_reason: str | None = Field(
        None, description="Why an `always` plugin cannot be disabled (shown to operators)."
    )
    when: dict[str, bool] = Field(
        default_factory=dict, description="Runtime conditions that must hold for it to join: "
        "plan_mode, supports_vision, subagents_enabled, or any snake_case name the embedding "
        "application sets in RuntimeOptions.conditions (unknown ones are false)."
    )
    config_key: str | None = Field(
        None, description="Top-level section of the operator config (default: the name)."
    )
    config_model: str | None = Field(
        None, description="'module:Model' of the pydantic model validating that section."
    )
    hooks: list[Hook] | None = Field(
        None, description="Hooks the middleware implements; checked against the class at build."
    )
    emits_tags: list[str] = Field(
        default_factory=list, description="Framework tags this plugin writes into messages."
    )
    server_owned_keys: list[str] = Field(
        default_factory=list, description="Message `additional_kwargs` keys this plugin "
        "writes and trusts: stripped from what a caller sends (see antler.contracts.serverkeys)."
    )
    fusable: bool = Field(True, description="May share a fused graph node with its neighbours.")
    on_error: OnError | None = Field(
        None, description="What a hook that raises does to the run: `fail` stops it, `skip` "
        "logs, traces and continues as if the hook were absent. Default: `fail` for `always` "
        "plugins and Antler's own, `skip` for optional third-party plugins and extensions; "
        "the operator overrides it with `plugins: {NAME: {on_error: ...}}`.")
    state: StateAccess = Field(
        default_factory=StateAccess, description="The agent-state keys it owns and reads: a "
        "hook's write to a key the plugin does not own is refused at run time.")
    security_gate: str | None = Field(
        None, description="Marks a security gate: what its failure would let through if "
        "skipped (a hook that raises under `on_error: skip` lets the run go on without it). "
        "A gate fails closed by default; `on_error: skip` on it warns, and is refused when "
        "the gate is `always` enabled.")
    rank: int | None = Field(None, description="Tie-break; defaults to the manifest position.")
    provenance: Provenance = Field(default_factory=Provenance, exclude=True)

    _check_name = field_validator("name")(classmethod(lambda cls, v: check_plugin_name(v)))

    @field_validator("factory")
    @classmethod
    def _check_factory(cls, value: str) -> str:
        return check_target(value, "factory")

    @field_validator("config_model")
    @classmethod
    def _check_config_model(cls, value: str | None) -> str | None:
        return None if value is None else check_target(value, "config_model")

    @field_validator("when")
    @classmethod
    def _check_conditions(cls, value: dict[str, bool]) -> dict[str, bool]:
        for condition in value:
            check_plugin_name(condition, "runtime condition")
        return value

    @field_validator("server_owned_keys")
    @classmethod
    def _check_server_owned_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not _KEY_RE.match(key):
                raise ValueError(
                    f"server_owned_keys entry {key!r} must be an additional_kwargs key: a "
                    "letter or underscore, then letters, digits or underscores")
            if key in CALLER_KEYS:
                raise ValueError(
                    f"server_owned_keys entry {key!r} is written by callers or model providers "
                    "and cannot be stripped from caller input; declare only keys your plugin "
                    "writes itself")
        if len(set(value)) != len(value):
            raise ValueError(f"server_owned_keys lists a key twice: {value}")
        return value

    @field_validator("chains", mode="before")
    @classmethod
    def _chains_one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_consistency(self) -> PluginSpec:
        for chain in self.chain_overrides:
            if chain not in self.chains:
                raise ValueError(
                    f"plugin {self.name!r} overrides chain {chain!r} but does not join it "
                    f"(chains: {self.chains})"
                )
        if self.when and self.always:
            raise ValueError(
                f"plugin {self.name!r} is 'always' enabled but also has runtime conditions "
                f"{sorted(self.when)}; use enabled: on with `when` instead"
            )
        if not self.chains:
            raise ValueError(f"plugin {self.name!r} joins no chain; list at least one")
        if self.security_gate and self.on_error == "skip" and self.always:
            raise ValueError(
                f"plugin {self.name!r} is an `always` security gate, so it cannot declare "
                f"on_error: skip (a failure would let through {self.security_gate}); remove "
                "`on_error: skip`")
        return self

    @property
    def always(self) -> bool:
        """Whether the plugin is `always` enabled in some chain it joins."""
        return "always" in {self.enabled_for(chain) for chain in self.chains}

    @property
    def section(self) -> str:
        """The operator-config section that configures this plugin (outside overrides)."""
        return self.config_key or self.name

    def section_for(self, chain: str) -> str:
        """The section that configures this plugin in `chain`."""
        override = self._override(chain)
        return (override.config_key if override and override.config_key else None) \
            or self.section

    def sections(self) -> list[str]:
        """Every section this plugin reads, in any chain (for the config schema)."""
        return list(dict.fromkeys(self.section_for(chain) for chain in self.chains))

    def enabled_for(self, chain: str) -> Enablement:
        override = self._override(chain)
        return override.enabled if override and override.enabled else self.enabled

    def ordering_for(self, chain: str) -> Ordering:
        override = self._override(chain)
        return self.order.merged(override.order) if override else self.order

    def _override(self, chain: str) -> ChainOverride | None:
        return self.chain_overrides.get(chain)  # type: ignore[call-overload]


class PointSpec(BaseModel):
    """A named synchronization point: a zero-width node plugins order against.

    Like a systemd target, a point is reached once everything ordered before it
    has been placed. Referenced as '@name'.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    summary: str = ""
    after: list[str] = Field(default_factory=list)
    before: list[str] = Field(default_factory=list)
    provenance: Provenance = Field(default_factory=Provenance, exclude=True)

    _check_name = field_validator("name")(classmethod(lambda cls, v: check_plugin_name(v)))

    @field_validator("after", "before", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class SlotSpec(BaseModel):
    """A named region between two points; `slot: NAME` puts a plugin inside it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    start: str = Field(description="The '@point' the slot begins after.")
    end: str = Field(description="The '@point' the slot ends before.")
    summary: str = ""
    provenance: Provenance = Field(default_factory=Provenance, exclude=True)

    @field_validator("start", "end")
    @classmethod
    def _is_point(cls, value: str) -> str:
        if not value.startswith(POINT_PREFIX):
            raise ValueError(f"slot boundary {value!r} must name a point, like '@guards_end'")
        return value
