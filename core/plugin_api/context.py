"""What a plugin factory receives: runtime options, services and its config.

Plugins never reach for globals. Everything a middleware needs at build time
comes through one `BuildContext`, so two chains built in one process (a lead
agent and its subagent, or two tenants) cannot leak into each other.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .spec import PluginSpec, RuntimeCondition, check_plugin_name


class RuntimeOptions(BaseModel):
    """Per-run facts that decide runtime conditions (`when:` in a manifest).

    Three conditions are built in; `conditions` holds any others a plugin names
    (for example `deferred_tools`), set by the embedding application. A
    condition nobody set is false.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan_mode: bool = Field(False, description="Plan mode: the todo list joins the chain.")
    supports_vision: bool = Field(False, description="The model accepts images.")
    subagents_enabled: bool = Field(False, description="The lead agent may delegate via `task`.")
    conditions: dict[str, bool] = Field(
        default_factory=dict, description="Further runtime conditions, by snake_case name.")
    agent_name: str | None = None
    user_id: str = "default"
    thread_id: str | None = None

    @field_validator("conditions")
    @classmethod
    def _check_conditions(cls, value: dict[str, bool]) -> dict[str, bool]:
        for name in value:
            if name in get_args(RuntimeCondition):
                raise ValueError(f"runtime condition {name!r} is a field of its own; set "
                                 f"{name}=... instead of conditions[{name!r}]")
            check_plugin_name(name, "runtime condition")
        return value

    def condition(self, name: str) -> bool:
        if name in get_args(RuntimeCondition):
            return bool(getattr(self, name))
        return self.conditions.get(name, False)

    def knows(self, name: str) -> bool:
        """Whether this run decided `name` (built in, or set in `conditions`)."""
        return name in get_args(RuntimeCondition) or name in self.conditions


# Well-known service names. Plugins ask for these; `create_agent` provides the
# embedded defaults, and an embedding application may pass its own.
PATHS = "paths"                        # antler.plugin_api.PathLayout
SANDBOX_PROVIDER = "sandbox_provider"  # antler.plugin_api.SandboxProvider
SANDBOX_LOADER = "sandbox_loader"      # callable: a `sandbox:` section -> its SandboxProvider
MODEL = "model"                        # the agent's chat model (BaseChatModel)
TITLE_MODEL = "title_model"            # lightweight model for titles
MEMORY_MODEL = "memory_model"          # model that extracts memory facts
MODEL_CATALOG = "model_catalog"        # `.resolve(reference)`: `models.named` and model specs
MEMORY_QUEUE = "memory_queue"          # per-thread debounced memory update queue
SUBAGENT_RUNNER = "subagent_runner"    # callable running one delegated task
MEMORY_STORE = "memory_store"          # per-user memory facts, read with `.facts(user_id)`
SKILLS = "skills"                      # the skills registry (`.get(name)`, `.all()`, `.roots`)
SKILLS_LOADER = "skills_loader"        # callable: a `skills:` section -> a skills registry
CLOCK = "clock"                        # zero-argument callable returning the current datetime
DEPLOYMENT = "deployment"              # "server" when built for LangGraph Server, else absent
STORE = "store"                        # the shared LangGraph BaseStore
STORE_OPENER = "store_opener"          # callable: (kind, base directory) -> a BaseStore

_DEFAULT_SERVICES: dict[str, Callable[[], Any]] = {}
"""Factories of services every build has unless it passes its own, by name."""


def provide_default_service(name: str, factory: Callable[[], Any]) -> None:
    """Give every build the service `name`, made by `factory()` on first use.

    The runtime registers its defaults here (the model catalog, the sandbox and
    skills loaders, the store opener), so a plugin asks for them by name and
    never imports the runtime; a build's own `services` win over a default.
    """
    _DEFAULT_SERVICES[name] = factory


ConfigT = TypeVar("ConfigT", bound=BaseModel)
ServiceT = TypeVar("ServiceT")


def _checked(name: str, service: Any, kind: Callable[..., ServiceT]) -> ServiceT:
    # `kind` is a class; typed as a callable because mypy refuses an abstract class (most
    # services' interfaces) where `type[...]` is expected.
    cls = cast(type, kind)
    if not isinstance(service, cls):
        raise TypeError(f"service {name!r} must be an instance of {cls.__qualname__}, got "
                        f"{type(service).__name__}")
    return cast(ServiceT, service)


@dataclass
class Services:
    """Runtime services handed to plugin factories. Unknown names raise clearly."""

    items: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        """The service `name` (a runtime default is made and kept on first use)."""
        if name not in self.items and name in _DEFAULT_SERVICES:
            self.items[name] = _DEFAULT_SERVICES[name]()
        try:
            return self.items[name]
        except KeyError:
            known = ", ".join(sorted(self.items)) or "none"
            raise KeyError(
                f"service {name!r} is not provided to this build (provided: {known}); pass it "
                f"in services=... or enable the plugin that provides it"
            ) from None

    def typed(self, name: str, kind: Callable[..., ServiceT]) -> ServiceT:
        """The service `name`, which must be a `kind` (a TypeError names both otherwise)."""
        return _checked(name, self.get(name), kind)

    def shared(self, name: str, kind: Callable[..., ServiceT],
               make: Callable[[], Any]) -> ServiceT:
        """The build's one `name` service, which must be a `kind`: the one provided, else
        `make()`'s, registered so that every later factory of the build gets the same."""
        service = self.items.get(name)
        if service is None:
            service = self.items.setdefault(name, make())
        return _checked(name, service, kind)

    def find(self, name: str) -> Any:
        """The service `name`, or None when the build has none (nor a default)."""
        return self.get(name) if name in self else None

    def __contains__(self, name: str) -> bool:
        return name in self.items or name in _DEFAULT_SERVICES


class ChainSecrets:
    """Secrets scoped to one chain build, shared by cooperating plugins.

    Two plugins that must trust each other's state (one publishes a decision,
    the other consumes it) ask for the same named token; a plugin of another
    build, or state forged into a message, cannot know it.
    """

    def __init__(self) -> None:
        self._tokens: dict[str, str] = {}

    def token(self, name: str) -> str:
        if name not in self._tokens:
            self._tokens[name] = secrets.token_hex(16)
        return self._tokens[name]


@dataclass
class BuildContext:
    """Everything one plugin factory call may use."""

    chain: str
    spec: PluginSpec
    config: BaseModel | None
    runtime: RuntimeOptions
    services: Services
    secrets: ChainSecrets
    operator_config: Any = None
    plan: Any = None
    """The `ChainPlan` being built: lets a plugin see the whole resolved chain
    (for example the framework tags every participant declares it emits)."""

    def plugin_config(self, model: type[ConfigT]) -> ConfigT:
        """This plugin's config section as `model` (the plugin's own config class).

        The build hands a factory its validated section; a build without one (a
        chain built outside an operator config, or a plugin whose section is
        absent) gets `model()`, the defaults. A section of another class (an
        operator's subclass is kept as is) is validated into `model`.
        """
        config = self.config
        if isinstance(config, model):
            return config
        if config is None:
            return model()
        data = config.model_dump(exclude={"enabled"}) if isinstance(config, BaseModel) else config
        return model.model_validate(data)

    def chain_specs(self) -> list[PluginSpec]:
        """Specs of every plugin in this chain, in order (empty outside a build)."""
        return self.plan.resolution.specs() if self.plan is not None else []
