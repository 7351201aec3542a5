"""Helpers for tests that start Antler as a separate process."""

from __future__ import annotations

import subprocess


def read_stderr_until(process: subprocess.Popen[str], text: str) -> str:
    """Read the process's stderr until a line holds `text`; return what was read."""
    assert process.stderr is not None
    seen = ""
    for line in process.stderr:
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never appeared; stderr was:\n{seen}")
