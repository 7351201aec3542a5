"""Read marks: what the agent last read of a file, recorded on the read's `ToolMessage`.

A mark is ``additional_kwargs["antler_read_mark"] = {"path": ..., "sha256": ...,
"sig": ...}`` on a successful ``read_file`` result: the canonical virtual path
of the file (``/mnt/user-data/...``, whatever spelling the model used), the
SHA-256 of its whole content when it was read, and the server's signature over
both, the user, the thread and the tool call (`signing.MarkSigner`). Marks
live on messages only, so whatever drops a message (summarization, a state
edit) drops its mark; a mark without a valid signature (a caller's forgery, a
mark copied from another thread or tool call) grants nothing.

Files are inspected on the host, through the thread's directories
(`antler.runtime.paths`): that is where the local sandbox keeps them and where a
mounting sandbox exposes them. They are opened beneath the thread's root
(`antler.plugin_api.confined`), as the sandbox's own file tools open them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from langgraph.types import Command

from antler.plugin_api import AntlerError, PathLayout, confined, thread_id_of

from .signing import MarkSigner

__all__ = [
    "MARK_KEY",
    "Target",
    "file_state",
    "latest_mark",
    "locate",
    "stamp",
]

MARK_KEY = "antler_read_mark"
"""`ToolMessage.additional_kwargs` key of a read mark."""

_CHUNK = 1 << 16

FileState = Literal["missing", "file", "uninspectable"]


@dataclass(frozen=True)
class Target:
    """A file a tool call names, resolved inside the run's thread."""

    virtual: str
    """Canonical virtual path: the key marks are recorded under."""
    place: confined.Place
    """Where the file is opened, beneath the thread's root."""
    lock_key: tuple[str, str, str]
    """(user, thread, real host path): one lock per file, whichever name reaches it (a key
    only: the file is never opened by this path)."""


def locate(layout: PathLayout, runtime: Any, path: Any) -> Target | None:
    """Resolve ``path`` for the run's thread, or None when it cannot be inspected.

    None covers: no thread id, an invalid id, a path that is not a string, and
    a path that leaves the thread's files (the tool itself refuses that one).
    """
    thread_id = thread_id_of(runtime)
    if not thread_id or not isinstance(path, str) or not path:
        return None
    try:
        paths = layout.for_run(runtime)
        mapper = paths.mapper
        where = confined.place(mapper, path)
        host = mapper.to_host(path)
    except (AntlerError, OSError, ValueError):
        return None
    return Target(where.virtual, where, (paths.user_id, paths.thread_id, os.path.realpath(host)))


def file_state(target: Target) -> tuple[FileState, str | None]:
    """The file's state and, for a regular readable file, the SHA-256 of its content.

    The file is opened beneath the thread's root as the sandbox opens it
    (`antler.plugin_api.confined`): a symlink swapped in meanwhile cannot make
    this hash a file outside the thread.
    """
    try:
        fd = target.place.open(os.O_RDONLY)
    except FileNotFoundError:
        return "missing", None
    except (AntlerError, OSError):
        return "uninspectable", None
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return "uninspectable", None
    return "file", digest.hexdigest()


def _claim(target: Target, tool_call_id: str, digest: str) -> tuple[str, ...]:
    user, thread, _ = target.lock_key
    return (user, thread, tool_call_id, target.virtual, digest)


def latest_mark(messages: Sequence[Any], target: Target, signer: MarkSigner) -> str | None:
    """The digest of the newest genuine mark for ``target`` among ``messages``, if any.

    A mark whose signature does not verify is skipped: it was not the server's.
    """
    for message in reversed(messages):
        if not isinstance(message, ToolMessage) or message.status == "error":
            continue
        mark = message.additional_kwargs.get(MARK_KEY)
        if not isinstance(mark, Mapping) or mark.get("path") != target.virtual:
            continue
        digest = mark.get("sha256")
        if isinstance(digest, str) and signer.verify(
                _claim(target, message.tool_call_id, digest), mark.get("sig")):
            return digest
    return None


def stamp(result: Any, tool_call_id: str | None, target: Target, digest: str,
          signer: MarkSigner) -> Any:
    """``result`` (a `ToolMessage` or a `Command` carrying one) with the signed mark added.

    Only the successful answer to ``tool_call_id`` is stamped; anything else
    comes back unchanged (so no mark, and a later write needs a new read).
    """
    def stamped(message: ToolMessage) -> ToolMessage:
        claim = _claim(target, message.tool_call_id, digest)
        mark = {"path": target.virtual, "sha256": digest, "sig": signer.sign(claim)}
        kwargs = {**message.additional_kwargs, MARK_KEY: mark}
        return message.model_copy(update={"additional_kwargs": kwargs})

    if isinstance(result, ToolMessage):
        return stamped(result) if _answers(result, tool_call_id) else result
    if isinstance(result, Command) and isinstance(result.update, Mapping):
        messages = result.update.get("messages")
        if isinstance(messages, list) and any(_answers(m, tool_call_id) for m in messages):
            marked = [stamped(m) if _answers(m, tool_call_id) else m for m in messages]
            return dataclasses.replace(result, update={**result.update, "messages": marked})
    return result


def _answers(message: Any, tool_call_id: str | None) -> bool:
    return (isinstance(message, ToolMessage) and message.status != "error"
            and (tool_call_id is None or message.tool_call_id == tool_call_id))
