"""The `antler` command line: the root command, its global options and its error policy.

Each command group lives in its own module (`antler.cli.chain`,
`antler.cli.config`, ...) and is imported only when it is invoked, so a new
command such as `antler run` or `antler demo` is one module plus one line in
`COMMANDS`. `antler --help` imports none of them: it lists each command from its
module's source (`listing`), plugin commands included. Nothing here imports
langchain or the resolver, and a command module imports them inside the
functions that need them, so `antler <group> --help` loads only click and its
own module, and `antler chain show` stays fast.

Error policy: every `AntlerError` is printed as `error: <message>` on stderr
with exit code 1 (2 for usage errors, such as an unknown plugin name) and no
traceback; `antler --debug ...` prints the traceback too. Any other exception
is one line too: a model provider's error names the provider, the error class
and what to do; anything else its class and a pointer to `--debug`.
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from antler.plugin_api.commands import CommandError

COMMANDS = {
    "chain": "antler.cli.chain:chain",
    "config": "antler.cli.config:config",
    "plugins": "antler.cli.plugins:plugins",
    "run": "antler.cli.run:run_command",
    "resume": "antler.cli.run:resume_command",
    "demo": "antler.cli.run:demo_command",
    "replay": "antler.cli.replay:replay_command",
    "threads": "antler.cli.threads:threads",
    "skills": "antler.cli.skills:skills",
    "mcp": "antler.cli.mcp:mcp",
    "doctor": "antler.cli.doctor:doctor",
}
"""Top-level commands by name: 'module:attribute' of a click command, imported on use."""

COMMANDS_GROUP = "antler.commands"
"""Entry point group through which plugins add top-level commands (`antler memory`)."""


def plugin_commands() -> dict[str, str]:
    """Commands that installed distributions add, by name (the built-in names win)."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=COMMANDS_GROUP)
            if ep.name not in COMMANDS}

DEBUG_KEY = "antler.debug"
"""`click.Context.meta` key: print tracebacks (set by the global `--debug`)."""


class CliError(CommandError):
    """A failure to report as `error: <message>`, with no usage banner and no traceback
    (the CLI's name for the SDK's `CommandError`, which plugin commands raise)."""


class CliUsageError(CliError):
    """A usage error the command itself detects (an unknown plugin name): exit code 2."""

    exit_code = 2


class AntlerGroup(click.Group):
    """A click group that loads lazy commands, suggests names and applies the error policy."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None,
                 plugin_commands: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.plugin_commands = plugin_commands

    def _lazy(self, name: str | None = None) -> dict[str, str]:
        if self.plugin_commands and (name is None or name not in self.lazy):
            self.lazy = {**plugin_commands(), **self.lazy}
            self.plugin_commands = False  # read the entry points once
        return self.lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self._lazy(cmd_name):
            module, _, attr = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attr)
            self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's command listing, a command not imported yet read from its source
        (`listing.listed`): `antler --help` imports none of the commands it lists."""
        commands = []
        for name in self.list_commands(ctx):
            command = self._listed(ctx, name)
            if command is not None and not command.hidden:
                commands.append((name, command))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit))
                                    for name, command in commands])

    def _listed(self, ctx: click.Context, name: str) -> click.Command | None:
        target = self._lazy().get(name)
        if target is None or name in self.commands \
                or target.partition(":")[0] in sys.modules:
            return self.get_command(ctx, name)
        from .listing import listed

        return listed(name, target) or self.get_command(ctx, name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            from antler.plugin_api.diagnostics import did_you_mean

            ctx.fail(f"no command {name!r}{did_you_mean(name, self.list_commands(ctx))}; "
                     f"commands: {', '.join(self.list_commands(ctx))}")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from antler.errors import AntlerError

        try:
            return super().invoke(ctx)
        except AntlerError as exc:
            if ctx.meta.get(DEBUG_KEY):
                traceback.print_exc(file=sys.stderr)
            raise CliError(str(exc)) from exc
        except (click.ClickException, click.exceptions.Exit):
            raise
        except (KeyboardInterrupt, click.Abort) as exc:  # Ctrl-C (a prompt's: click.Abort)
            raise click.exceptions.Exit(_stopped(exc)) from None
        except Exception as exc:
            if ctx.meta.get(DEBUG_KEY):
                traceback.print_exc(file=sys.stderr)
            raise CliError(one_line(exc)) from exc


INTERRUPTED_EXIT_CODE = 130
"""Exit code of a command stopped by Ctrl-C (128 + SIGINT), as shells report it."""

TERMINATED_EXIT_CODE = 143
"""Exit code of a command stopped by SIGTERM (128 + SIGTERM)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the command: it stops as on Ctrl-C, with `TERMINATED_EXIT_CODE`."""


def _stopped(exc: BaseException) -> int:
    """Say that the command stopped, without a traceback; its exit code."""
    signalled = exc.__cause__ or exc.__context__ if isinstance(exc, click.Abort) else exc
    code = TERMINATED_EXIT_CODE if isinstance(signalled, Terminated) else INTERRUPTED_EXIT_CODE
    click.echo(f"\nstopped ({'SIGTERM' if code == TERMINATED_EXIT_CODE else 'Ctrl-C'})",
               err=True)
    return code


def _raise_terminated(_signum: int, _frame: Any) -> None:
    raise Terminated()


def one_line(exc: BaseException) -> str:
    """An unexpected error as one line: a provider failure with what to do, anything
    else with its class and `--debug` for the traceback."""
    from antler.plugin_api.modelerrors import describe_provider_error

    described = describe_provider_error(exc)
    if described is not None:
        return described
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
    return (f"unexpected {type(exc).__module__}.{type(exc).__name__}: {text} (run again with "
            "--debug for the traceback)")


LIBRARY_LOGGERS = ("psycopg",)
"""Loggers of libraries that report, for their own users, what Antler already handles or
reports itself: psycopg's pool says 'discarding closed connection' after a database
restart, which the pool's checks recover from, and a connection that really fails is
Antler's one-line `StorageError`."""


def quiet_library_logs(debug: bool) -> None:
    """Keep `LIBRARY_LOGGERS` off the terminal, unless `--debug` asks for everything."""
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.CRITICAL)


AUDIT_LOGGER = "antler.audit"
"""Parent of the loggers that record security decisions (guardrail, authorization, ...)."""


class AuditLines(logging.Handler):
    """Shows an audit warning on the terminal as one line a person reads (`[audit]
    guardrail denied bash: ...`); with `--debug`, the whole JSON record. The command line
    adds it; an embedding application routes the `antler.audit` loggers where it wants."""

    def __init__(self, debug: bool) -> None:
        super().__init__(logging.WARNING)
        self.debug = debug

    def emit(self, record: logging.LogRecord) -> None:
        audit = getattr(record, "audit", None)
        if self.debug or not isinstance(audit, dict):
            text = record.getMessage()
        else:
            check = str(audit.get("event", "audit")).removesuffix(".decision")
            verdict = "allowed" if audit.get("allowed") else "denied"
            text = f"{check} {verdict} {audit.get('target')}: {audit.get('reason')}"
        click.echo(f"[audit] {text}", err=True)


def show_audit_lines(debug: bool) -> None:
    """Audit warnings as `[audit] ...` lines instead of raw JSON on stderr (one handler,
    however many times the command line runs in a process)."""
    logger = logging.getLogger(AUDIT_LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, AuditLines)]:
        logger.removeHandler(handler)
    logger.addHandler(AuditLines(debug))


def _version() -> str:
    from antler import __version__

    return __version__


@click.group(cls=AntlerGroup, lazy=COMMANDS, plugin_commands=True,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show the traceback of an error.")
@click.option(
    "--manifest", "manifests", multiple=True, metavar="FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="Add an extra plugin manifest to the installed plugins (repeatable). Every command "
         "that reads plugins also takes --manifest after its name; both lists are used. "
         "Preview a manifest before packaging it.",
)
@click.option(
    "--isolated", is_flag=True,
    help="Ignore installed plugin distributions: use only Antler's points and slots plus "
         "the --manifest files.",
)
@click.version_option(_version(), "--version", prog_name="antler")
@click.pass_context
def cli(ctx: click.Context, debug: bool, manifests: tuple[str, ...], isolated: bool) -> None:
    """Antler: the middleware chain of an agent harness, as a plugin platform.

    Start with `antler chain show` (what runs, in what order, and why) and
    `antler chain explain NAME` (why NAME is where it is). Read commands take
    --json for machine-readable output; each command's --help documents the keys.

    \b
    Exit codes:
      0    ok
      1    invalid input (bad config or manifest, unsatisfiable constraints of
           a required plugin), a failed run, a declined confirmation
      2    usage error (unknown option, command or plugin name; a missing --yes)
      3    `antler run`/`resume` paused: a person must decide (`antler resume`)
      130  stopped by Ctrl-C (SIGINT)
      143  stopped by SIGTERM

    A stopped run keeps what its thread saved. An optional plugin that cannot
    load or be ordered is left out with a warning on stderr naming its
    distribution; the exit code stays 0 (`config check --strict` makes it 1).
    """
    from .session import Session

    ctx.meta[DEBUG_KEY] = debug
    quiet_library_logs(debug)
    show_audit_lines(debug)
    ctx.obj = Session(manifests=list(manifests), isolated=isolated)


COMMAND_GC_THRESHOLD = 10_000
"""The garbage collector's youngest-generation threshold while a command runs (CPython's
default: 700). A command's start (LangChain's modules, pydantic models, the chain and its
graph) allocates a few hundred thousand objects that live as long as the process, and at
the default the collector scans them over and over: 130 ms of a 1.6 s `antler run` of the
demo. At this threshold `antler run` takes about 5% less CPU (`benchmarks/bench_cli`);
garbage waits for at most 10,000 more allocations before it is collected."""


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (`antler`) and `python -m antler`; returns the exit code.

    SIGTERM stops a command as Ctrl-C does (exit codes 143 and 130, no traceback). The
    garbage collector runs at `COMMAND_GC_THRESHOLD` until the command returns.
    """
    import gc
    import signal
    import threading

    handles = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if handles else None
    thresholds = gc.get_threshold()
    gc.set_threshold(max(COMMAND_GC_THRESHOLD, thresholds[0]), *thresholds[1:])
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="antler")
    except SystemExit as exc:  # click ends standalone runs with sys.exit
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt as exc:  # before or after a command's own handling
        return _stopped(exc)
    finally:
        gc.set_threshold(*thresholds)
        if handles:
            signal.signal(signal.SIGTERM, previous)
    return 0
