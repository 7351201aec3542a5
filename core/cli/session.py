"""What one `antler` invocation works on: the plugins, the operator config, the runtime.

A `Session` is the click context object. It discovers the installed plugins
once, adds the `--manifest` files, loads `--config`, and plans chains; the
option decorators here give every command the same spelling of those inputs.
Heavy modules (pydantic models, stevedore, the resolver) are imported on first
use, never when the command line is merely parsed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from antler.plugin_api.commands import config_option as config_option
from antler.plugin_api.commands import json_option as json_option

if TYPE_CHECKING:
    from antler.chain import ChainPlan
    from antler.chain.config import OperatorConfig
    from antler.plugin_api.registry import PluginRegistry

CHAIN_CHOICES = ("lead", "subagent")
"""`antler.plugin_api.spec.CHAIN_NAMES`, spelt out so parsing options does not import pydantic."""

CONDITION_FLAGS = {
    "plan_mode": "--plan",
    "supports_vision": "--vision",
    "subagents_enabled": "--subagents",
}
"""The command-line flag that turns on each runtime condition (`when:` in a manifest)."""

_MANIFEST_RANK_STRIDE = 1_000
"""Each extra manifest's plugins rank after the previous manifest's (tie-break only)."""

F = Callable[..., Any]


@dataclass
class Session:
    """The inputs shared by the commands of one invocation."""

    manifests: list[str] = field(default_factory=list)
    isolated: bool = False
    _registry: PluginRegistry | None = field(default=None, repr=False)

    def registry(self) -> PluginRegistry:
        """Installed plugins (unless isolated) plus every `--manifest`, discovered once."""
        if self._registry is None:
            self._registry = self._discover()
        return self._registry

    def _discover(self) -> PluginRegistry:
        from antler.plugin_api.manifest import Manifest, builtin_manifest, load_manifest
        from antler.plugin_api.registry import THIRD_PARTY_RANK_BASE, PluginRegistry, discover

        if self.isolated:
            platform = builtin_manifest()
            registry = PluginRegistry.from_manifests([Manifest(
                source=platform.source, points=platform.points, slots=platform.slots,
                default_slot=platform.default_slot)])
        else:
            registry = discover()
        # An extra manifest ranks like a third-party distribution: after the built-ins.
        for index, path in enumerate(dict.fromkeys(self.manifests)):
            base = THIRD_PARTY_RANK_BASE + index * _MANIFEST_RANK_STRIDE
            registry.add_manifest(load_manifest(path, rank_base=base), source=None)
        return registry

    def config(self, path: str | None) -> OperatorConfig:
        """The operator config at `path` validated against the plugins; None: defaults."""
        from antler.chain.config import load_config

        return load_config(path, self.registry())

    def open_store(self, config_path: str | None, home: str | None) -> tuple[Any, Path]:
        """(the shared store the operator config's `storage:` names, the base directory);
        the caller closes the store."""
        from antler.plugin_api.paths import resolve_base
        from antler.runtime.storage import is_postgres_url, open_store, resolve_backend

        settings = self.config(config_path).storage
        base = resolve_base(home or settings.base_dir)
        kind = settings.store
        if kind == "auto":
            checkpointer = resolve_backend(settings.checkpointer)
            kind = checkpointer if is_postgres_url(checkpointer) else "sqlite"
        return open_store(kind, base, settings.pool), base

    def plan(self, config: OperatorConfig, chain: str, runtime: dict[str, Any],
             **options: Any) -> ChainPlan:
        """Who takes part in `chain` and in what order, from specs alone.

        `options` go to `plan_chain` (`load_extensions`, `keep_going`).
        """
        from antler.chain import plan_chain
        from antler.chain.conditions import runtime_for

        # the conditions a run derives from the config (one function), so the shown
        # chain is the built one
        return plan_chain(config, chain, runtime_for(config, runtime, estimate_mcp=True),
                          registry=self.registry(), **options)


def describe_runtime(flags: dict[str, Any]) -> str:
    """'--plan --vision' for the conditions that are on, or 'no runtime flags'."""
    on = [flag for condition, flag in CONDITION_FLAGS.items() if flags.get(condition)]
    if flags.get("agent_name"):
        on.append(f"--agent-name {flags['agent_name']}")
    return " ".join(on) or "no runtime flags"


pass_session = click.make_pass_decorator(Session, ensure=True)


def _add_manifests(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    if value:
        ctx.ensure_object(Session).manifests.extend(value)


def manifest_option(f: F) -> F:
    """`--manifest FILE` after a command's name: the same as the global option."""
    return click.option(
        "--manifest", multiple=True, metavar="FILE", expose_value=False,
        type=click.Path(exists=True, dir_okay=False), callback=_add_manifests,
        help="Add an extra plugin manifest (repeatable; also a global option).",
    )(f)


def chain_option(f: F) -> F:
    return click.option("--chain", "chain_name", type=click.Choice(CHAIN_CHOICES),
                        default="lead",
                        show_default=True, help="The lead agent's chain or a subagent's.")(f)


def runtime_options_flags(f: F) -> F:
    """--plan/--vision/--subagents/--agent-name, passed to the command as `runtime` (a dict)."""

    @functools.wraps(f)
    def wrapper(*args: Any, plan_mode: bool, supports_vision: bool, subagents_enabled: bool,
                agent_name: str | None, **kwargs: Any) -> Any:
        runtime = {"plan_mode": plan_mode, "supports_vision": supports_vision,
                   "subagents_enabled": subagents_enabled, "agent_name": agent_name}
        return f(*args, runtime=runtime, **kwargs)

    options = [
        click.option("--plan", "plan_mode", is_flag=True, help="Plan mode is on."),
        click.option("--vision", "supports_vision", is_flag=True,
                     help="The model accepts images."),
        click.option("--subagents", "subagents_enabled", is_flag=True,
                     help="The lead agent may delegate to subagents."),
        click.option("--agent-name", metavar="NAME", default=None,
                     help="Name of the agent the chain is built for."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def chain_inputs(f: F) -> F:
    """Every input that decides a chain: --chain, --config, runtime flags, --manifest."""
    for decorate in (manifest_option, runtime_options_flags, config_option, chain_option):
        f = decorate(f)
    return f
