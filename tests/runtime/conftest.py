"""The session's one `langgraph dev` server (tests/runtime/langgraph_dev.py).

Every test that uses it runs on one xdist worker (tests/conftest.py gives each the
`langgraph-server` group), which starts it once; each test makes threads of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime.langgraph_dev import TOKENS, Server, serving


@pytest.fixture(scope="session")
def langgraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`langgraph dev` with the users of `TOKENS`, shared by the session's served-API tests."""
    with serving(tmp_path_factory.mktemp("langgraph-server"), TOKENS) as running:
        yield running
