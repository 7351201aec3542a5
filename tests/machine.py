"""What a test may need from the machine beyond the virtual environment, and what it
does without: bubblewrap, Chromium, PostgreSQL, a `langgraph dev` server.

Locally a test that lacks one skips and says how to get it; under `CI=true` (where
.ci/run installs and starts them all) it fails, so CI cannot go green by skipping.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

from antler.runtime.sandbox.bwrap import bwrap_status

HIDDEN_FROM_BARE_PATH = ("bwrap", "chromium", "chromium-browser", "google-chrome")


def in_ci() -> bool:
    """Whether this is a CI run (`CI=true`), where every component must be present."""
    return os.environ.get("CI", "").lower() == "true"


def require(missing: str, how: str) -> NoReturn:
    """Skip the running test for want of `missing`, saying `how` to get it; fail it in CI."""
    message = f"{missing}; {how}"
    if in_ci():
        pytest.fail(f"{message} (CI=true: this test must run, not skip)")
    pytest.skip(message)


def forget_a_stale_bwrap_probe() -> None:
    """Drop the cached bubblewrap probe when the `bwrap` on PATH is not the one it probed.

    `bwrap_status()` is cached for the process; a test that changes PATH (hides
    bubblewrap, puts a fake first) would otherwise see, or leave, another test's answer.
    """
    if bwrap_status.cache_info().currsize and bwrap_status().path != shutil.which("bwrap"):
        bwrap_status.cache_clear()


def bare_path(directory: Path, path: str, hidden: tuple[str, ...] = HIDDEN_FROM_BARE_PATH) -> str:
    """A PATH of one directory linking every command on `path` except the `hidden` ones."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in path.split(os.pathsep):
        folder = Path(entry or ".")
        if not folder.is_dir():
            continue
        for tool in folder.iterdir():
            link = directory / tool.name
            if tool.name in hidden or link.exists() or link.is_symlink():
                continue
            if tool.is_file() and os.access(tool, os.X_OK):
                link.symlink_to(tool)
    return str(directory)
