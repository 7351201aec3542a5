"""`antler memory ...`: the users' memory in the shared store; importing earlier JSON files.

The memory plugin contributes this command through the `antler.commands`
entry point group, so the core CLI lists it without importing the plugin.
"""

from __future__ import annotations

from pathlib import Path

import click

from antler.plugin_api import (
    CommandError,
    CommandSession,
    config_option,
    console,
    home_option,
    json_option,
    jsonsource,
    pass_session,
    print_json,
)

# The memory library (and LangChain under it) is imported by the commands that use it, so
# `antler memory --help` loads none of it.


@click.group()
def memory() -> None:
    """What agents remember about each user, kept in the shared store."""


def _json_files(source: str, base: Path) -> list[tuple[Path, str]]:
    """(file, user id) pairs: every `users/*/memory.json` under `base` for 'auto', else the
    one file (its user from the file, else from its directory)."""
    from antler.plugins._lib.memory import MEMORY_FILENAME

    if source == "auto":
        return [(path, path.parent.name)
                for path in sorted((base / "users").glob(f"*/{MEMORY_FILENAME}"))]
    path = Path(source)
    if not path.is_file():
        raise CommandError(f"{path} is not a file: give a memory.json of an earlier version, or "
                       "'auto' for every users/*/memory.json under the base directory")
    try:
        user = jsonsource.loads(path.read_text(encoding="utf-8")).get("user_id")
    except (ValueError, UnicodeDecodeError, AttributeError):
        user = None
    return [(path, user if isinstance(user, str) and user else path.parent.name)]


@memory.command("import")
@click.argument("source", metavar="FILE|auto")
@home_option
@config_option
@json_option
@pass_session
def import_memory(session: CommandSession, source: str, home: str | None, config_path: str | None,
                  as_json: bool) -> None:
    """Copy the memory.json files of earlier versions into the shared store.

    FILE is one user's memory.json (the user is the file's `user_id`, else its
    directory's name); 'auto' imports every users/*/memory.json under the base
    directory. Facts already in the store are kept as they are; the files are
    left in place.

    \b
    JSON (--json): a list of objects with
      user      the user id
      file      the file read
      facts     facts in the file
      imported  facts that were new to the store
    """

    from antler.plugins._lib.memory import MemoryFile, MemoryStore

    store, base = session.open_store(config_path, home)
    try:
        memory_store = MemoryStore(store, max_facts=10_000)
        report = []
        for path, user in _json_files(source, base):
            facts = MemoryFile.read(path)
            imported = memory_store.import_facts(user, facts)
            report.append({"user": user, "file": str(path), "facts": len(facts),
                           "imported": imported})
    finally:
        store.close()
    if as_json:
        print_json(report)
        return
    if not report:
        console().print(f"no memory files under {base / 'users'}")
    for row in report:
        console().print(f"{row['user']}: {row['imported']} of {row['facts']} facts imported "
                        f"from {row['file']}")


# Each command stacks the options the memory commands share (click's layout).
@memory.command("show")
@click.option("--user", "user_id", default="default", show_default=True, help="User id.")
@home_option
@config_option
@json_option
@pass_session
def show_memory(session: CommandSession, user_id: str, home: str | None, config_path: str | None,
                as_json: bool) -> None:
    """The facts remembered about one user, oldest first.

    \b
    JSON (--json): a list of objects with
      content, source_thread, created_at, updated_at, agent_name, id
    """
    from dataclasses import asdict

    from antler.plugins._lib.memory import MemoryStore

    store, _base = session.open_store(config_path, home)
    try:
        facts = MemoryStore(store).facts(user_id)
    finally:
        store.close()
    if as_json:
        print_json([asdict(fact) for fact in facts])
        return
    from rich.text import Text

    out = console()
    for fact in facts:  # Text, not markup: a fact may hold square brackets
        out.print(Text.assemble(f"- {fact.content}  ", (
            f"({fact.source_thread or '?'}, {fact.updated_at})", "dim")))
    if not facts:
        out.print(f"nothing remembered about user {user_id!r}")
