"""`antler config ...`: validate an operator config, export its JSON Schema."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import AntlerGroup, CliError
from .output import print_json, warn, write_file, write_or_echo
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
    from antler.chain import ChainPlan
    from antler.chain.config import OperatorConfig
    from antler.plugin_api.spec import PluginSpec


@click.group(cls=AntlerGroup)
def config() -> None:
    """Validate the operator config and export its JSON Schema."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--no-import", "no_import", is_flag=True,
              help="Do not import plugin factories or extension classes (for an environment "
                   "you do not trust yet); skips the checks that need them.")
@click.option("--strict", is_flag=True,
              help="Exit 1 on warnings too (optional plugins that would be left out).")
@manifest_option
@json_option
@pass_session
@click.pass_context
def check(ctx: click.Context, session: Session, file: str, no_import: bool, strict: bool,
          as_json: bool) -> None:
    """Check FILE the way `antler run` would use it, and report every problem at once.

    \b
    1. every section against its plugin's model (file:line:column, did-you-mean);
    2. plugin distributions loaded (a required one that did not is an error);
    3. the lead and the subagent chain can be planned under every combination
       of runtime flags (--plan, --vision, --subagents);
    4. the factory of every plugin that takes part imports, and the hooks its
       class implements match the manifest's `hooks:`;
    5. every configured extension class imports, its `config:` binds to the
       constructor (no unknown, no missing argument), and it is constructed
       with it as the build constructs it (a bad value is an error now);
    6. no security gate that takes part runs under `on_error: skip` (a warning;
       on an `always` gate it is an error).

    Steps 4 and 5 import code; --no-import skips them (discovery still imports
    each distribution's entry point module and config models). Problems that
    would stop `antler run` are errors: all of them are printed, exit code 1.
    An optional plugin that `antler run` would leave out (its constraints
    cannot be satisfied, or its factory does not import) is a warning on
    stderr: exit code 0, or 1 with --strict. Prints "ok: FILE is valid (N
    sections)" otherwise.

    \b
    JSON (--json): an object with
      file      the path checked
      valid     true | false (exit code 1 when false)
      sections  [names of the sections FILE sets]
      error     the errors as one message, or null
      problems  [{file, line, column, key, message, text}: one per error; line, column
                 and key are null where the error has none (a chain that cannot be
                 planned); text is the whole error as printed]
      warnings  [what an operator should know but does not stop a run]
    """
    from antler.errors import AntlerError

    deerflow = _deerflow_file(file)
    if deerflow is not None:
        if as_json:
            print_json({"file": file, "valid": False, "sections": [], "error": deerflow,
                        "problems": [problem_object(deerflow, file)], "warnings": []})
            ctx.exit(1)
        raise CliError(deerflow)
    try:
        report = check_config(session, file, imports=not no_import)
    except AntlerError as exc:  # the file itself cannot be read or validated
        report = ConfigReport(problems=[str(exc)])
    failed = bool(report.problems) or (strict and bool(report.warnings))
    error = report.error(file) if failed else None
    if as_json:
        print_json({"file": file, "valid": not failed, "sections": report.sections,
                    "error": error, "problems": [problem_object(p, file)
                                                 for p in report.problems],
                    "warnings": report.warnings})
        ctx.exit(1 if failed else 0)
    for warning in report.warnings:
        warn(warning)
    if error is not None:
        raise CliError(error)
    count = len(report.sections)
    click.echo(f"ok: {file} is valid ({count} section{'s' * (count != 1)})")


@dataclass
class ConfigReport:
    """What `config check` found: errors that stop a run, and warnings that do not."""

    sections: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def error(self, file: str) -> str:
        if len(self.problems) == 1:
            return self.problems[0]
        if not self.problems:
            return f"{file}: --strict: {len(self.warnings)} warning(s), see above"
        return f"{file}: {len(self.problems)} problems:\n" + "\n".join(
            "- " + problem.replace("\n", "\n  ") for problem in self.problems)


def check_config(session: Session, file: str, *, imports: bool = True) -> ConfigReport:
    """Everything using `file` would run into; raises only when `file` cannot be loaded."""
    from antler.chain.modelrefs import model_reference_problems, unset_environment_references

    config, load_problems = _load_what_can_be_loaded(session, file)
    registry = session.registry()
    report = ConfigReport(sections=sorted(config.sections), problems=load_problems)
    report.problems += model_reference_problems(config)
    report.warnings += unset_environment_references(config)
    fatal = registry.required_failures(config.required_plugins())
    report.problems += [str(d) for d in fatal]
    report.warnings += [f"{d} (optional: skipped)" for d in registry.diagnostics
                        if d not in fatal]
    plans = _plan_everything(session, config, file, report, imports)
    _check_gates(plans, config, report)
    if imports:
        _check_factories(plans, report)
        _check_extensions(config, report)
        _check_tools(config, report)
    return report


def _plan_everything(session: Session, config: OperatorConfig, file: str,
                     report: ConfigReport, imports: bool) -> list[ChainPlan]:
    """Plan both chains under every combination of runtime flags; collect what went wrong."""
    from antler.errors import AntlerError

    from .chain import plan_problems, problem_text

    flags = list(CONDITION_FLAGS)
    combinations = sorted(itertools.product((False, True), repeat=len(flags)), key=sum)
    plans: list[ChainPlan] = []
    for chain in CHAIN_CHOICES:
        for values in combinations:
            runtime: dict[str, Any] = dict(zip(flags, values, strict=True))
            # The same fault under other flags says nothing new: one line per message.
            where = f"{file}: the {chain} chain cannot be planned ({describe_runtime(runtime)})"
            try:
                plan = session.plan(config, chain, runtime, load_extensions=imports,
                                    keep_going=True)
            except AntlerError as exc:
                _add_once(report.problems, f"{where}:\n{exc}", key=str(exc))
                continue
            plans.append(plan)
            for row, problem in zip(plan_problems(plan), plan.problems, strict=True):
                if problem.required:
                    _add_once(report.problems, f"{where}:\n{problem.message}",
                              key=problem.message)
                else:
                    _add_once(report.warnings, problem_text(row))
    return plans


def _check_gates(plans: list[ChainPlan], config: OperatorConfig, report: ConfigReport) -> None:
    """Security gates that take part under `on_error: skip` (refused for `always` ones)."""
    from antler.chain.policy import gate_warnings

    for plan in plans:
        specs = (plan.resolution.placements[name].spec for name in plan.order)
        for warning in gate_warnings(specs, config):
            _add_once(report.warnings, warning)


def _check_factories(plans: list[ChainPlan], report: ConfigReport) -> None:
    """Import the factory of every plugin that takes part; compare its hooks to `hooks:`."""
    from antler.chain import factory_import_failures

    checked: set[str] = set()
    for plan in plans:
        for name, message in factory_import_failures(plan).items():
            spec = plan.registry.specs[name]
            if name in plan.required:
                _add_once(report.problems, f"{spec.provenance}: plugin {name!r}: {message}")
            else:
                _add_once(report.warnings, f"optional plugin {name!r} [{spec.provenance}] will "
                                           f"be left out: {message}")
            checked.add(name)
        for name in plan.order:
            if name not in checked and name not in plan.builders:
                checked.add(name)
                _check_hooks(plan.registry.specs[name], report)


def _check_hooks(spec: PluginSpec, report: ConfigReport) -> None:
    """`hooks:` and the hooks' signatures against the class a class factory builds (a
    function factory is not run)."""
    from antler.chain import hook_signature_problems, implemented_hooks
    from antler.plugin_api.reflection import resolve_object

    target = resolve_object(spec.factory, f"factory of plugin {spec.name!r}")
    if not isinstance(target, type):
        return
    from langchain.agents.middleware import AgentMiddleware

    if not issubclass(target, AgentMiddleware):
        return
    where = f"{spec.provenance}: plugin {spec.name!r}"
    report.problems.extend(f"{where}: {spec.factory}: {problem}"
                           for problem in hook_signature_problems(target))
    if spec.hooks is None:
        return
    actual = implemented_hooks(target)
    undeclared = [hook for hook in actual if hook not in spec.hooks]
    unimplemented = [hook for hook in spec.hooks if hook not in actual]
    if undeclared:
        report.problems.append(
            f"{where}: {spec.factory} implements {undeclared}, which its manifest's `hooks:` "
            f"{list(spec.hooks)} leaves out; add them (the chain compiler plans graph nodes "
            "from the declaration, and building the chain fails)")
    if unimplemented:
        report.warnings.append(
            f"{where}: `hooks:` declares {unimplemented}, which {spec.factory} does not "
            "implement; remove them from `hooks:`")


def _check_extensions(config: OperatorConfig, report: ConfigReport) -> None:
    """Import every configured extension class and bind its `config:` to the constructor."""
    from antler.chain import (
        constructor_problems,
        hook_signature_problems,
        middleware_name_problem,
    )
    from antler.chain.config import extension_ordering
    from antler.errors import ReflectionError
    from antler.plugin_api.reflection import instantiate, resolve_middleware_class

    for index, entry in enumerate(config.extensions.middlewares):
        _, _, required, kwargs = extension_ordering(entry)
        path = entry if isinstance(entry, str) else entry.use
        key = ("extensions", "middlewares", index)
        try:
            cls = resolve_middleware_class(path)
        except ReflectionError as exc:
            if required:
                report.problems.append(f"{config.locate(*key)}: {_dotted(key)}: {exc}")
            else:
                report.warnings.append(f"{config.locate(*key)}: {_dotted(key)}: optional "
                                       f"extension will be left out: {exc}")
            continue
        for problem in hook_signature_problems(cls):
            report.problems.append(f"{config.locate(*key)}: {_dotted(key)}: {path}: {problem}")
        problems = constructor_problems(cls, kwargs)
        for argument, message in problems:
            # An unknown argument is a key under `config:`; a missing one belongs to
            # `config:`, or to the entry when it has none.
            at = (*key, "config", argument) if argument else (
                (*key, "config") if config.was_set(*key, "config") else key)
            report.problems.append(f"{config.locate(*at)}: {_dotted(at)}: {message}")
        if not problems:
            # Constructed as the build constructs it: a bad value is found now, not in a run.
            at = (*key, "config") if config.was_set(*key, "config") else key
            fault: str | None
            try:
                fault = middleware_name_problem(instantiate(cls, path, kwargs))
                fault = fault and f"{path}: {fault}"
            except ReflectionError as exc:
                fault = str(exc)
            if fault:
                report.problems.append(f"{config.locate(*at)}: {_dotted(at)}: {fault}")


def _check_tools(config: OperatorConfig, report: ConfigReport) -> None:
    """Import and build every `tools:` entry, for each chain that names it."""
    from antler.errors import BuildError
    from antler.runtime.configtools import load_config_tools

    for index, entry in enumerate(config.tools):
        for chain in entry.chains:
            try:
                load_config_tools([entry], chain)
            except BuildError as exc:
                message = str(exc).replace("tools[0]", f"tools[{index}]", 1)
                _add_once(report.problems, f"{config.locate('tools', index)}: {message}")
                break


def _dotted(key: tuple[str | int, ...]) -> str:
    from antler.plugin_api.diagnostics import dotted

    return dotted(key)


def _add_once(messages: list[str], message: str, key: str | None = None) -> None:
    """Append `message` unless one with the same `key` (default: itself) is there."""
    key = message if key is None else key
    if not any(key in held for held in messages):
        messages.append(message)


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
    write_or_echo(text, output, "the config schema")


@config.command("migrate")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the Antler config here (default: standard output).")
@click.option("--extensions", "extensions_file", type=click.Path(exists=True, dir_okay=False),
              help="DeerFlow's extensions_config.json, for its MCP servers and skill switches.")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@manifest_option
@json_option
@pass_session
@click.pass_context
def migrate(ctx: click.Context, session: Session, file: str, output: str | None,
            extensions_file: str | None, force: bool, as_json: bool) -> None:
    """Rewrite DeerFlow's config.yaml FILE as an Antler operator config.

    Every DeerFlow key is reported, with its line, as mapped (to which Antler
    key), dropped (why: it configures something outside the middleware chain,
    or Antler does it another way) or unmapped (what to do by hand). Sections
    of plugins that are not installed are reported, not written, so the result
    passes `antler config check` here; the command checks that before writing.
    The report goes to stderr, the config to --output or stdout.

    \b
    JSON (--json): an object with
      config   the Antler config (also written to --output when given)
      notes    [{where, source, outcome: mapped|dropped|unmapped, target, why}]
      counts   {mapped, dropped, unmapped}
    """
    import yaml

    from antler.chain.config import parse_config_document, schema_sections
    from antler.deerflow import carry_comments, load_extensions, migrate_deerflow
    from antler.errors import ConfigError
    from antler.parselimits import read_bounded
    from antler.plugin_api.yamlsource import YamlDocument, YamlSyntaxError, load_yaml_file

    try:
        doc = load_yaml_file(file)
    except YamlSyntaxError as exc:
        raise CliError(str(exc)) from None
    if not isinstance(doc.data, dict):
        raise CliError(f"{file}:1:1: a DeerFlow config is a mapping of sections")
    extensions = None
    if extensions_file is not None:
        try:
            json_text = read_bounded(Path(extensions_file))
            extensions = load_extensions(json_text, extensions_file)
        except (OSError, ValueError) as exc:
            raise CliError(str(exc)) from None
        extensions = _with_lines(extensions, json_text, extensions_file)
    registry = session.registry()
    migration = migrate_deerflow(doc, schema_sections(registry), extensions=extensions,
                                 extensions_source=extensions_file or "extensions_config.json")
    try:
        parse_config_document(YamlDocument(data=migration.config, source=file), registry)
    except ConfigError as exc:
        raise CliError(f"the migrated config does not validate (please report this): {exc}") \
            from None
    body = yaml.safe_dump(migration.config, sort_keys=False, allow_unicode=True)
    with contextlib.suppress(OSError, ValueError):  # a courtesy: written either way
        body = carry_comments(body, read_bounded(Path(file)), doc, migration.notes)
    text = (f"# Antler operator config, migrated from {Path(file).name} by "
            "`antler config migrate`.\n" + body)
    if output is not None:
        target = Path(output)
        if target.exists() and not force:
            raise CliError(f"{output} exists; pass --force to overwrite it")
        write_file(target, text, "the migrated config")
    counts = {outcome: migration.count(outcome)
              for outcome in ("mapped", "dropped", "unmapped")}
    if as_json:
        print_json({"config": migration.config, "notes": [n.as_dict() for n in migration.notes],
                    "counts": counts})
        return
    for note in migration.notes:
        click.echo(note.render(), err=True)
    click.echo(f"{counts['mapped']} mapped, {counts['dropped']} dropped, "
               f"{counts['unmapped']} unmapped" + (f"; wrote {output}" if output else ""),
               err=True)
    if output is None:
        click.echo(text, nl=False)


def _with_lines(data: dict[str, Any], text: str, source: str) -> Any:
    """The parsed JSON as a document with line numbers (JSON is YAML), else `data`."""
    from antler.plugin_api.yamlsource import YamlSyntaxError, load_yaml

    try:
        doc = load_yaml(text, source)
    except (YamlSyntaxError, ValueError):
        return data
    return doc if doc.data == data else data


def _deerflow_file(file: str) -> str | None:
    """One message when `file` is a DeerFlow config, not an Antler one; else None."""
    from antler.deerflow import deerflow_signs
    from antler.plugin_api.yamlsource import YamlSyntaxError, load_yaml_file

    try:
        data = load_yaml_file(file).data
    except (OSError, YamlSyntaxError, ValueError):
        return None  # the check itself reports an unreadable file
    signs = deerflow_signs(data)
    if not signs:
        return None
    return (f"{file}: this is a DeerFlow config ({', '.join(signs)}), not an Antler one; run "
            f"`antler config migrate {file} -o antler.yaml` (add `--extensions "
            "extensions_config.json` for its MCP servers and skills), then check the result")


_LOCATED = re.compile(r"^(?P<file>[^\n]+?):(?P<line>\d+):(?P<column>\d+): "
                      r"(?:(?P<key>[\w.\-\[\]\"]+): )?(?P<message>.*)$", re.DOTALL)
_FILE_ONLY = re.compile(r"^(?P<file>[^\n:]+): (?P<message>.*)$", re.DOTALL)


def problem_object(text: str, file: str) -> dict[str, Any]:
    """One `config check` error as {file, line, column, key, message, text}."""
    found = _LOCATED.match(text)
    if found:
        return {"file": found["file"], "line": int(found["line"]),
                "column": int(found["column"]), "key": found["key"],
                "message": found["message"], "text": text}
    bare = _FILE_ONLY.match(text)
    return {"file": bare["file"] if bare else file, "line": None, "column": None, "key": None,
            "message": bare["message"] if bare else text, "text": text}


def _load_what_can_be_loaded(session: Session, file: str) -> tuple[OperatorConfig, list[str]]:
    """The config at `file`, and the load errors of the sections left out to get it.

    A section that fails validation stops the load; to report every problem at
    once, the sections the errors name are left out and the rest loaded again
    (so their own problems, and the later checks, are found too). Raises the
    first error when the file cannot be read or an error names no section.
    """
    from antler.chain.config import parse_config_document
    from antler.errors import ConfigError
    from antler.plugin_api.yamlsource import YamlDocument, load_yaml_file

    try:
        return session.config(file), []
    except ConfigError as exc:
        first = exc
    try:
        doc = load_yaml_file(file)
    except Exception:
        raise first from None
    if not isinstance(doc.data, dict):
        raise first
    data = dict(doc.data)
    problems: list[str] = []
    error: ConfigError = first
    for _ in range(len(data) + 1):
        lines = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
        keys = {found["key"].split(".")[0].split("[")[0] for line in lines
                if (found := _LOCATED.match(line)) and found["key"]}
        if not lines or not keys or not keys <= set(data):
            raise first
        problems += [line for line in lines if line not in problems]
        for key in keys:
            del data[key]
        try:
            config = parse_config_document(
                YamlDocument(data=data, source=doc.source, marks=doc.marks), session.registry())
        except ConfigError as exc:
            error = exc
            continue
        return config, problems
    raise first
