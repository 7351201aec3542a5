"""The example plugin distribution (`examples/acme-notes`) works as its README says.

Built as a wheel, installed into a fresh virtual environment (which sees this
environment's Antler and its dependencies, and nothing of the example's source),
and its own test suite run there: placement, build, a scripted run and the whole
conformance battery. So the template a new author copies is known to pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "acme-notes"

# About 40 s of building, installing and a second test run: CI runs it (`make test-slow`).
pytestmark = [pytest.mark.example_distribution, pytest.mark.slow]


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None,
        timeout: int = 600) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def test_the_example_distribution_builds_installs_and_passes_its_tests(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                   "__pycache__"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
        "--wheel-dir", tmp_path / "dist", source, cwd=tmp_path)
    [wheel] = (tmp_path / "dist").glob("antler_acme_notes-1.0.0-*.whl")

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                  cwd=tmp_path).stdout.strip()
    # Antler and its dependencies come from this environment (a site directory, so its
    # editable install works); the example comes only from its wheel.
    outer = sysconfig.get_paths()["purelib"]
    Path(purelib, "antler_env.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
        "--quiet", wheel, cwd=tmp_path)

    tests = tmp_path / "example-tests"
    shutil.copytree(source / "tests", tests)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": ""}
    listed = run(python, "-m", "antler", "plugins", "list", cwd=tests, env=env).stdout
    assert "acme_notes" in listed
    result = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests, cwd=tests,
                 env=env)
    assert "passed" in result.stdout and "failed" not in result.stdout, result.stdout
    imported = run(python, "-c", "import acme_notes; print(acme_notes.__file__)", cwd=tests,
                   env=env).stdout
    assert purelib in imported  # the installed wheel, not the source tree
