"""`antler threads ...`: the threads of a checkpoint database, their size, pruning, deletion."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from antler.plugin_api.commands import config_option, home_option, json_option

from . import AntlerGroup
from .output import console, print_json, table
from .session import Session

if TYPE_CHECKING:
    from antler.runtime.storage import ThreadAdmin


def user_option(f: Any) -> Any:
    return click.option("--user", "user_id", default=None,
                        help="Only this user's threads (and refuse another user's).")(f)


def store_options(f: Any) -> Any:
    """--home and --config: the base directory and the operator config naming the database."""
    return config_option(home_option(f))


def _check_ids(thread_ids: tuple[str, ...] | list[str], user_id: str | None = None) -> None:
    """Refuse an id no thread can have (`..`, a path, a control character, too long) with
    the rule it breaks, before the database is asked (ids become directory names)."""
    from antler.plugin_api.paths import validate_id

    for thread_id in thread_ids:
        validate_id("thread id", thread_id)
    if user_id is not None:
        validate_id("user id", user_id)


@contextmanager
def _admin(home: str | None, config_path: str | None) -> Iterator[ThreadAdmin | None]:
    """The thread admin of the checkpoint database `storage.checkpointer` names (the
    SQLite file under the base directory unless configured); None when there is none."""
    from antler.plugin_api.paths import resolve_base
    from antler.runtime.storage import (
        CHECKPOINT_FILENAME,
        ThreadAdmin,
        ensure_directory,
        resolve_backend,
    )

    checkpointer: Any = "sqlite"
    if config_path is not None:
        storage = Session().config(config_path).storage
        checkpointer = resolve_backend(storage.checkpointer)
        home = home or storage.base_dir
    base = resolve_base(home)
    if base.exists():
        ensure_directory(base)  # a file here: one clear error
    if checkpointer == "sqlite" and not (base / CHECKPOINT_FILENAME).exists():
        yield None  # nothing has run here yet
        return
    with ThreadAdmin(base, checkpointer) as admin:
        yield admin


@click.group(cls=AntlerGroup)
def threads() -> None:
    """The threads of a checkpoint database: list, show, prune old checkpoints, delete.

    The database is the SQLite file under the base directory, or the one
    `storage.checkpointer` of --config names (a Postgres URL, for instance).
    """


@threads.command("list")
@store_options
@user_option
@json_option
def list_threads(home: str | None, config_path: str | None, user_id: str | None,
                 as_json: bool) -> None:
    """Every thread with its owner, checkpoints and size.

    \b
    JSON (--json): a list of objects with
      thread       thread id
      owner        the user who created it (null for a thread older than owners)
      created_at   when it was created (ISO 8601), or null
      checkpoints  how many checkpoints it keeps
      bytes        their size in the database
    """
    _check_ids([], user_id)
    with _admin(home, config_path) as admin:
        infos = admin.threads(user_id) if admin is not None else []
    if as_json:
        print_json([info.as_json() for info in infos])
        return
    listing = table("thread", "owner", "created", "checkpoints", "size")
    for info in infos:
        listing.add_row(info.thread_id, info.owner or "-", info.created_at or "-",
                        str(info.checkpoints), _size(info.bytes))
    console().print(listing)


@threads.command("show")
@click.argument("thread_id")
@store_options
@user_option
@click.option("--hidden", "show_hidden", is_flag=True,
              help="Also list the messages plugins injected (reminders, summaries), "
                   "marked [hidden].")
@json_option
def show_thread(thread_id: str, home: str | None, config_path: str | None,
                user_id: str | None, show_hidden: bool, as_json: bool) -> None:
    """One thread: owner, size and its conversation.

    Messages plugins injected (the date reminder, a summary, a todo reminder)
    are not the conversation and are left out; --hidden lists them too, marked.

    \b
    JSON (--json): the keys of `threads list`, plus
      messages     [{type, content, hidden}] of the latest checkpoint (content as
                   text; hidden is true for an injected message, listed only
                   with --hidden)
    """
    from antler.contracts.messages import is_hidden
    from antler.runtime.storage import StorageError

    _check_ids([thread_id], user_id)
    with _admin(home, config_path) as admin:
        if admin is None:
            raise StorageError(f"there are no threads under {home or 'the base directory'}")
        info = admin.info(thread_id, user_id)
        messages: list[dict[str, Any]] = [
            {"type": getattr(m, "type", "?"), "content": _text(m), "hidden": is_hidden(m)}
            for m in admin.messages(thread_id)]
    if not show_hidden:
        messages = [message for message in messages if not message["hidden"]]
    if as_json:
        print_json({**info.as_json(), "messages": messages})
        return
    click.echo(f"thread {info.thread_id}: owner {info.owner or '-'}, created "
               f"{info.created_at or '-'}, {info.checkpoints} checkpoints, {_size(info.bytes)}")
    for message in messages:
        mark = " [hidden]" if message["hidden"] else ""
        click.echo(f"  {message['type']:>6}{mark}: {_short(message['content'])}")


@threads.command("prune")
@click.argument("thread_ids", nargs=-1)
@click.option("--keep", default=1, show_default=True, type=int,
              help="Checkpoints to keep per thread (the latest holds the whole state).")
@store_options
@json_option
def prune_threads(thread_ids: tuple[str, ...], keep: int, home: str | None,
                  config_path: str | None, as_json: bool) -> None:
    """Drop all but the last --keep checkpoints of THREAD_IDS (default: every thread), then
    vacuum the database. Threads resume as before; only older history goes.

    \b
    JSON (--json): {removed: checkpoints removed, freed: bytes the file shrank by
    (null for Postgres, whose own vacuum reuses the space)}
    """
    _check_ids(thread_ids)
    with _admin(home, config_path) as admin:
        removed, freed = admin.prune(keep, list(thread_ids) or None) if admin else (0, 0)
    if as_json:
        print_json({"removed": removed, "freed": freed})
    else:
        shrank = ("Postgres reuses the space at its next vacuum" if freed is None
                  else f"the database shrank by {_size(freed)}")
        click.echo(f"removed {removed} checkpoints; {shrank}")


@threads.command("delete")
@click.argument("thread_id")
@store_options
@user_option
@click.option("--yes", "-y", is_flag=True,
              help="Delete without asking (needed when standard input is not a terminal).")
@json_option
def delete_thread(thread_id: str, home: str | None, config_path: str | None,
                  user_id: str | None, yes: bool, as_json: bool) -> None:
    """Delete a thread: its checkpoints, its owner record and its files.

    Asks first, naming the thread's owner and size; --yes does not ask. Without
    a terminal to ask on (a script, a pipe) --yes is required. Answering no
    deletes nothing and exits 1.

    \b
    JSON (--json): {deleted: thread id}
    """
    import sys

    from antler.runtime.storage import StorageError

    from . import CliUsageError
    from .output import confirm

    _check_ids([thread_id], user_id)
    with _admin(home, config_path) as admin:
        if admin is None:
            raise StorageError(f"there is no thread {thread_id!r} to delete")
        info = admin.info(thread_id, user_id)  # a missing or foreign thread: said first
        if not yes:
            if not sys.stdin.isatty():
                raise CliUsageError(f"deleting thread {thread_id!r} cannot be undone, and "
                                    "there is no terminal to ask on: pass --yes to delete it")
            owner = f"owner {info.owner}" if info.owner else "no owner"
            if not confirm(f"Delete thread {thread_id!r} ({owner}, {info.checkpoints} "
                           f"checkpoints, {_size(info.bytes)}) and its files? This "
                           "cannot be undone"):
                click.echo(f"kept thread {thread_id}: nothing was deleted", err=True)
                raise click.exceptions.Exit(1)
        admin.delete(thread_id, user_id)
    if as_json:
        print_json({"deleted": thread_id})
    else:
        click.echo(f"deleted thread {thread_id}")


@threads.command("export")
@click.argument("thread_id", metavar="THREAD")
@click.option("--format", "fmt", type=click.Choice(["script"]), default="script",
              show_default=True, help="What to write: a recording in the scripted format.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write to this file (default: standard output).")
@store_options
@click.option("--user", "user_id", default="default", show_default=True,
              help="The user who owns the thread.")
def export_thread(thread_id: str, fmt: str, output: str | None, home: str | None,
                  config_path: str | None, user_id: str) -> None:
    """Write THREAD's conversation, from its checkpoint history, as a recording that
    `antler replay` plays (secrets redacted as `record.redact` says).

    Give the --config the thread ran with: its chain reads the history.
    """
    from pathlib import Path

    from antler.replay.export import export_thread as export
    from antler.replay.recording import dump_recording, save_recording
    from antler.runtime.agent import create_agent
    from antler.runtime.storage import StorageError

    _check_ids([thread_id], user_id)
    with _admin(home, config_path) as admin:
        if admin is None:
            raise StorageError(f"there is no thread {thread_id!r} to export")
        admin.info(thread_id, user_id)
    session = Session()
    config = session.config(config_path)
    with create_agent(config, registry=session.registry(),
                      base_dir=home or config.storage.base_dir, record=False) as agent:
        recording = export(agent, thread_id, user_id=user_id)
    if not recording.inputs:
        raise StorageError(f"thread {thread_id!r} has no saved conversation to export")
    if output is None:
        click.echo(dump_recording(recording), nl=False)
    else:
        save_recording(recording, Path(output))
        click.echo(f"wrote {output}: {len(recording.inputs)} run(s), "
                   f"{len(recording.turns)} model call(s)", err=True)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KB"
    return f"{count / (1024 * 1024):.1f} MB"


def _text(message: Any) -> str:
    content = getattr(message, "content", "")
    return content if isinstance(content, str) else str(content)


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["threads"]
