"""Each plugin's error policy (`on_error`), and the security gates it must not open.

`error_policy` says what a hook that raises does to the run (see
`antler.runtime.isolation`, which applies it): `fail` stops the run, `skip`
goes on as if the hook were absent. Skipping a security gate's failure opens
the gate, so a plugin whose manifest entry carries ``security_gate: <what it
would let through>`` is treated apart:

- it fails closed by default, wherever it comes from;
- `on_error: skip` on an `always` gate is refused when the config is loaded
  (`gate_problems`), as switching it off is: the platform counts on it;
- `on_error: skip` on an optional gate is a warning (`gate_warnings`), from
  `antler config check` and whenever an agent is built, naming the plugin
  and what a skipped failure would let through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from antler.plugin_api.registry import BUILTIN_DISTRIBUTION, canonical_name
from antler.plugin_api.spec import OnError, PluginSpec

if TYPE_CHECKING:
    from antler.plugin_api.registry import PluginRegistry

    from .config.operatorconfig import OperatorConfig

__all__ = ["FAIL", "SKIP", "error_policy", "gate_problems", "gate_warnings", "policy_report"]

FAIL: OnError = "fail"
SKIP: OnError = "skip"


def _operator_setting(spec: PluginSpec, settings: Mapping[str, Any] | None,
                      ) -> tuple[str, OnError] | None:
    """(key, policy) of the most specific `plugins.<key>.on_error` naming the plugin."""
    if not settings:
        return None
    table = {canonical_name(name): (name, item) for name, item in settings.items()}
    provenance = spec.provenance
    for name in (spec.name, provenance.entry_point, provenance.distribution):
        found = table.get(canonical_name(name)) if name else None
        if found is not None and found[1].on_error is not None:
            return found[0], found[1].on_error
    return None


def error_policy(spec: PluginSpec, settings: Mapping[str, Any] | None = None) -> OnError:
    """`fail` or `skip` for the plugin `spec` describes.

    `settings` is the operator config's `plugins` table (`OperatorConfig.
    plugin_settings`): an `on_error` set for the plugin wins over one set for
    its entry point, which wins over its distribution's. Else the plugin's own
    `on_error`; else `fail` for `always` plugins, security gates and everything
    Antler ships, `skip` for the other third-party plugins.
    """
    operator = _operator_setting(spec, settings)
    if operator is not None:
        return operator[1]
    if spec.on_error is not None:
        return spec.on_error
    if (spec.enabled == "always" or spec.security_gate
            or spec.provenance.distribution == BUILTIN_DISTRIBUTION):
        return FAIL
    return SKIP


def policy_report(spec: PluginSpec, config: OperatorConfig) -> dict[str, Any]:
    """What `chain show`, `chain explain` and the report say of a plugin's error policy:
    `on_error` (effective), `on_error_from` (who decided it) and `security_gate`."""
    operator = _operator_setting(spec, config.plugin_settings)
    if operator is not None:
        key = operator[0]
        source = f"plugins.{key}.on_error at {config.locate('plugins', key, 'on_error')}"
    elif spec.on_error is not None:
        source = f"the manifest at {spec.provenance}"
    elif spec.enabled == "always":
        source = "default: `always` plugins fail"
    elif spec.security_gate:
        source = "default: security gates fail closed"
    elif spec.provenance.distribution == BUILTIN_DISTRIBUTION:
        source = "default: Antler's own plugins fail"
    else:
        source = "default: third-party plugins and extensions skip"
    return {"on_error": error_policy(spec, config.plugin_settings), "on_error_from": source,
            "security_gate": spec.security_gate}


def _skipped_by(spec: PluginSpec, config: OperatorConfig) -> tuple[str, str | None]:
    """Who set `on_error: skip` on the gate `spec` (the config entry, or its manifest),
    and the `plugins:` key when the config did."""
    operator = _operator_setting(spec, config.plugin_settings)
    if operator is not None:
        key = operator[0]
        return f"{config.locate('plugins', key, 'on_error')}: plugins.{key}.on_error", key
    return f"{spec.provenance}: its manifest's on_error", None


def gate_problems(config: OperatorConfig, registry: PluginRegistry) -> list[str]:
    """The config's `on_error: skip` on `always` security gates: refused, one line each."""
    problems = []
    for spec in registry.specs.values():
        if spec.security_gate and spec.always and error_policy(
                spec, config.plugin_settings) == SKIP:
            why = spec.always_reason or "the platform depends on it in every chain"
            where, key = _skipped_by(spec, config)
            fix = "Remove `on_error: skip`" + (
                "" if key == spec.name else
                f", or keep this gate closed with `plugins: {{{spec.name}: {{on_error: fail}}}}`")
            problems.append(
                f"{where}: skip would open plugin {spec.name!r}, an `always` security gate "
                f"({why}): if one of its hooks failed, the run would go on and let through "
                f"{spec.security_gate}. {fix}.")
    return problems


def gate_warnings(specs: Iterable[PluginSpec], config: OperatorConfig) -> list[str]:
    """One warning per optional security gate of `specs` running under `on_error: skip`."""
    return [
        f"{_skipped_by(spec, config)[0]}: skip: plugin {spec.name!r} is a security gate; if "
        f"one of its hooks fails, the run goes on without it and lets through "
        f"{spec.security_gate}. Set `on_error: fail` unless you accept that."
        for spec in specs
        if spec.security_gate and error_policy(spec, config.plugin_settings) == SKIP
    ]
