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
@json_option
def delete_thread(thread_id: str, home: str | None, config_path: str | None,
                  user_id: str | None, as_json: bool) -> None:
    """Delete a thread: its checkpoints, its owner record and its files.

    \b
    JSON (--json): {deleted: thread id}
    """
    from antler.runtime.storage import StorageError

    with _admin(home, config_path) as admin:
        if admin is None:
            raise StorageError(f"there is no thread {thread_id!r} to delete")
        admin.delete(thread_id, user_id)
    if as_json:
        print_json({"deleted": thread_id})
    else:
        click.echo(f"deleted thread {thread_id}")


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
