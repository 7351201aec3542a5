"""The `view_image` tool: read one image of the thread's files for a vision model.

The tool only reads and checks the file; it does not show it. It stores
``{virtual_path: {"base64", "mime_type"}}`` in the `viewed_images` state
channel (through a `Command` that also carries its `ToolMessage`), and the
view_image middleware turns that into one hidden image message before the next
model call, then removes it.

Reading is confined to the thread's `user-data` directory: the path is mapped
from the `/mnt/user-data` view (or relative to the workspace) through the
paths the thread_data plugin put into state, and anything that would leave it,
by `..` or through a symlink, is refused. Files larger than the configured cap,
and files whose first bytes are not PNG, JPEG, GIF or WebP (whatever their
name says), are refused too. Every refusal is an error `ToolMessage` the model
can read and act on, never an exception.
"""

from __future__ import annotations

import base64
import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field

from antler.plugin_api import (
    AntlerError,
    PathEscapeError,
    ThreadPaths,
    VirtualPathMapper,
    confined,
)

from .config import DEFAULT_MAX_IMAGE_BYTES

__all__ = [
    "STATE_KEY",
    "THREAD_DATA_KEY",
    "TOOL_METADATA",
    "TOOL_NAME",
    "ImageRefused",
    "load_image",
    "make_tool",
    "mapper_from_thread_data",
    "sniff_mime_type",
]

TOOL_NAME = "view_image"

STATE_KEY = "viewed_images"
"""State channel of images read since the last model call: path -> {base64, mime_type}."""

THREAD_DATA_KEY = "thread_data"
"""State key where the thread_data plugin puts the thread's host paths."""

TOOL_METADATA = {"antler": {"sandbox": True, "remote_content": False}}
"""Reads the thread's own files (sandbox scope); nothing fetched from elsewhere."""

DESCRIPTION = (
    "Look at an image file from the thread's files so you can see its content. Pass its "
    "path under /mnt/user-data (for example /mnt/user-data/uploads/photo.png), or a path "
    "relative to the workspace. PNG, JPEG, GIF and WebP are supported. The image is shown "
    "to you right after this call."
)


class ImageRefused(AntlerError):
    """The tool will not read this path; the message says why, for the model."""


@dataclass(frozen=True)
class _StateThreadPaths:
    """The two directories `VirtualPathMapper` reads, taken from `thread_data` state."""

    user_data: Path
    workspace: Path


def mapper_from_thread_data(thread_data: Any) -> VirtualPathMapper:
    """A path mapper confined to the thread's `user-data` directory, from state.

    Raises:
        ImageRefused: when `thread_data` is missing or is not three sibling
            `workspace`/`uploads`/`outputs` directories.
    """
    keys = ("workspace_path", "uploads_path", "outputs_path")
    if not isinstance(thread_data, Mapping) or not all(
            isinstance(thread_data.get(key), str) and thread_data.get(key) for key in keys):
        raise ImageRefused("This thread's files are not available (no thread paths in state), "
                           "so no image can be read.")
    workspace, uploads, outputs = (Path(os.path.normpath(thread_data[key])) for key in keys)
    root = workspace.parent
    if not workspace.is_absolute() or [workspace, uploads, outputs] != [
            root / "workspace", root / "uploads", root / "outputs"]:
        raise ImageRefused("This thread's file paths are inconsistent, so no image can be read.")
    return VirtualPathMapper(cast(ThreadPaths, _StateThreadPaths(root, workspace)))


def sniff_mime_type(data: bytes) -> str | None:
    """The image MIME type told by the file's magic bytes, or None if not supported."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def load_image(mapper: VirtualPathMapper, image_path: Any,
               max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> tuple[str, dict[str, str]]:
    """(virtual path, {"base64", "mime_type"}) of a readable image.

    Raises:
        ImageRefused: saying why the path cannot be shown.
    """
    if not isinstance(image_path, str) or not image_path.strip():
        raise ImageRefused("Pass image_path: the path of an image file under /mnt/user-data.")
    # Opened beneath the thread's root (`confined`): no name is checked and then
    # opened again, so a symlink swapped in meanwhile cannot lead outside.
    try:
        where = confined.place(mapper, image_path.strip())
        fd = where.open(os.O_RDONLY)
    except PathEscapeError as exc:
        raise ImageRefused(str(exc)) from None
    except FileNotFoundError:
        raise ImageRefused(f"No file at {mapper.virtual_name(image_path.strip())}.") from None
    except OSError as exc:
        if exc.errno is not None:
            raise
        raise ImageRefused(str(exc)) from None  # a directory, FIFO or device
    virtual = where.virtual
    # Read at most one byte past the cap: the size check must not trust a stat
    # that the file can outgrow before it is read.
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ImageRefused(f"{virtual} is larger than the {_size(max_bytes)} limit for images.")
    mime_type = sniff_mime_type(data)
    if mime_type is None:
        raise ImageRefused(f"{virtual} is not a PNG, JPEG, GIF or WebP image.")
    return virtual, {"base64": base64.b64encode(data).decode("ascii"), "mime_type": mime_type}


class _ViewImageArgs(BaseModel):
    """`view_image`'s arguments: the path the model writes, then the `ToolRuntime` the
    tools node injects (out of the model's schema and the validated input's dump).
    Declared as plain types: LangChain rebuilds a generic hint such as
    ``ToolRuntime[Any, Any]`` on every call; the model's schema and the validation
    errors are the ones the function's hints gave (tests/plugins/test_builtin_tool_schemas.py)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, title=TOOL_NAME)

    image_path: str
    runtime: ToolRuntime = Field(exclude=True)


def make_tool(context: Any = None) -> BaseTool:
    """A `view_image` tool; the size cap comes from the plugin's config when there is one."""
    max_bytes = getattr(getattr(context, "config", None), "max_image_bytes",
                        DEFAULT_MAX_IMAGE_BYTES)

    def view_image(image_path: str, runtime: ToolRuntime) -> Command[Any] | ToolMessage:
        call_id = runtime.tool_call_id or ""
        try:
            mapper = mapper_from_thread_data((runtime.state or {}).get(THREAD_DATA_KEY))
            virtual, image = load_image(mapper, image_path, max_bytes)
        except ImageRefused as exc:
            return ToolMessage(str(exc), tool_call_id=call_id, name=TOOL_NAME, status="error")
        except OSError as exc:  # the reason only: str(exc) would name the host path
            return ToolMessage(f"Could not read {image_path!r}: "
                               f"{exc.strerror or type(exc).__name__}.",
                               tool_call_id=call_id, name=TOOL_NAME, status="error")
        note = f"Loaded {virtual} ({image['mime_type']}). The image is shown to you next."
        return Command(update={
            STATE_KEY: {virtual: image},
            "messages": [ToolMessage(note, tool_call_id=call_id, name=TOOL_NAME)],
        })

    return StructuredTool.from_function(
        func=view_image,
        name=TOOL_NAME,
        description=DESCRIPTION,
        args_schema=_ViewImageArgs,
        metadata=copy.deepcopy(TOOL_METADATA),
    )


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MiB"
    if count >= 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count} bytes"
