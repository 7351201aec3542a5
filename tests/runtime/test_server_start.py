"""A served graph that cannot be built stops the server instead of serving nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

# The supervisor LangGraph Server runs (`langgraph dev`'s reloader) starts a worker that
# imports the graph; this stand-in does the same and has "langgraph" in its command line.
SUPERVISOR = ("import subprocess, sys; "
              "sys.exit(subprocess.call([sys.executable, '-c', 'import antler.server']))")


def _serve(config: str, *, served: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANTLER_CONFIG": config}
    env.pop("LANGSERVE_GRAPHS", None)
    if served:
        env["LANGSERVE_GRAPHS"] = '{"antler": "antler.server:graph"}'
    return subprocess.run([sys.executable, "-c", SUPERVISOR, "langgraph-dev-stand-in"],
                          env=env, capture_output=True, text=True, timeout=180)


def test_a_bad_config_stops_the_server_with_one_clear_line(tmp_path):
    bad = tmp_path / "antler.yaml"
    bad.write_text("title:\n  enable: true\n")
    result = _serve(str(bad), served=True)
    assert result.returncode == -signal.SIGTERM, result.stderr  # the supervisor was stopped
    assert f"antler: the server cannot start: invalid config {bad}:" in result.stderr
    assert f"{bad}:2:3: title.enable: unknown key 'enable'" in result.stderr
    assert "Traceback" not in result.stderr


def test_outside_the_server_a_bad_config_is_an_ordinary_import_error(tmp_path):
    bad = tmp_path / "antler.yaml"
    bad.write_text("title:\n  enable: true\n")
    result = _serve(str(bad), served=False)
    assert result.returncode == 1  # the worker's ImportError; nobody is stopped
    assert "ConfigError" in result.stderr and "the server cannot start" not in result.stderr
