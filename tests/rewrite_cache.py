"""Pytest's assertion rewriting of the test modules, done once before a parallel run.

Pytest rewrites the asserts of each test module (and of each module of a pytest
plugin's distribution) as it imports it, and caches the result in `__pycache__`
unless writing bytecode is off (PYTHONDONTWRITEBYTECODE). Every xdist worker
imports every test module, so on a fresh clone, or with that variable set, each
worker rewrites all of them: about 8 of a worker's 14 CPU-seconds of collection.
`make test` runs this module first: it rewrites them once, on every core, and
writes pytest's own cache entries, which the workers then read. An entry carries
a hash of its source, so a module changed since is rewritten again where it is
imported, as without this step.

This uses pytest's rewriting functions, which are not public: where they are
missing or differ, it says so and writes nothing, and the workers rewrite as
they would without it.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import os
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEST_FILES = ("test_*.py", "*_test.py")


def pytest_options() -> dict[str, Any]:
    """The `[tool.pytest.ini_options]` of pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return dict(tomllib.load(handle).get("tool", {}).get("pytest", {})
                    .get("ini_options", {}))


def test_files(options: dict[str, Any]) -> Iterator[Path]:
    """The files under the test paths pytest rewrites: conftests and test modules."""
    patterns = options.get("python_files", DEFAULT_TEST_FILES)
    patterns = patterns.split() if isinstance(patterns, str) else list(patterns)
    for folder in options.get("testpaths", ["tests"]):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "conftest.py" or any(fnmatch.fnmatch(path.name, pattern)
                                                 for pattern in patterns):
                yield path


def plugin_modules() -> Iterator[Path]:
    """The installed modules of the distributions that carry a pytest plugin, which
    pytest rewrites too (the ones installed in site-packages; an editable install's
    sources are not rewritten)."""
    from _pytest.config import _iter_rewritable_modules

    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    for dist in importlib.metadata.distributions():
        if not any(point.group == "pytest11" for point in dist.entry_points):
            continue
        files = list(dist.files or [])
        marked = set(_iter_rewritable_modules(str(file) for file in files))
        for file in files:
            if file.suffix != ".py":
                continue
            name = ".".join(file.with_suffix("").parts)
            if not any(name == top or name.startswith(top + ".") for top in marked):
                continue
            path = Path(str(dist.locate_file(file))).resolve()
            if path.parent.parent in installed or any(root in path.parents
                                                      for root in installed):
                yield path


def rewrite(paths: list[Path]) -> int:
    """Rewrite each of `paths` whose cache entry is missing or stale; how many were."""
    from _pytest.assertion.rewrite import (
        PYC_TAIL,
        _read_pyc,
        _rewrite_test,
        _write_pyc,
        get_cache_dir,
    )

    class Quiet:
        def trace(self, message: str) -> None:
            pass

    written = 0
    for path in paths:
        cache = get_cache_dir(path)
        pyc = cache / (path.name[:-3] + PYC_TAIL)
        if _read_pyc(path, pyc) is not None:
            continue
        try:
            source_hash, code = _rewrite_test(path, None)  # type: ignore[arg-type]
            cache.mkdir(parents=True, exist_ok=True)
        except (SyntaxError, OSError, ValueError):
            continue  # pytest would fail or skip it the same way on import
        written += _write_pyc(Quiet(), code, source_hash, pyc)  # type: ignore[arg-type]
    return written


def main() -> int:
    options = pytest_options()
    if options.get("enable_assertion_pass_hook"):
        print("rewrite cache: skipped (the assertion pass hook changes what pytest writes)")
        return 0
    try:
        paths = [*test_files(options), *plugin_modules()]
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
        with ProcessPoolExecutor(workers) as pool:
            sum(pool.map(rewrite, [paths[start::workers] for start in range(workers)]))
    except Exception as exc:  # a pytest whose private functions differ: no cache, no harm
        print(f"rewrite cache: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
