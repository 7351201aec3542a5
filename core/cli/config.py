"""`antler config ...`: validate an operator config, export its JSON Schema."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import AntlerGroup
from .output import print_json
from .session import (
    CHAIN_CHOICES,
    CONDITION_FLAGS,
    Session,
    describe_runtime,
    json_option,
    manifest_option,
    pass_session,
)

if TYPE_CHECKING:
    from antler.chain.config import OperatorConfig


@click.group(cls=AntlerGroup)
def config() -> None:
    """Validate the operator config and export its JSON Schema."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@manifest_option
@json_option
@pass_session
@click.pass_context
def check(ctx: click.Context, session: Session, file: str, as_json: bool) -> None:
    """Validate FILE: every section against its plugin's model, then the chains.

    Beyond the sections, checks that required plugin distributions loaded,
    that every required extension class imports, and that both the lead and
    the subagent chain can be planned under every combination of runtime
    flags (--plan, --vision, --subagents). Prints "ok: FILE is valid (N
    sections)", or the error (file:line:column where it has one) and exits 1.

    \b
    JSON (--json): an object with
      file      the path checked
      valid     true | false (exit code 1 when false)
      sections  [names of the sections FILE sets]
      error     the error message, or null
    """
    from antler.errors import AntlerError

    try:
        sections = check_config(session, file)
    except AntlerError as exc:
        if not as_json:
            raise
        print_json({"file": file, "valid": False, "sections": [], "error": str(exc)})
        ctx.exit(1)
    if as_json:
        print_json({"file": file, "valid": True, "sections": sections, "error": None})
    else:
        count = len(sections)
        click.echo(f"ok: {file} is valid ({count} section{'s' * (count != 1)})")


def check_config(session: Session, file: str) -> list[str]:
    """The sections `file` sets; raises the first `AntlerError` that using it would hit."""
    from antler.errors import AntlerError, ConfigError

    config = session.config(file)
    session.registry().raise_for_required(config.required_plugins())
    _check_required_extensions(config)
    flags = list(CONDITION_FLAGS)
    combinations = sorted(itertools.product((False, True), repeat=len(flags)), key=sum)
    for chain in CHAIN_CHOICES:
        for values in combinations:
            runtime: dict[str, Any] = dict(zip(flags, values, strict=True))
            try:
                session.plan(config, chain, runtime)
            except AntlerError as exc:
                raise ConfigError(f"{file}: the {chain} chain cannot be planned "
                                  f"({describe_runtime(runtime)}):\n{exc}") from exc
    return sorted(config.sections)


def _check_required_extensions(config: OperatorConfig) -> None:
    """Import every required extension class now rather than at the first build."""
    from antler.chain.config import extension_ordering
    from antler.errors import ConfigError, ReflectionError
    from antler.plugin_api.reflection import resolve_middleware_class

    for index, entry in enumerate(config.extensions.middlewares):
        _, _, required, _ = extension_ordering(entry)
        if not required:
            continue  # an optional one fails open; `antler chain show` says why
        path = entry if isinstance(entry, str) else entry.use
        try:
            resolve_middleware_class(path)
        except ReflectionError as exc:
            where = config.locate("extensions", "middlewares", index)
            raise ConfigError(f"{where}: extensions.middlewares[{index}]: {exc}") from None


@config.command("schema")
@click.option("--output", "-o", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the schema to FILE instead of stdout.")
@manifest_option
@pass_session
def schema(session: Session, output: str | None) -> None:
    """The JSON Schema of the operator config for the installed plugins.

    Point your editor at it (yaml-language-server: `# yaml-language-server:
    $schema=antler-config.schema.json`) to get completion and validation.
    """
    from antler.chain.config import config_schema

    text = json.dumps(config_schema(session.registry()), indent=2, ensure_ascii=False) + "\n"
    if output:
        Path(output).write_text(text, encoding="utf-8")
        click.echo(f"wrote the config schema to {output}", err=True)
    else:
        click.echo(text, nl=False)
