"""The harness's other readers and writers of a thread's files never follow a link out.

Uploads staging, the uploads listing, `view_image` and the tool-output budget's
saved results open the thread's files beneath its root (`antler.plugin_api.confined`)
like the file tools do. Each case plants what the thread's own commands could
plant (a symlink where a file or folder should be) and checks nothing outside
is read, listed or written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from antler.contracts.tooloutput import budgeted_output
from antler.plugin_api.paths import PathEscapeError, PathLayout, ThreadPaths
from antler.plugin_api.uploads import stage_upload
from antler.plugins.uploads.middleware import UploadsMiddleware
from antler.plugins.view_image.tool import ImageRefused, load_image
from tests.plugins.support import make_agent

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def thread(tmp_path: Path) -> ThreadPaths:
    paths = PathLayout(tmp_path / "home").thread("default", "t1")
    paths.ensure_directories()
    return paths


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "target.txt").write_text("host file\n")
    (folder / "secret-name.txt").write_text("x")
    (folder / "image.png").write_bytes(PNG)
    return folder


def test_staging_an_upload_never_writes_through_a_symlink(thread, outside, tmp_path):
    source = tmp_path / "report.txt"
    source.write_text("the user's upload\n")
    os.symlink(outside / "target.txt", thread.uploads / "report.txt")
    with pytest.raises(PathEscapeError, match="points outside"):
        stage_upload(thread, source)
    assert (outside / "target.txt").read_text() == "host file\n"
    # An ordinary name is staged as before.
    record = stage_upload(thread, source, "notes.txt")
    assert record == {"filename": "notes.txt", "size": 18,
                      "path": "/mnt/user-data/uploads/notes.txt"}


def test_the_uploads_listing_never_reads_a_folder_outside(thread, outside):
    (thread.uploads / "mine.txt").write_text("mine")
    assert UploadsMiddleware._listing(str(thread.uploads)) == {"mine.txt": 4}
    (thread.uploads / "mine.txt").unlink()
    thread.uploads.rmdir()
    os.symlink(outside, thread.uploads)
    assert UploadsMiddleware._listing(str(thread.uploads)) == {}


def test_the_uploads_listing_follows_a_link_that_stays_in_the_thread(thread, outside):
    # The listing opens a plain directory in one call; a symlinked ``uploads`` is
    # resolved beneath user-data: one inside the thread is read, one leading out is not.
    thread.uploads.rmdir()
    kept = thread.workspace / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("mine")
    os.symlink("workspace/kept", thread.uploads)  # relative: it stays beneath user-data
    assert UploadsMiddleware._listing(str(thread.uploads)) == {"mine.txt": 4}
    os.unlink(thread.uploads)
    os.symlink(outside, thread.uploads)
    assert UploadsMiddleware._listing(str(thread.uploads) + "/") == {}


def test_view_image_never_reads_through_a_symlink_out(thread, outside):
    os.symlink(outside / "image.png", thread.workspace / "image.png")
    os.symlink(outside, thread.workspace / "dir")
    for path in ("image.png", "dir/image.png"):
        with pytest.raises(ImageRefused, match="points outside"):
            load_image(thread.mapper, path)
    (thread.workspace / "real.png").write_bytes(PNG)
    assert load_image(thread.mapper, "real.png")[0] == "/mnt/user-data/workspace/real.png"


def test_saved_tool_results_never_land_outside(thread, outside, tmp_path):
    os.symlink(outside, thread.outputs / ".tool-results")
    script: list[Any] = [{"tool_calls": [{"name": "bash", "args": {
        "command": "python3 -c \"print('y' * 40000)\""}}]}, "done"]
    agent, _ = make_agent(tmp_path / "home", script)
    with agent:
        state = agent.invoke("go", thread_id="t1")
    (result,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    record = budgeted_output(result)
    assert record is not None and not record["externalized"]  # cut instead of saved
    assert sorted(p.name for p in outside.iterdir()) == ["image.png", "secret-name.txt",
                                                         "target.txt"]
