"""The runtime conditions a config implies, decided in one place.

A chain's membership depends on runtime conditions (`plan_mode`,
`supports_vision`, `subagents_enabled`, `mcp_routing`, ...). `antler run`, the
agent factory (and so the served graph) and every command that shows a chain
(`chain show`, `chain explain`, `chain report`, `doctor`, `config check`) derive
them from the config with `runtime_for`, so the chain a command shows is the
chain a run with the same flags builds. A flag can only switch a condition on;
the config switches it on too where it says so:

* `supports_vision`: `models.supports_vision`, or the `supports_vision` of the
  agent's model when it is a name under `models.named` (`models.default`, or
  the `--model` given to the run).
* `mcp_routing` (commands that show a chain only): a configured MCP server or
  tool routes by keywords. A run decides it from the tools the servers really
  list, which a command that starts no server cannot know.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from antler.chain.config import OperatorConfig
    from antler.plugin_api.context import RuntimeOptions

__all__ = ["model_supports_vision", "runtime_for"]


def model_supports_vision(config: OperatorConfig, model: Any = None,
                          catalog: Any = None) -> bool:
    """Whether the agent's model (`model`, else `models.default`) takes images.

    `models.supports_vision`, or the model's entry under `models.named` (looked
    up in `catalog` when one is given: the run's model catalog) says so. A model
    object, rather than a reference, is judged by `models.supports_vision` alone.
    """
    models = config.models
    if models.supports_vision:
        return True
    reference = model if isinstance(model, str) else models.default if model is None else None
    if reference is None:
        return False
    if catalog is not None:
        return bool(catalog.supports_vision(reference.strip()))
    entry = models.named.get(reference.strip())
    return bool(entry is not None and entry.supports_vision)


def runtime_for(config: OperatorConfig, flags: Mapping[str, Any] | None = None, *,
                model: Any = None, catalog: Any = None,
                estimate_mcp: bool = False) -> RuntimeOptions:
    """The `RuntimeOptions` a run of `config` with `flags` gets.

    `flags` holds RuntimeOptions fields (`plan_mode`, `supports_vision`,
    `subagents_enabled`, `agent_name`, `user_id`, `conditions`); a false or
    missing `supports_vision` means "as the config says". `model` is the run's
    model reference (None: `models.default`). `estimate_mcp` adds the
    `mcp_routing` condition from the config, for commands that start no MCP
    server (an explicit condition in `flags` wins).
    """
    from antler.plugin_api.context import RuntimeOptions

    options = dict(flags or {})
    options["supports_vision"] = bool(options.get("supports_vision")) or model_supports_vision(
        config, model, catalog)
    conditions = dict(options.pop("conditions", None) or {})
    if estimate_mcp:
        routed = any(server.routes_by_keywords for server in config.mcp_servers.values())
        conditions = {"mcp_routing": routed, **conditions}
    return RuntimeOptions(**options, conditions=conditions)
