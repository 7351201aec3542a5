"""How the command line prints: rich tables for people, JSON for programs, warnings on stderr.

Everything printed through rich goes in as `Text`, never as markup, because
plugin names, reasons and provenance contain square brackets.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from antler.plugin_api.commands import CommandError
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


def write_file(path: str | Path, text: str, what: str) -> None:
    """Write `text` (`what`, for the error) to `path`; a path that cannot be written is a
    one-line error naming it and why, not a traceback."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as error:
        reason = error.strerror or str(error)
        raise CommandError(f"cannot write {what} to {path}: {reason}; choose a path in a "
                           "folder that exists and that you may write") from error


def write_or_echo(text: str, output: str | Path | None, what: str) -> None:
    """`text` to the file `output` (saying so on stderr), or to standard output."""
    if output:
        write_file(output, text, what)
        click.echo(f"wrote {what} to {output}", err=True)
    else:
        click.echo(text, nl=False)


def warn(message: str, *, label: str = "warning") -> None:
    colour = "red" if label.startswith("error") else "yellow"
    click.echo(click.style(f"{label}:", fg=colour, bold=True) + " " + message, err=True)


def confirm(question: str, *, poll_seconds: float = 0.2) -> bool:
    """Ask a yes/no question on the terminal (stderr); only ``y``/``yes`` is yes.

    The answer is waited for in short polls rather than one blocking read, so
    Ctrl-C or SIGTERM stops the command at once wherever it lands: a signal that
    arrives just before a blocking read would otherwise wait for the next key.
    End of input counts as no.
    """
    import select
    import sys

    click.echo(f"{question} [y/N]: ", nl=False, err=True)
    while not select.select([sys.stdin], [], [], poll_seconds)[0]:
        pass  # between polls Python runs the handler of any signal that came
    answer = sys.stdin.readline()
    if not answer:
        click.echo("", err=True)
    return answer.strip().lower() in ("y", "yes")
