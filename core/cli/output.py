"""How the command line prints: rich tables for people, JSON for programs, warnings on stderr.

Everything printed through rich goes in as `Text`, never as markup, because
plugin names, reasons and provenance contain square brackets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from antler.plugin_api.commands import console as console
from antler.plugin_api.commands import print_json as print_json

if TYPE_CHECKING:
    from rich.table import Table


def table(*columns: str, title: str | None = None, **options: Any) -> Table:
    from rich.box import Box
    from rich.table import Table

    # SIMPLE_HEAD, except that section breaks draw a dashed rule instead of a blank line.
    rules = Box("    \n    \n ── \n    \n ╌╌ \n    \n    \n    \n")
    result = Table(title=title, title_justify="left", box=rules, pad_edge=False,
                   **options)
    for column in columns:
        result.add_column(column, overflow="fold")
    return result


def warn(message: str, *, label: str = "warning") -> None:
    colour = "red" if label.startswith("error") else "yellow"
    click.echo(click.style(f"{label}:", fg=colour, bold=True) + " " + message, err=True)
