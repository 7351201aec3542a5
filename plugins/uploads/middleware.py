"""UploadsMiddleware: tells the model which uploaded files it can read, and where.

A client stages uploads into the thread's uploads directory
(`antler.plugin_api.uploads.stage_upload`) and lists them in the user message's
``additional_kwargs["files"]`` as ``{"filename", "size", "path"}`` records. At
the start of the run this middleware prepends an ``<uploaded_files>`` block to
that message naming the files uploaded with it and the ones uploaded earlier in
the thread, with their virtual paths (``/mnt/user-data/uploads/...``) and sizes.

Nothing a client claims is taken on trust: every name must be a plain file name
(`antler.plugin_api.safe_upload_name`), and a file counts only if it really is a
regular file in this user's thread's uploads directory; its size is read from
the disk, its path rebuilt from the name.
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import OmitFromInput
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.runtime import Runtime

from antler.plugin_api import (
    VIRTUAL_ROOT,
    AntlerError,
    BuildContext,
    UploadError,
    confined,
    safe_upload_name,
    upload_names,
)

__all__ = [
    "INJECTED_MARKER",
    "MAX_LISTED_FILES",
    "UploadedFile",
    "UploadsMiddleware",
    "UploadsState",
    "build",
    "render_uploaded_files",
]

logger = logging.getLogger(__name__)

INJECTED_MARKER = "uploaded_files_injected"
"""``additional_kwargs`` key set on a message once its block is in: never inject twice."""

ORIGINAL_CONTENT_KEY = "original_user_content"
"""``additional_kwargs`` key keeping the user's own text, without the block (first writer wins)."""

MAX_LISTED_FILES = 100
"""Earlier uploads listed by name; beyond that the block points at ``ls``."""

UPLOADS_VIRTUAL_DIR = f"{VIRTUAL_ROOT}/uploads"


class UploadedFile(TypedDict):
    """One verified upload: a plain name, its size on disk and its virtual path."""

    filename: str
    size: int
    path: str


class UploadsState(AgentState):
    # The files uploaded with the current message. Written by this middleware
    # only (OmitFromInput): a caller cannot claim files through the graph input.
    uploaded_files: NotRequired[Annotated[list[UploadedFile] | None, OmitFromInput]]


def _format_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def _entry(file: UploadedFile) -> str:
    # Names may contain '<', '>' or '&' (they are legal file names): escaping
    # them keeps a hostile name such as "</uploaded_files>x" from closing the tag.
    name = html.escape(file["filename"], quote=False)
    path = html.escape(file["path"], quote=False)
    return f"- {name} ({_format_size(file['size'])}): {path}"


def render_uploaded_files(
    new: Sequence[UploadedFile], previous: Sequence[UploadedFile], more: int = 0
) -> str:
    """The ``<uploaded_files>`` block; ``more`` earlier files were left unlisted."""
    lines = ["<uploaded_files>"]
    if new:
        lines.append("Files uploaded with this message:")
        lines += [_entry(file) for file in new]
    if previous or more:
        if new:
            lines.append("")
        lines.append("Files uploaded earlier in this conversation:")
        lines += [_entry(file) for file in previous]
        if more:
            lines.append(f"- ... and {more} more (list them with ls {UPLOADS_VIRTUAL_DIR})")
    lines += ["", "Read them with the read_file tool at the paths shown.", "</uploaded_files>"]
    return "\n".join(lines)


_PLAIN_NAMES: set[str] = set()
"""Directory entry names `safe_upload_name` accepted (it depends on the name alone): a
thread's uploads are listed on every run, their names checked once. Refused names are
not kept, so they are checked, and refused, every time."""
_PLAIN_NAMES_LIMIT = 4096


def _is_upload_name(name: str) -> bool:
    """Whether a directory entry's name is one an upload can have (`safe_upload_name`)."""
    if name in _PLAIN_NAMES:
        return True
    try:
        safe_upload_name(name)
    except UploadError:
        return False
    if len(_PLAIN_NAMES) >= _PLAIN_NAMES_LIMIT:
        _PLAIN_NAMES.clear()
    _PLAIN_NAMES.add(name)
    return True


def _listed_uploads(entries: Iterator[os.DirEntry[str]]) -> dict[str, int]:
    """Name -> size of the regular files among ``entries`` (never followed) with upload-like
    names, in directory order."""
    files: dict[str, int] = {}
    for entry in entries:
        # Tools can write here too: hidden or odd names are not uploads.
        if not entry.is_file(follow_symlinks=False) or not _is_upload_name(entry.name):
            continue
        files[entry.name] = entry.stat(follow_symlinks=False).st_size
    return files


_OPEN_DIRECTORY = (os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK
                   | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
"""Opens a directory that is the path's own last component, never a symlink there."""


def _open_uploads_directory(uploads_dir: str) -> int | None:
    """A descriptor of the thread's uploads directory, opened beneath its ``user-data``.

    None when there is none (nothing uploaded yet) or when the thread's commands
    made ``uploads`` a symlink that leaves the thread: its listing is never read.
    """
    path = os.path.normpath(uploads_dir)
    try:
        # The common case in one call: ``uploads`` is a directory. Every component above
        # it is the harness's own (``user-data`` is opened by name beneath too), and the
        # last one is not followed, so this is the directory the confined open finds.
        return os.open(path, _OPEN_DIRECTORY)
    except OSError:
        pass  # missing, or a symlink: resolved beneath user-data, as the sandbox would
    parent, name = os.path.split(path)
    try:
        return confined.Root(parent, VIRTUAL_ROOT).open([name], os.O_RDONLY, directory=True)
    except (AntlerError, OSError):
        return None


def _record(filename: str, size: int) -> UploadedFile:
    return {"filename": filename, "size": size, "path": f"{UPLOADS_VIRTUAL_DIR}/{filename}"}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [
        block.get("text", "") if isinstance(block, dict) else str(block)
        for block in content or []
        if not isinstance(block, dict) or block.get("type") == "text"
    ]
    return "\n".join(part for part in parts if part)


class UploadsMiddleware(AgentMiddleware[UploadsState]):
    """Prepends an ``<uploaded_files>`` block to the user message that starts a run.

    Hooks:

    ``before_agent`` / ``abefore_agent``
        Looks at the last message of the state. When it is a `HumanMessage`
        that has not been given a block yet, it reads the new uploads from its
        ``additional_kwargs["files"]``, keeps those that exist as regular files
        in the thread's uploads directory, lists the other files already there
        (only when the directory exists: nothing is created), and returns the
        message with the block prepended. The copy keeps the message's id, so
        LangGraph's ``add_messages`` reducer replaces it in place, and its
        ``additional_kwargs``, plus a marker (`INJECTED_MARKER`) so a re-run on
        the same message (a resumed or retried run) never injects twice, and
        ``original_user_content``, the text without the block. The verified
        new files go to state ``uploaded_files``. A hostile file name (path
        separators, ``..``, control characters) fails the run with a clear
        `UploadError`; a listed file that does not exist is skipped with a
        warning. The async form runs the same work in a worker thread because
        it touches the disk.

    Why here: after thread_data, whose ``thread_data.uploads_path`` it reads, in
    the same user bucket the thread's files live in; before dangling_tool_call
    and everything that reads messages, so they all see the rewritten message.
    It is a ``before_agent`` hook because uploads arrive with the message that
    starts a run, and the block must be written into state (not just into one
    model request) so every later model call of the thread sees it.
    """

    state_schema = UploadsState

    def before_agent(self, state: UploadsState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._inject(state)

    async def abefore_agent(
        self, state: UploadsState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._inject, state)

    # -- pieces ------------------------------------------------------------------------

    # Both hook forms call this helper rather than one another: the chain compiler's
    # fused nodes run hooks on a proxy whose node hooks are the base class's no-ops.
    def _inject(self, state: UploadsState) -> dict[str, Any] | None:
        messages: list[AnyMessage] = state.get("messages") or []
        last = messages[-1] if messages else None
        if not isinstance(last, HumanMessage) or last.additional_kwargs.get(INJECTED_MARKER):
            return None
        uploads_dir = self._uploads_dir(state)
        names = upload_names(last.additional_kwargs.get("files"))  # refuses a hostile name
        # One listing of the directory answers both questions: which of the message's
        # files really are uploads (with their sizes), and which were uploaded earlier.
        listing = self._listing(uploads_dir)
        new_files = self._new_files(names, listing)
        previous, more = self._previous_files(listing, {f["filename"] for f in new_files})
        if not new_files and not previous and not more:
            return {"uploaded_files": []} if state.get("uploaded_files") else None
        block = render_uploaded_files(new_files, previous, more)
        return {"messages": [self._with_block(last, block)], "uploaded_files": new_files}

    @staticmethod
    def _uploads_dir(state: UploadsState) -> str:
        record: Any = state.get("thread_data") or {}
        uploads = record.get("uploads_path") if isinstance(record, dict) else None
        if not uploads:
            raise UploadError(
                "state has no thread_data.uploads_path: the thread_data plugin must run "
                "before uploads (it does in the built-in chain; check custom chain ordering)"
            )
        return str(uploads)

    @staticmethod
    def _listing(uploads_dir: str) -> dict[str, int]:
        """Name -> size of every upload in the thread's uploads directory (see
        `_listed_uploads`); empty when there is no directory to read."""
        directory = _open_uploads_directory(uploads_dir)
        if directory is None:
            return {}  # nothing uploaded in this thread yet
        try:
            with os.scandir(directory) as entries:
                return _listed_uploads(entries)
        finally:
            os.close(directory)

    @staticmethod
    def _new_files(names: Sequence[str], listing: dict[str, int]) -> list[UploadedFile]:
        """The message's files that are regular files in the uploads directory."""
        found: dict[str, UploadedFile] = {}
        for filename in names:
            size = listing.get(filename)
            if size is None:
                logger.warning(
                    "upload %r listed in the message is not a file in the thread's "
                    "uploads directory; leaving it out of the <uploaded_files> block",
                    filename)
                continue
            found.setdefault(filename, _record(filename, size))
        return list(found.values())

    @staticmethod
    def _previous_files(listing: dict[str, int], exclude: set[str],
                        ) -> tuple[list[UploadedFile], int]:
        """The earlier uploads, by name (at most `MAX_LISTED_FILES`), and how many more."""
        names = sorted(name for name in listing if name not in exclude)
        files = [_record(name, listing[name]) for name in names[:MAX_LISTED_FILES]]
        return files, max(0, len(names) - MAX_LISTED_FILES)

    @staticmethod
    def _with_block(message: HumanMessage, block: str) -> HumanMessage:
        kwargs = dict(message.additional_kwargs)
        kwargs[INJECTED_MARKER] = True
        if not isinstance(kwargs.get(ORIGINAL_CONTENT_KEY), str):
            kwargs[ORIGINAL_CONTENT_KEY] = _text_of(message.content)
        content: Any = message.content
        if isinstance(content, str):
            content = f"{block}\n\n{content}" if content else block
        else:
            content = [{"type": "text", "text": block}, *content]
        return message.model_copy(update={"content": content, "additional_kwargs": kwargs})


def build(ctx: BuildContext) -> UploadsMiddleware:
    """Factory named in the manifest. Paths come through state from thread_data."""
    return UploadsMiddleware()
