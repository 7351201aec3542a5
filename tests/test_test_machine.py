"""The suite's own guarantees about the machine: the cached bubblewrap probe follows
PATH from test to test, and `without_bwrap` gives a test the machine of a newcomer
who has no bubblewrap, whatever this one has."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from antler.plugin_api.context import SANDBOX_PROVIDER
from antler.runtime.sandbox.bwrap import bwrap_status
from antler.runtime.sandbox.local import LocalSandboxProvider
from tests.machine import forget_a_stale_bwrap_probe
from tests.plugins.support import make_agent

CHOICE_LOGGER = "antler.runtime.sandbox.choice"


def test_a_probe_of_another_path_is_forgotten(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    before = bwrap_status()  # cached for the real PATH
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'no namespaces in this test' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert bwrap_status() == before  # the cache alone does not notice
    forget_a_stale_bwrap_probe()
    status = bwrap_status()
    assert status.path == str(fake) and not status.usable
    assert "no namespaces in this test" in status.reason


def test_an_unchanged_path_keeps_the_probe() -> None:
    bwrap_status()
    forget_a_stale_bwrap_probe()
    assert bwrap_status.cache_info().currsize == 1


def test_without_bwrap_hides_bubblewrap_and_chromium_only(without_bwrap: str) -> None:
    assert os.environ["PATH"] == without_bwrap
    assert shutil.which("bwrap") is None and shutil.which("chromium") is None
    assert shutil.which("sh") and shutil.which("python3")
    status = bwrap_status()
    assert not status.usable and "apt-get install bubblewrap" in status.reason


def test_without_bwrap_an_agent_falls_back_to_the_local_sandbox(
        without_bwrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger=CHOICE_LOGGER):
        agent, _ = make_agent(tmp_path, ["hi"])
    with agent:
        assert isinstance(agent.services.items[SANDBOX_PROVIDER], LocalSandboxProvider)
    [warning] = [r.getMessage() for r in caplog.records if r.name == CHOICE_LOGGER]
    assert "bubblewrap is not usable" in warning
