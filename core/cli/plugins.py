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

    out = console()
    headers = ("plugin", "source", "status", "enabled · chains")
    cells = [[Text(row["name"] or "?", style="bold"), Text(source_text(row)),
              Text(f"failed: {row['cause']}" if row["status"] == "failed" else "ok",
                   style="red" if row["status"] == "failed" else "green"),
              Text(f"{enablement(row)} · {', '.join(row['chains']) or '-'}")] for row in rows]
    widths = [max([len(word) for line in cells for word in line[index].plain.split()]
                  + [len(header)]) for index, header in enumerate(headers)]
    if sum(widths) + 2 * len(widths) <= out.width:  # a space each side of every column
        listing = table(*headers)
        spare = out.width - sum(widths) - 2 * len(widths)
        for index, column in enumerate(listing.columns):  # break between words, not in one
            whole = max([len(line[index].plain) for line in cells] + [widths[index]])
            share = spare // 3 if index else 0  # the columns that may wrap
            column.width = min(whole, widths[index] + share)
        for line in cells:
            listing.add_row(*line)
        out.print(listing)
    else:  # too narrow for the columns: one block per plugin
        for name, origin, status, enabled in cells:
            out.print(Text.assemble(name, "  ", status))
            out.print(Text.assemble("    ", origin, "; ", enabled))
    ok = sum(row["status"] == "ok" for row in rows)
    out.print(Text(f"{ok} plugin{'s' * (ok != 1)} ok, {len(rows) - ok} failed", style="dim"))


def source_text(row: dict[str, Any]) -> str:
    """'antler 0.1.0', plus the entry point when its name is not the plugin's; a --manifest
    plugin's file:line."""
    if not row["distribution"]:
        return str(row["declared_at"] or "-")
    origin = " ".join(filter(None, (row["distribution"], row["version"])))
    entry = row["entry_point"]
    return origin if not entry or entry == row["name"] else f"{origin}, entry point {entry}"


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
