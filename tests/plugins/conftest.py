"""Fixtures shared by the plugin tests that run one scenario every way a graph can run."""

from __future__ import annotations

import pytest

from .tail_support import MODES


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    """How the compiler wires the chain: unfused, fused, or fused into the model node."""
    return str(request.param)


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def use_async(request: pytest.FixtureRequest) -> bool:
    """Whether the run goes through the sync or the async API."""
    return bool(request.param)
