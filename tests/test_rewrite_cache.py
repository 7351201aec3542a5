"""`tests/rewrite_cache.py` (run by `make test` before the workers start) writes what
pytest itself would write, where pytest looks for it, and only for the files pytest rewrites.

pytest reads a cache entry whose source hash matches without asking how it was made, so
an entry that differs from pytest's own would run different asserts: the entry is compared
byte for byte with the one a pytest process writes for the same module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import rewrite_cache

SAMPLE = '''\
import pytest


def helper(x):
    return x * 2


@pytest.mark.parametrize("n", [1, 2])
def test_doubles(n):
    assert helper(n) == n + n, f"helper({n})"
    assert [helper(n)] == [2 * n] and not (helper(n) < n)
'''


def entry_of(path: Path) -> Path:
    from _pytest.assertion.rewrite import get_cache_dir

    [entry] = get_cache_dir(path).glob(f"{path.stem}.*-pytest-*.pyc")
    return entry


def test_the_entry_is_the_one_pytest_writes_and_pytest_reads_it(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    assert rewrite_cache.rewrite([sample]) == 1
    ours = entry_of(sample).read_bytes()
    assert rewrite_cache.rewrite([sample]) == 0  # a fresh entry is kept
    entry_of(sample).unlink()
    env = {key: value for key, value in os.environ.items()
           if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), str(sample)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and "2 passed" in ran.stdout, ran.stdout + ran.stderr
    assert entry_of(sample).read_bytes() == ours
    sample.write_text(SAMPLE.replace("n + n", "2 * n"))
    # An entry is keyed on the source's size and whole-second mtime, as pytest's own is:
    # an edit of the same size within the same second as the first write is not told
    # apart (by either). An edit a second later is.
    written = sample.stat().st_mtime
    os.utime(sample, (written + 2, written + 2))
    assert rewrite_cache.rewrite([sample]) == 1  # a changed source is rewritten


def test_it_takes_the_files_pytest_rewrites():
    files = set(rewrite_cache.test_files(rewrite_cache.pytest_options()))
    here = Path(__file__).resolve()
    assert here in files and here.with_name("conftest.py") in files
    assert Path(rewrite_cache.__file__).resolve() not in files  # a helper, not a test module
    plugins = {path.parts[-2:] for path in rewrite_cache.plugin_modules()}
    assert ("hypothesis", "core.py") in plugins and ("xdist", "plugin.py") in plugins
