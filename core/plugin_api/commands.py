"""What a plugin's own `antler` command uses: the session, the shared options, output.

A distribution adds a top-level command through the `antler.commands` entry
point group (`memory = "acme.cli:memory"`, a click command or group); the CLI
lists it without importing it. The command takes the invocation's session
with `@pass_session` and asks it for what the operator configured (never
reaching into the runtime): `session.config(path)` is the validated operator
config, `session.open_store(config_path, home)` the shared store it names.
Failures are raised as `CommandError` (printed as ``error: ...``, exit 1, no
traceback).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "CommandError",
    "CommandSession",
    "config_option",
    "console",
    "home_option",
    "json_option",
    "pass_session",
    "print_json",
]

F = TypeVar("F", bound=Callable[..., Any])


class CommandError(click.ClickException):
    """A failure to report as `error: <message>`, with no usage banner and no traceback."""

    exit_code = 1

    def show(self, file: IO[Any] | None = None) -> None:
        line = click.style("error:", fg="red", bold=True) + " " + self.message
        if file is None:
            click.echo(line, err=True)
        else:
            click.echo(line, file=file)


class CommandSession(Protocol):
    """The inputs shared by the commands of one `antler` invocation."""

    def config(self, path: str | None) -> Any:
        """The operator config at `path`, validated against the installed plugins
        (None: the defaults)."""

    def open_store(self, config_path: str | None, home: str | None) -> tuple[Any, Path]:
        """(the shared store the config's `storage:` names, the base directory); the
        caller closes the store."""


def pass_session(f: F) -> F:
    """Pass the invocation's `CommandSession` as the command's first argument."""

    @functools.wraps(f)
    def with_session(*args: Any, **kwargs: Any) -> Any:
        session = click.get_current_context().obj
        if session is None or not hasattr(session, "open_store"):
            raise CommandError("this command runs under the `antler` command line "
                               "(antler <command> ...), which provides its session")
        return f(session, *args, **kwargs)

    return with_session  # type: ignore[return-value]


def json_option(f: F) -> F:
    """`--json`: print JSON instead of a table."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead of a table (keys documented above).")(f)


def config_option(f: F) -> F:
    """`--config FILE` (default: $ANTLER_CONFIG)."""
    return click.option(
        "--config", "config_path", metavar="FILE", envvar="ANTLER_CONFIG",
        type=click.Path(dir_okay=False),
        help="Operator config YAML (default: $ANTLER_CONFIG, else all defaults).",
    )(f)


def home_option(f: F) -> F:
    """`--home DIR`: the base directory."""
    return click.option("--home", type=click.Path(file_okay=False), default=None,
                        help="Base directory (default: the config's storage.base_dir when "
                             "--config gives one, else $ANTLER_HOME, else ./.antler).")(f)


def console(*, stderr: bool = False) -> Console:
    """A console printing plain text (no markup, highlighting or emoji)."""
    from rich.console import Console

    return Console(stderr=stderr, markup=False, highlight=False, emoji=False)


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))
