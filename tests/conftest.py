"""Shared fixtures. Antler's own pytest plugin (`antler.testing`) is loaded through its
`pytest11` entry point, so its fixtures (`antler_discover`, `antler_plan`, ...) need no import.
"""

from __future__ import annotations

import os
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


# -- PostgreSQL ------------------------------------------------------------------------
# Tests marked `postgres` run against the server of $ANTLER_TEST_POSTGRES_URL
# (`.ci/postgres up` starts one; .ci/run does so for CI). Without one they skip
# locally, with a message; under CI=true they fail instead, and the session fails
# when Postgres tests were collected but none of them passed.

POSTGRES_ENV = "ANTLER_TEST_POSTGRES_URL"
_postgres_passed: list[str] = []
_postgres_collected: list[str] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _unreachable(url: str) -> str | None:
    try:
        import psycopg

        psycopg.connect(url, connect_timeout=5).close()
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The URL of a reachable PostgreSQL for the test session."""
    url = os.environ.get(POSTGRES_ENV, "").strip()
    problem = (f"${POSTGRES_ENV} is not set" if not url else _unreachable(url))
    if problem:
        message = (f"no PostgreSQL for the storage tests: {problem}. Start one with "
                   f"`eval \"$(.ci/postgres up)\"` (or `make postgres-up`)")
        if in_ci():
            pytest.fail(message + " (CI=true: Postgres tests must run, not skip)")
        pytest.skip(message)
    return url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _postgres_collected.extend(item.nodeid for item in items
                               if item.get_closest_marker("postgres"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed and report.nodeid in _postgres_collected:
        _postgres_passed.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if in_ci() and _postgres_collected and not _postgres_passed:
        session.config.get_terminal_writer().line(
            f"error: CI=true but none of the {len(_postgres_collected)} Postgres tests "
            f"passed: .ci/run must start PostgreSQL and export ${POSTGRES_ENV}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
