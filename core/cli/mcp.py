"""`antler mcp ...`: the MCP servers of the config, whether they start, and their tools."""

from __future__ import annotations

import click

from antler.plugin_api.commands import config_option, json_option

from . import AntlerGroup
from .output import console, print_json, table
from .session import Session, manifest_option, pass_session


@click.group(cls=AntlerGroup)
def mcp() -> None:
    """The MCP servers the `mcp_servers:` section of the config names."""


@mcp.command("list")
@manifest_option
@config_option
@json_option
@pass_session
def list_servers(session: Session, config_path: str | None, as_json: bool) -> None:
    """Start every configured server, show its state and tools, and stop it again.

    \b
    States: ready, failed (with the reason), disabled (`enabled: false`).
    A failing `required: true` server is shown, not raised: this command is
    how you find out why it fails.
    JSON (--json): {"servers": [...]}, each with name, transport, state,
      reason (null unless failed) and tools (names as the agent sees them).
    """
    from antler.runtime.mcp import start_sessions

    owner = start_sessions(session.config(config_path), strict=False)
    try:
        rows = [status.as_dict() for status in owner.status.values()]
    finally:
        owner.close()
    for row in rows:
        if row["state"] == "closed":
            row["state"] = "ready"
    if as_json:
        print_json({"servers": rows})
        return
    from rich.text import Text

    out = console()
    if not rows:
        out.print(Text("no MCP servers configured (add an `mcp_servers:` section)",
                       style="dim"))
        return
    styles = {"ready": "green", "failed": "red", "disabled": "dim"}
    listing = table("server", "transport", "state", "tools")
    listing.columns[0].no_wrap = True
    for row in rows:
        detail = ", ".join(row["tools"]) or "-"
        if row["reason"]:
            detail = row["reason"]
        listing.add_row(Text(row["name"], style="bold"), Text(row["transport"]),
                        Text(row["state"], style=styles.get(row["state"], "")), Text(detail))
    out.print(listing)
