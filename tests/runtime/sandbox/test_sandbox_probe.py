"""The recorded bubblewrap probe: `chain show` reports `auto`'s choice without running bwrap.

Each test runs the real CLI in a fresh process with a logging ``bwrap`` first on
PATH (it counts its calls and runs the real one) and its own cache directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.sandbox.test_sandbox_bwrap import UNUSABLE, needs_bwrap


@pytest.fixture
def logged_bwrap(tmp_path: Path) -> dict[str, Any]:
    """An environment whose `bwrap` logs each call to `calls`; the cache under tmp_path."""
    needs_bwrap()
    real = shutil.which("bwrap")
    shim = tmp_path / "bin"
    shim.mkdir()
    calls = tmp_path / "calls"
    fake = shim / "bwrap"
    fake.write_text(f'#!/bin/sh\necho >> {calls}\nexec {real} "$@"\n', encoding="utf-8")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}",
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return {"env": env, "calls": calls, "fake": fake,
            "record": tmp_path / "cache" / "antler" / "bwrap-probe.json"}


def _calls(logged: dict[str, Any]) -> int:
    calls: Path = logged["calls"]
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def _sandbox_shown(logged: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "antler", "chain", "show", "--json"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=logged["env"])
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return dict(json.loads(done.stdout)["sandbox"])


def test_chain_show_probes_once_then_answers_from_the_record(
        logged_bwrap: dict[str, Any]) -> None:
    first = _sandbox_shown(logged_bwrap)
    assert (first["provider"], first["isolated"]) == ("bwrap", True)
    assert _calls(logged_bwrap) == 1 and logged_bwrap["record"].exists()
    again = _sandbox_shown(logged_bwrap)
    assert again == first
    assert _calls(logged_bwrap) == 1  # no bwrap run the second time


def test_a_changed_bwrap_binary_is_probed_again(logged_bwrap: dict[str, Any]) -> None:
    _sandbox_shown(logged_bwrap)
    fake: Path = logged_bwrap["fake"]
    stat = fake.stat()
    os.utime(fake, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert _sandbox_shown(logged_bwrap)["provider"] == "bwrap"
    assert _calls(logged_bwrap) == 2


@pytest.mark.parametrize("content", ["{not json", '{"key": 3}', "[]", ""])
def test_a_damaged_record_means_a_probe_not_an_error(logged_bwrap: dict[str, Any],
                                                     content: str) -> None:
    record: Path = logged_bwrap["record"]
    record.parent.mkdir(parents=True)
    record.write_text(content, encoding="utf-8")
    assert _sandbox_shown(logged_bwrap)["provider"] == "bwrap"
    assert _calls(logged_bwrap) == 1
    assert json.loads(record.read_text())["status"]["usable"] is True  # rewritten


def test_a_forged_record_mislabels_the_report_but_never_skips_isolation(
        logged_bwrap: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from antler.chain.config import parse_config
    from antler.plugin_api.registry import discover
    from antler.runtime.sandbox import probe
    from antler.runtime.sandbox.bwrap import BwrapSandboxProvider
    from antler.runtime.sandbox.choice import load_configured_provider

    _sandbox_shown(logged_bwrap)
    record: Path = logged_bwrap["record"]
    forged = json.loads(record.read_text())
    forged["status"] = {"usable": False, "reason": UNUSABLE.reason, "path": None}
    record.write_text(json.dumps(forged), encoding="utf-8")
    shown = _sandbox_shown(logged_bwrap)
    assert shown["provider"] == "local" and UNUSABLE.reason in shown["reason"]
    # Building the sandbox probes afresh, whatever the record says.
    monkeypatch.setenv("XDG_CACHE_HOME", logged_bwrap["env"]["XDG_CACHE_HOME"])
    monkeypatch.setenv("PATH", logged_bwrap["env"]["PATH"])
    probe.bwrap_status.cache_clear()
    try:
        section = parse_config("sandbox:\n  provider: auto\n", discover()).section("sandbox")
        provider = load_configured_provider(section)
        assert isinstance(provider, BwrapSandboxProvider)
        assert _calls(logged_bwrap) == 2
        assert json.loads(record.read_text())["status"]["usable"] is True  # corrected
    finally:
        probe.bwrap_status.cache_clear()


def test_without_bwrap_on_path_chain_show_says_local_and_records_nothing(
        logged_bwrap: dict[str, Any], tmp_path: Path) -> None:
    python_dir = str(Path(sys.executable).parent)
    logged_bwrap["env"]["PATH"] = python_dir
    if shutil.which("bwrap", path=python_dir):
        pytest.skip("bwrap is next to the interpreter")
    shown = _sandbox_shown(logged_bwrap)
    assert shown["provider"] == "local" and "not installed" in shown["reason"]
    assert not logged_bwrap["record"].exists()
