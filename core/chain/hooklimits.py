"""Each plugin's hook limits: its time budget, its output limit, how closely its state is watched.

`antler.runtime.hookwatch` applies them to every hook call (see there for what is
and is not enforced). A third-party plugin (any whose distribution is not Antler)
is untrusted: by default each hook call has `agent.plugin_time_budget` seconds
and may return `agent.plugin_output_limit` characters and items, and the state
lists and dicts it is handed are copied first, so that a change it makes in
place is seen item by item and undone. Antler's own plugins have no budget and
no limit unless the operator sets one, and their state is not copied or watched.

The operator sets a plugin's limits under `plugins.<key>` (`time_budget`,
`output_limit`), where the key is the plugin, its entry point or its
distribution; the most specific key that sets a limit wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from antler.plugin_api.registry import BUILTIN_DISTRIBUTION
from antler.plugin_api.spec import PluginSpec

if TYPE_CHECKING:
    from .config.operatorconfig import OperatorConfig

__all__ = ["HookLimits", "hook_limits"]


@dataclass(frozen=True)
class HookLimits:
    """What one plugin's hook calls are held to."""

    time_budget: float | None = None
    """Seconds one hook call may take, a wrap hook's handler not counted (None: any)."""
    time_from: str = ""
    """Where the budget was set, for the error that names it."""
    output_limit: int | None = None
    """Text characters plus items one hook call may return (None: any)."""
    output_from: str = ""
    untrusted: bool = False
    """Watch each node hook's change of the state in place (copying the state's lists and
    dicts first, to see it and undo it): the plugin is not Antler's own."""


def hook_limits(spec: PluginSpec, config: OperatorConfig) -> HookLimits:
    """The limits of the plugin `spec` describes, under the operator's `config`."""
    provenance = spec.provenance
    untrusted = provenance.distribution != BUILTIN_DISTRIBUTION
    settings = config.load_settings(*(name for name in (
        spec.name, provenance.entry_point, provenance.distribution) if name))
    time = next(((f"plugins.{key}.time_budget", item.time_budget) for key, item in settings
                 if item.time_budget is not None), None)
    output = next(((f"plugins.{key}.output_limit", item.output_limit) for key, item in settings
                   if item.output_limit is not None), None)
    agent = config.agent
    if time is None and untrusted and agent.plugin_time_budget is not None:
        time = "agent.plugin_time_budget", agent.plugin_time_budget
    if output is None and untrusted and agent.plugin_output_limit is not None:
        output = "agent.plugin_output_limit", agent.plugin_output_limit
    return HookLimits(time_budget=time[1] if time else None, time_from=time[0] if time else "",
                      output_limit=output[1] if output else None,
                      output_from=output[0] if output else "", untrusted=untrusted)
