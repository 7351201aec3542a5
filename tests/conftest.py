"""Shared fixtures. Antler's own pytest plugin (`antler.testing`) is loaded through its
`pytest11` entry point, so its fixtures (`antler_discover`, `antler_plan`, ...) need no import.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.distbuilder import Site


@pytest.fixture
def site(tmp_path, monkeypatch, antler_isolated_entry_points) -> Iterator[Site]:
    """An empty site directory on `sys.path`, with stevedore's caches isolated.

    Modules imported from it are forgotten afterwards, so every test imports the
    distributions it builds afresh.
    """
    built = Site(tmp_path / "site-packages")
    monkeypatch.syspath_prepend(str(built.path))
    yield built
    built.purge_modules()
