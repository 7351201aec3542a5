"""`antler doctor`: is this installation ready to run agents, and how isolated are they?

Four checks, each ok, warn or fail: the operator config loads and validates;
the plugins load and the lead chain resolves; no plugin's entry point or
factory is slow to import (past `$ANTLER_SLOW_IMPORT_SECONDS`, 1 s by default:
the slow one is named, since every command pays it); the sandbox provider the
config chooses is the one expected (bwrap isolates commands, local does not)
and a command really runs in it. Exit code 1 when any check fails.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from antler.plugin_api.commands import config_option, json_option

from .output import console, print_json
from .session import Session, manifest_option, pass_session

if TYPE_CHECKING:
    from antler.chain import ChainPlan
    from antler.chain.config import OperatorConfig

_MARKS = {"ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "red")}


def _check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


def check_config(session: Session, config_path: str | None
                 ) -> tuple[dict[str, str], OperatorConfig | None]:
    from antler.errors import AntlerError

    try:
        config = session.config(config_path)
    except AntlerError as error:
        return _check("config", "fail", str(error)), None
    return _check("config", "ok", f"{config.source} is valid"), config


def check_plugins(session: Session, config: OperatorConfig) -> dict[str, str]:
    from antler.errors import AntlerError

    from .chain import load_diagnostics, plan_problems, problem_text

    try:
        plan = session.plan(config, "lead", {})
    except AntlerError as error:
        return _check("plugins", "fail", str(error))
    notes = [row["message"] for row in load_diagnostics(plan.registry, config)]
    notes += [problem_text(row) for row in plan_problems(plan)]
    notes += _hook_signature_notes(plan)
    if notes:
        return _check("plugins", "warn", "; ".join(notes))
    return _check("plugins", "ok", f"{len(plan.order)} plugins in the lead chain, all loaded")


def _hook_signature_notes(plan: ChainPlan) -> list[str]:
    """The hooks LangChain could not call, of each participant built from a class (a
    factory that does not import is the imports check's and the plan's to name)."""
    from antler.chain import hook_signature_problems
    from antler.errors import ReflectionError
    from antler.plugin_api.reflection import resolve_object

    notes = []
    for name in plan.order:
        spec = plan.resolution.placements[name].spec
        try:
            target = resolve_object(spec.factory)
        except ReflectionError:
            continue
        if isinstance(target, type):
            notes += [f"plugin {name!r} [{spec.provenance}]: {problem}"
                      for problem in hook_signature_problems(target)]
    return notes


def check_imports(session: Session, config: OperatorConfig) -> dict[str, str]:
    """How long the plugins took to import: entry points (at discovery) and the lead
    chain's factories; the slow ones are named."""
    from antler.chain import factory_import_failures
    from antler.errors import AntlerError
    from antler.plugin_api.registry import slow_import_threshold

    registry = session.registry()
    with contextlib.suppress(AntlerError):  # the plugins check says why it does not plan
        factory_import_failures(session.plan(config, "lead", {}))
    timings = sorted(registry.import_timings, key=lambda timing: -timing.seconds)
    threshold = slow_import_threshold()
    slow = [timing for timing in timings if timing.seconds > threshold]
    if slow:
        return _check("imports", "warn", "; ".join(map(str, slow)) + f" (threshold "
                      f"{threshold:.2f} s): every command that loads them pays it")
    slowest = f"; slowest: {timings[0]}" if timings else ""
    return _check("imports", "ok", f"{len(timings)} plugin imports timed, none past "
                                   f"{threshold:.2f} s{slowest}")


def sandbox_section(session: Session, config: OperatorConfig) -> Any:
    """The config's ``sandbox:`` section, or its defaults when the config has none."""
    from antler.chain.config import section_model, section_owners

    section = config.section("sandbox")
    owners = section_owners(session.registry()).get("sandbox")
    return section if section is not None or not owners else section_model(owners[0])()


def check_sandbox(section: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """The provider the config chooses, and one real command run in it."""
    from antler.runtime.sandbox.choice import describe_sandbox, sandbox_line

    report = describe_sandbox(section)
    if report["error"]:
        return _check("sandbox", "fail", report["error"]), report
    report["command"] = _try_command(section)
    line = sandbox_line(report).removeprefix("sandbox: ")
    if not report["command"]["ok"]:
        return _check("sandbox", "fail", f"{line}; a test command failed: "
                                         f"{report['command']['detail']}"), report
    if report["isolated"] is False:
        return _check("sandbox", "warn", f"{line}; shell commands are NOT isolated from the "
                                         "host"), report
    return _check("sandbox", "ok", line), report


def _try_command(section: Any) -> dict[str, Any]:
    """Run `echo` in a throwaway thread of the chosen provider."""
    from antler.errors import AntlerError
    from antler.plugin_api.paths import PathLayout
    from antler.runtime.sandbox.choice import load_configured_provider

    with tempfile.TemporaryDirectory(prefix="antler-doctor-") as base:
        try:
            provider = load_configured_provider(section)
        except AntlerError as error:
            return {"ok": False, "detail": str(error)}
        try:
            paths = PathLayout(Path(base)).thread("doctor", "check")
            sandbox = provider.get(provider.acquire(paths))
            result = sandbox.execute_command("echo sandbox-ok", timeout=30)
        except (AntlerError, OSError) as error:
            return {"ok": False, "detail": str(error)}
        finally:
            provider.shutdown()
    ok = result.ok and result.stdout.strip() == "sandbox-ok"
    return {"ok": ok, "detail": "ran a command" if ok else
            f"exit code {result.exit_code}: {(result.stderr or result.stdout).strip()[:300]}"}


@click.command("doctor")
@config_option
@manifest_option
@json_option
@pass_session
def doctor(session: Session, config_path: str | None, as_json: bool) -> None:
    """Check the config, the plugins and the sandbox; say which provider runs commands and why.

    \b
    JSON (--json): an object with
      ok       false when any check failed
      checks   [{name ("config" | "plugins" | "imports" | "sandbox" | "model" |
               "storage" | "mcp" | "skills"), status ("ok" | "warn" | "fail"),
               detail}]: besides the chain, one line per configured model (provider
               package, API key), the checkpointer (Postgres reached within 3 s),
               each MCP server (started), the skills
      sandbox  {requested, require_isolation, provider, reason, isolated,
               network, warning, error, command {ok, detail}} (null when the
               config did not load)
    """
    config_check, config = check_config(session, config_path)
    checks, sandbox = [config_check], None
    if config is not None:
        checks.append(check_plugins(session, config))
        checks.append(check_imports(session, config))
        sandbox_check, sandbox = check_sandbox(sandbox_section(session, config))
        checks.append(sandbox_check)
        from .doctor_run import run_checks

        checks += run_checks(config)
    ok = all(check["status"] != "fail" for check in checks)
    if as_json:
        print_json({"ok": ok, "checks": checks, "sandbox": sandbox})
    else:
        from rich.text import Text

        out = console()
        for check in checks:
            mark, colour = _MARKS[check["status"]]
            out.print(Text.assemble((f"{mark:>4}", f"bold {colour}"),
                                    f"  {check['name']}: {check['detail']}"))
    if not ok:
        raise click.exceptions.Exit(1)
