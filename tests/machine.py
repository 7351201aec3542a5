"""What a test may need from the machine beyond the virtual environment, and what it
does without: bubblewrap, Chromium, PostgreSQL, a `langgraph dev` server.

Locally a test that lacks one skips and says how to get it; under `CI=true` (where
.ci/run installs and starts them all) it fails, so CI cannot go green by skipping.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """Whether this is a CI run (`CI=true`), where every component must be present."""
    return os.environ.get("CI", "").lower() == "true"


def require(missing: str, how: str) -> NoReturn:
    """Skip the running test for want of `missing`, saying `how` to get it; fail it in CI."""
    message = f"{missing}; {how}"
    if in_ci():
        pytest.fail(f"{message} (CI=true: this test must run, not skip)")
    pytest.skip(message)
