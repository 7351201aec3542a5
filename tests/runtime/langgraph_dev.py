"""The real LangGraph Server (`langgraph dev`) serving Antler from the repository's langgraph.json.

`serving()` starts one on a free loopback port, with the example auth handler's token
table, an operator config whose lead model answers by the conversation
(`served_model.ConversationModel`), scripted title and memory models, and a fresh
`ANTLER_HOME`. The `langgraph_server` fixture (tests/runtime/conftest.py) is one such
server for the whole session: the tests that use it run on one xdist worker, each on
threads of its own. `langgraph dev` runs the graph under blockbuster, so a blocking
call on its event loop fails a run.

Locally a test skips, with the reason, when the server cannot start (the `dev` extra
is not installed); under `CI=true` it fails instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 90.0
TOKENS = {"tok-alice": {"user": "alice", "roles": ["agent"]},
          "tok-bob": {"user": "bob", "roles": ["agent"]},
          # test_server.py's, whose first thread no other test's memories reach
          "tok-carol": {"user": "carol", "roles": ["agent"]},
          # one user per namespace component Antler uses in the store
          "tok-antler": {"user": "antler", "roles": ["agent"]},
          "tok-memory": {"user": "memory", "roles": ["agent"]},
          "tok-memory_pending": {"user": "memory_pending", "roles": ["agent"]}}
"""The shared server's users: bearer token -> identity."""
LEAD_MODEL = "tests.runtime.served_model:ConversationModel"
SIDE_ANSWERS = 500
"""Title and memory answers in each side script: one per thread a session may make."""


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the LangGraph server test cannot run in CI: {reason}")
    pytest.skip(reason)


@dataclass
class Server:
    url: str
    home: Path

    @property
    def log(self) -> Path:
        """What the server has written to its stdout and stderr."""
        return self.home.parent / "server.log"

    def client(self, token: str | None) -> Any:
        from langgraph_sdk import get_sync_client

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return get_sync_client(url=self.url, headers=headers)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def log_tail(path: Path) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-25:]) if path.exists() else ""


@contextlib.contextmanager
def serving(work: Path, tokens: dict[str, Any], config: str = "",
            environment: dict[str, str] | None = None) -> Iterator[Server]:
    """`langgraph dev` on a free port in `work` (`config`: more of the operator config,
    YAML; `environment`: more of the server's)."""
    cli = Path(sys.executable).with_name("langgraph")
    try:
        import langgraph_api  # noqa: F401  (the `inmem` extra: `langgraph dev` needs it)
        import langgraph_sdk  # noqa: F401
    except ImportError as exc:
        unavailable(f"langgraph-cli[inmem] is not installed ({exc}); `make install` adds it")
    if not cli.exists():
        unavailable(f"no `langgraph` command next to {sys.executable}; `make install` adds it")
    home = work / "home"
    (work / "title.yaml").write_text('- "Greeting thread"\n' * SIDE_ANSWERS, encoding="utf-8")
    (work / "memory.yaml").write_text("""- '["The user greets."]'\n""" * SIDE_ANSWERS,
                                      encoding="utf-8")
    (work / "antler.yaml").write_text(
        f"models: {{default: lead, named: {{lead: {{use: '{LEAD_MODEL}'}}}}}}\n"
        f"title: {{model: 'scripted:{work / 'title.yaml'}'}}\n"
        f"memory: {{model: 'scripted:{work / 'memory.yaml'}', debounce_seconds: 0}}\n"
        + config, encoding="utf-8")
    port = free_port()
    # The lead model's module is this repository's `tests` package.
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "ANTLER_CONFIG": str(work / "antler.yaml"), "ANTLER_HOME": str(home),
           "ANTLER_AUTH_TOKENS": json.dumps(tokens), "LANGGRAPH_CLI_NO_ANALYTICS": "1",
           "LANGSMITH_TRACING": "false", "PYTHONPATH": python_path, **(environment or {})}
    log = work / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(cli), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
             "--port", str(port), "--config", str(REPO / "langgraph.json")],
            cwd=work, env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if process.poll() is not None:
                unavailable(f"`langgraph dev` exited with {process.returncode}:\n{log_tail(log)}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
                if response.status == 200:
                    break
            if time.monotonic() > deadline:
                unavailable(f"`langgraph dev` did not answer /ok within "
                            f"{START_TIMEOUT_SECONDS:.0f}s:\n{log_tail(log)}")
            time.sleep(0.5)
        yield Server(url, home)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
