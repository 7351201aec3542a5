"""`antler doctor`'s checks of what a run needs beyond the chain itself.

Each returns one line per thing checked (`{name, status, detail}`, status ok,
warn or fail), and a failing line says what to do:

* `check_models`: every configured model (`models.default`, `subagent`,
  `title`, `memory`, every `models.named` entry and every plugin section's
  `model`) has its provider package installed and its API key set;
* `check_storage`: the checkpointer is reachable (a Postgres URL is connected
  to with a short timeout; the SQLite directory is writable);
* `check_mcp`: every enabled MCP server starts and lists its tools;
* `check_skills`: every installed skill parses.

The sandbox provider is checked by `antler.cli.doctor.check_sandbox`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from antler.chain.config import OperatorConfig

__all__ = ["check_mcp", "check_models", "check_skills", "check_storage", "run_checks"]

STORAGE_TIMEOUT = 3
"""Seconds `doctor` waits for a Postgres server to answer."""


def _line(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


def _model_references(config: OperatorConfig) -> dict[str, str]:
    """Where each model reference is set -> the reference."""
    models = config.models
    found = {f"models.{key}": value for key in ("default", "subagent", "title", "memory")
             if isinstance(value := getattr(models, key), str)}
    found.update({f"models.named.{name}": name for name in models.named})
    for key in sorted(config.sections):
        reference = getattr(config.section(key), "model", None)
        if isinstance(reference, str):
            found[f"{key}.model"] = reference
    return found


def check_models(config: OperatorConfig) -> list[dict[str, str]]:
    """One line per configured model reference: can a run build it?"""
    from antler.chain.modelrefs import model_reference_problems
    from antler.errors import AntlerError
    from antler.runtime.models import ModelCatalog
    from antler.runtime.models.catalog import is_class_path

    unknown = model_reference_problems(config)
    catalog = ModelCatalog(config.models.named)
    lines = [_line("model", "fail", problem) for problem in unknown]
    checked: set[str] = set()
    for where, reference in _model_references(config).items():
        if reference in checked or any(f" {where}: " in f" {p}" for p in unknown):
            continue
        checked.add(reference)
        try:
            catalog.check(reference)
            entry = config.models.named.get(reference)
            if entry is not None and is_class_path(entry.use):
                _import_module(entry.use.split(":")[0], f"models.named.{reference}.use")
        except AntlerError as error:
            lines.append(_line("model", "fail", f"{where}: {error}"))
            continue
        lines.append(_line("model", "ok", f"{where}: {reference} can be built"))
    return lines


def _import_module(module: str, where: str) -> None:
    import importlib.util

    from antler.errors import ConfigError

    top = module.split(".")[0]
    if importlib.util.find_spec(top) is None:
        raise ConfigError(f"{where}: the module {module!r} is not installed; install the "
                          f"package that provides it (`pip install {top.replace('_', '-')}`)")


def check_storage(config: OperatorConfig) -> list[dict[str, str]]:
    """Whether the checkpointer a run opens is reachable."""
    from antler.errors import AntlerError
    from antler.runtime.storage import resolve_backend

    storage = config.storage
    try:
        backend = resolve_backend(storage.checkpointer)
    except AntlerError as error:
        return [_line("storage", "fail", str(error))]
    if backend == "none":
        return [_line("storage", "warn", "storage.checkpointer is 'none': threads keep no "
                                         "history and paused runs cannot be resumed")]
    if backend == "memory":
        return [_line("storage", "ok", "in memory (this process only)")]
    if isinstance(backend, str) and backend.startswith(("postgresql://", "postgres://")):
        return [_postgres_line(backend)]
    base = Path(os.path.expanduser(str(storage.base_dir or os.environ.get("ANTLER_HOME")
                                        or ".antler"))).absolute()
    probe = base if base.exists() else next((p for p in base.parents if p.exists()), base)
    if not os.access(probe, os.W_OK):
        return [_line("storage", "fail", f"SQLite under {base}: {probe} is not writable; set "
                                         "storage.base_dir (or ANTLER_HOME) to a writable "
                                         "directory")]
    return [_line("storage", "ok", f"SQLite under {base}")]


def _postgres_line(url: str) -> dict[str, str]:
    shown = _without_password(url)
    try:
        import psycopg
    except ImportError:
        return _line("storage", "fail", f"{shown}: the Postgres driver is not installed; run "
                                        "`pip install 'psycopg[binary]' langgraph-checkpoint-"
                                        "postgres`")
    try:
        with psycopg.connect(url, connect_timeout=STORAGE_TIMEOUT) as connection:
            connection.execute("SELECT 1")
    except Exception as error:  # any driver error is the operator's to fix
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return _line("storage", "fail", f"{shown} is not reachable within {STORAGE_TIMEOUT}s "
                                        f"({first}); start the server, fix the URL or the "
                                        "credentials, or set storage.checkpointer: sqlite")
    return _line("storage", "ok", f"{shown} answers")


def _without_password(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def check_mcp(config: OperatorConfig) -> list[dict[str, str]]:
    """Start every enabled MCP server, as a run does, and stop it again."""
    from antler.errors import BuildError
    from antler.runtime.mcp import start_sessions

    if not config.mcp_servers:
        return []
    try:
        sessions = start_sessions(config, strict=False)
    except BuildError as error:  # the `mcp` extra is not installed
        return [_line("mcp", "fail", str(error))]
    try:
        lines = []
        for name, status in sessions.status.items():
            if status.state == "ready":
                lines.append(_line("mcp", "ok", f"{name}: started, {len(status.tools)} tools"))
            elif status.state == "disabled":
                lines.append(_line("mcp", "ok", f"{name}: disabled"))
            else:
                lines.append(_line("mcp", "fail", f"{name}: {status.reason}; fix "
                                   f"mcp_servers.{name} (`antler mcp list` shows its state)"))
        return lines
    finally:
        sessions.close()


def check_skills(config: OperatorConfig) -> list[dict[str, str]]:
    """Every installed skill parses."""
    from antler.runtime.skills import SkillsRegistry

    registry = SkillsRegistry.from_settings(config.skills)
    problems = registry.problems()
    lines = [_line("skills", "fail", f"{problem}; fix its SKILL.md front matter")
             for problem in problems]
    if not problems:
        lines.append(_line("skills", "ok", f"{len(registry.skills())} skill(s) parse"))
    return lines


def run_checks(config: OperatorConfig) -> list[dict[str, str]]:
    """Every check of this module, in order."""
    return [*check_models(config), *check_storage(config), *check_mcp(config),
            *check_skills(config)]
