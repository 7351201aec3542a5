"""Shared fixtures. Antler's own pytest plugin (`antler.testing`) is loaded through its
`pytest11` entry point, so its fixtures (`antler_discover`, `antler_plan`, ...) need no import.

What every test can rely on, and every new test must keep true:

* The order is random (pytest-randomly; the seed is printed first) and the tests run
  in parallel (`make test` uses pytest-xdist, `--dist loadgroup`). A test leaves no
  process-wide state behind; tests that share a server, a port or a file outside
  `tmp_path` carry the same `pytest.mark.xdist_group(name)`, which keeps them on
  one worker.
* Machine components are optional: a test that needs bubblewrap, Chromium,
  PostgreSQL or the `langgraph dev` server skips, saying how to get it, and fails
  instead under `CI=true` (`tests.machine.require()` does both).
* A test reading logs takes the records of its own logger (`record.name`), never all
  of `caplog.records`: the sandbox warns when bubblewrap is missing, for one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from antler.plugin_api.registry import SLOW_IMPORT_ENV
from antler.runtime import astguard
from antler.testing import PluginConformance
from tests import depth
from tests.distbuilder import Site
from tests.machine import bare_path, forget_a_stale_bwrap_probe, in_ci, require

# -- how many examples the property tests draw ---------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full-examples", action="store_true", default=False,
                     help="property tests marked `fuzz` draw their full number of examples "
                          "(`make test-slow` passes it; `make test` draws a quarter)")


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is imported: the property tests' example counts follow it.

    Also raises the slow-import threshold (a wall-clock time) for this process and the
    commands it starts: on a loaded machine any plugin import may take past the default
    second, and its warning would land in logs and reports the tests read. The tests of
    that warning set their own threshold.
    """
    depth.FULL = bool(config.getoption("full_examples"))
    os.environ.setdefault(SLOW_IMPORT_ENV, "60")


# -- test order -------------------------------------------------------------------------


def pytest_sessionstart(session: pytest.Session) -> None:
    """The seed of the random order, shown first even under -q, so an order can be rerun.

    Also serializes `ast.parse` (CPython 3.11 is not thread-safe there, and pytest parses
    sources to format a failure while tests' worker threads may be parsing too).
    """
    astguard.install()
    config = session.config
    seed = getattr(config.option, "randomly_seed", None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if seed is None or reporter is None or hasattr(config, "workerinput"):
        return
    reporter.write_line(f"random test order, seed {seed}: `--randomly-seed={seed}` repeats it "
                        "(`-p no:randomly` runs the file order)")


# -- process-wide caches ------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _bwrap_probe_follows_path() -> Iterator[None]:
    """A test neither sees an earlier test's bubblewrap probe nor leaves its own behind."""
    forget_a_stale_bwrap_probe()
    yield
    forget_a_stale_bwrap_probe()


@pytest.fixture
def without_bwrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PATH without bubblewrap or Chromium (everything else still on it), for this test.

    Yields the PATH; the bubblewrap probe answers for it, and for the real PATH after.
    """
    hidden = bare_path(tmp_path_factory.mktemp("bare-path"), os.environ.get("PATH", ""))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", hidden)
        forget_a_stale_bwrap_probe()
        yield hidden
    forget_a_stale_bwrap_probe()


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
# when Postgres tests ran but none of them passed. The reports are counted where
# they arrive: in the one process, or in xdist's controller (which collects nothing).

POSTGRES_ENV = "ANTLER_TEST_POSTGRES_URL"
_postgres_passed: set[str] = set()
_postgres_ran: set[str] = set()


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
        require(f"no PostgreSQL for the storage tests: {problem}",
                "start one with `eval \"$(.ci/postgres up)\"` (or `make postgres-up`)")
    return url


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every PostgreSQL test runs on one xdist worker: some restart the shared server,
    which would break a Postgres test running beside them on another worker.

    The checks of one conformance class run on one worker too: they share the agents
    and runs the class's battery builds (once per process), which each worker running
    one of its checks would otherwise build again (classes of equal settings, which
    share them too, name one group of their own). So do the tests of the session's
    `langgraph dev` server (`langgraph_server`, tests/runtime/conftest.py), which that
    worker starts once.
    """
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if item.get_closest_marker("postgres") or "postgres_url" in fixtures:
            item.add_marker(pytest.mark.xdist_group("postgres"))
        elif "langgraph_server" in fixtures:
            item.add_marker(pytest.mark.xdist_group("langgraph-server"))
        elif ((cls := getattr(item, "cls", None)) and issubclass(cls, PluginConformance)
              and not item.get_closest_marker("xdist_group")):  # unless it names its own
            item.add_marker(pytest.mark.xdist_group(f"conformance:{cls.__qualname__}"))


# -- long tests first -------------------------------------------------------------------
# A parallel run ends when its last test does. These modules' tests take many seconds each
# (most of it waiting on the processes they start: `antler run`, pip, a server), so they
# start first, in their random order, and the short tests fill the workers around them.
LONG_MODULES = (
    "tests/plugin_api/test_example_distribution.py",
    "tests/compiler/test_compiler_properties.py",
    "tests/runtime/test_reliability_processes.py",
    "tests/runtime/storage/test_reliability_faults.py",
    "tests/cli/test_cli_polish.py",
    "tests/replay/test_replay.py",
    "tests/plugin_api/test_third_party.py",
    "tests/testing/conformance/test_broken_samples.py",
    "tests/test_docs_paths.py",
    "tests/runtime/test_server.py",
    "tests/runtime/test_server_boundary.py",
)


@pytest.hookimpl(specname="pytest_collection_modifyitems", wrapper=True)
def pytest_collection_modifyitems_groups_hold(config: pytest.Config,
                                              items: list[pytest.Item]) -> Iterator[None]:
    """On an xdist worker under `--dist loadgroup`, each `xdist_group` test's id carries its
    group once every plugin has run (xdist adds it; the controller schedules by it). Where it
    does not (a pytest that xdist cannot follow), the groups would silently spread over every
    worker: servers and batteries started on each, PostgreSQL restarted beside its own tests.
    """
    yield
    if not hasattr(config, "workerinput") or not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            item.stash[_UNGROUPED] = (
                f"--dist loadgroup did not keep this test in its xdist_group: pytest "
                f"{pytest.__version__} and this pytest-xdist do not work together; install "
                "the versions pyproject.toml's `dev` extra names (`make install`)")


_UNGROUPED = pytest.StashKey[str]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test xdist could not keep in its group fails, saying why (a worker's collection
    error would only show as xdist's internal error)."""
    if problem := item.stash.get(_UNGROUPED, None):
        pytest.fail(problem, pytrace=False)


@pytest.hookimpl(specname="pytest_collection_modifyitems", wrapper=True, tryfirst=True)
def pytest_collection_modifyitems_long_first(items: list[pytest.Item]) -> Iterator[None]:
    """Outside pytest-randomly's shuffle (a conftest's wrapper wraps an installed plugin's
    of the same priority): the order it made, with the `LONG_MODULES` tests moved first."""
    yield
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in LONG_MODULES)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "postgres" not in report.keywords:
        return
    _postgres_ran.add(report.nodeid)
    if report.when == "call" and report.passed:
        _postgres_passed.add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller sees every report and decides
    if in_ci() and _postgres_ran and not _postgres_passed:
        session.config.get_terminal_writer().line(
            f"error: CI=true but none of the {len(_postgres_ran)} Postgres tests "
            f"passed: .ci/run must start PostgreSQL and export ${POSTGRES_ENV}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
