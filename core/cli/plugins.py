"""`antler plugins ...`: the installed plugins, where they come from, and which failed."""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING, Any

import click

from antler.plugin_api.commands import json_option

from . import AntlerGroup
from .output import console, print_json, table
from .session import Session, manifest_option, pass_session

if TYPE_CHECKING:
    from antler.plugin_api.registry import PluginRegistry
    from antler.plugin_api.spec import PluginSpec


@click.group(cls=AntlerGroup)
def plugins() -> None:
    """The installed plugins and the distributions they come from."""


@plugins.command("list")
@manifest_option
@json_option
@pass_session
def list_plugins(session: Session, as_json: bool) -> None:
    """Every plugin discovered, and every entry point that failed to load.

    Plugins from --manifest files have no distribution; their manifest
    file:line is shown instead. Enablement is the default (`always`, `on` or
    `off`) plus runtime conditions; `antler chain show` applies a config.

    \b
    JSON (--json): a list of objects with
      name         plugin name (null for an entry point that failed before
                   naming its plugins)
      summary      one line
      distribution distribution name, or null for a --manifest plugin
      version      distribution version, or null
      entry_point  entry point name in the antler.plugins group, or null
      declared_at  the manifest entry (file:line), or null when failed
      status       "ok" | "failed"
      cause        why it failed, or null
      enabled      "always" | "on" | "off" (null when failed)
      when         {condition: required value}
      chains       ["lead", "subagent"] or a subset
      server_owned_keys  additional_kwargs keys it declares server-owned (stripped
                   from caller input; the core's own are in `chain show --json`)
    """
    rows = plugin_rows(session.registry())
    if as_json:
        print_json(rows)
        return
    from rich.text import Text

    listing = table("plugin", "source", "entry point", "status", "enabled", "chains")
    listing.columns[0].no_wrap = True
    listing.columns[3].min_width = listing.columns[4].min_width = 6
    for row in rows:
        failed = row["status"] == "failed"
        status = Text(f"failed: {row['cause']}" if failed else "ok",
                      style="red" if failed else "green")
        if row["distribution"]:
            origin = " ".join(filter(None, (row["distribution"], row["version"])))
        else:
            origin = row["declared_at"] or "-"
        listing.add_row(Text(row["name"] or "?", style="bold"), Text(origin),
                        Text(row["entry_point"] or "-"), status, Text(enablement(row)),
                        Text(" ".join(row["chains"]) or "-"))
    out = console()
    out.print(listing)
    ok = sum(row["status"] == "ok" for row in rows)
    out.print(Text(f"{ok} plugin{'s' * (ok != 1)} ok, {len(rows) - ok} failed", style="dim"))


def enablement(row: dict[str, Any]) -> str:
    if row["enabled"] is None:
        return "-"
    conditions = [name if wanted else f"not {name}" for name, wanted in row["when"].items()]
    return row["enabled"] + (f", when {' and '.join(conditions)}" if conditions else "")


def plugin_rows(registry: PluginRegistry) -> list[dict[str, Any]]:
    rows = [_spec_row(spec, registry) for spec in registry.specs.values()]
    rows.sort(key=lambda row: row["name"])
    for diagnostic in registry.diagnostics:
        rows.append({
            "name": diagnostic.plugin, "summary": "", "distribution": diagnostic.distribution,
            "version": _installed_version(diagnostic.distribution),
            "entry_point": diagnostic.entry_point, "declared_at": None, "status": "failed",
            "cause": diagnostic.cause, "enabled": None, "when": {}, "chains": [],
            "server_owned_keys": [],
        })
    return rows


def _spec_row(spec: PluginSpec, registry: PluginRegistry) -> dict[str, Any]:
    source = registry.sources.get(spec.name)
    prov = spec.provenance
    return {
        "name": spec.name, "summary": spec.summary,
        "distribution": source.distribution if source else prov.distribution,
        "version": source.version if source else prov.version,
        "entry_point": source.entry_point if source else prov.entry_point,
        "declared_at": f"{prov.source}:{prov.line}" if prov.line else prov.source,
        "status": "ok", "cause": None, "enabled": spec.enabled, "when": dict(spec.when),
        "chains": list(spec.chains), "server_owned_keys": list(spec.server_owned_keys),
    }


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
