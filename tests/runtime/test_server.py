"""The real LangGraph Server (`langgraph dev`) serving Antler from the repository's langgraph.json.

One server for the module, on a free loopback port, with the example auth
handler's token table, an operator config of scripted models and a fresh
`ANTLER_HOME`. Over HTTP, with the `langgraph_sdk` client: a two-turn
conversation whose second turn sees the first (the server's checkpoint), whose
identity is the authenticated user's even though the client claims another,
and a second user refused on the first user's thread. `langgraph dev` runs
the graph under blockbuster, so a blocking call on its event loop fails a run.

Locally the tests skip, with the reason, when the server cannot start (the
`dev` extra is not installed); under `CI=true` they fail instead.
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
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# One server for the module: keep its tests on one xdist worker, which starts it once.
pytestmark = pytest.mark.xdist_group("langgraph-server")

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 90.0
TOKENS = {"tok-alice": {"user": "alice", "roles": ["agent"]},
          "tok-bob": {"user": "bob", "roles": ["agent"]}}
LEAD_SCRIPT = """\
- content: ""
  tool_calls:
    - {name: bash, args: {command: "echo hello > /mnt/user-data/outputs/hello.txt && echo written"}}
- "first answer"
- "second answer"
"""


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the LangGraph server test cannot run in CI: {reason}")
    pytest.skip(reason)


@dataclass
class Server:
    url: str
    home: Path

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


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("langgraph-server"), LEAD_SCRIPT, TOKENS) as running:
        yield running


@contextlib.contextmanager
def serving(work: Path, lead_script: str, tokens: dict[str, Any],
            config: str = "", environment: dict[str, str] | None = None) -> Iterator[Server]:
    """`langgraph dev` on a free port in `work`, its lead model scripted by `lead_script`
    (`config`: more of the operator config, YAML; `environment`: more of the server's)."""
    cli = Path(sys.executable).with_name("langgraph")
    try:
        import langgraph_api  # noqa: F401  (the `inmem` extra: `langgraph dev` needs it)
        import langgraph_sdk  # noqa: F401
    except ImportError as exc:
        unavailable(f"langgraph-cli[inmem] is not installed ({exc}); `make install` adds it")
    if not cli.exists():
        unavailable(f"no `langgraph` command next to {sys.executable}; `make install` adds it")
    home = work / "home"
    (work / "lead.yaml").write_text(lead_script, encoding="utf-8")
    (work / "title.yaml").write_text('- "Greeting thread"\n' * 20, encoding="utf-8")
    (work / "memory.yaml").write_text("""- '["The user greets."]'\n""" * 20, encoding="utf-8")
    (work / "antler.yaml").write_text(
        f"models: {{default: 'scripted:{work / 'lead.yaml'}'}}\n"
        f"title: {{model: 'scripted:{work / 'title.yaml'}'}}\n"
        f"memory: {{model: 'scripted:{work / 'memory.yaml'}', debounce_seconds: 0}}\n"
        + config, encoding="utf-8")
    port = free_port()
    env = {**os.environ, "ANTLER_CONFIG": str(work / "antler.yaml"), "ANTLER_HOME": str(home),
           "ANTLER_AUTH_TOKENS": json.dumps(tokens), "LANGGRAPH_CLI_NO_ANALYTICS": "1",
           "LANGSMITH_TRACING": "false", **(environment or {})}
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


@dataclass
class Conversation:
    thread_id: str
    metadata: dict[str, Any]
    values: dict[str, Any]


@pytest.fixture(scope="module")
def conversation(server) -> Conversation:
    """Alice's two turns on a new thread; the first claims to be mallory, an admin."""
    alice = server.client("tok-alice")
    thread = alice.threads.create()
    for text, context in (("hello there", {"user_id": "mallory", "roles": ["admin"]}),
                          ("second", None)):
        result = alice.runs.wait(thread["thread_id"], "antler", context=context,
                                 input={"messages": [{"role": "user", "content": text}]})
        assert not (isinstance(result, dict) and "__error__" in result), result
    state = alice.threads.get_state(thread["thread_id"])
    return Conversation(thread["thread_id"], alice.threads.get(thread["thread_id"])["metadata"],
                        state["values"])


def test_the_second_turn_sees_the_first_through_the_servers_checkpoint(conversation):
    # dynamic_context's date reminder is the one system message the history holds.
    turns = [(m["type"], m["content"]) for m in conversation.values["messages"]
             if m["type"] != "system"]
    assert turns == [("human", "hello there"), ("ai", ""), ("tool", "written"),
                     ("ai", "first answer"), ("human", "second"), ("ai", "second answer")]
    assert conversation.values["title"] == "Greeting thread"


def test_the_run_is_the_authenticated_users_not_the_one_the_client_claims(server, conversation):
    thread_dir = server.home / "users" / "alice" / "threads" / conversation.thread_id
    assert conversation.values["thread_data"]["outputs_path"] == str(
        thread_dir / "user-data" / "outputs")
    assert (thread_dir / "user-data" / "outputs" / "hello.txt").read_text() == "hello\n"
    assert not (server.home / "users" / "mallory").exists()
    assert conversation.metadata["owner"] == "alice"


def test_a_second_user_is_refused_on_the_first_users_thread(server, conversation):
    import httpx

    bob = server.client("tok-bob")
    # The server answers 404 for a thread the auth filter hides: bob learns nothing.
    with pytest.raises(httpx.HTTPStatusError) as read:
        bob.threads.get_state(conversation.thread_id)
    with pytest.raises(httpx.HTTPStatusError) as run:
        bob.runs.wait(conversation.thread_id, "antler",
                      input={"messages": [{"role": "user", "content": "let me in"}]})
    assert (read.value.response.status_code, run.value.response.status_code) == (404, 404)
    assert conversation.thread_id not in {t["thread_id"] for t in bob.threads.search()}
    alice = server.client("tok-alice")
    values = alice.threads.get_state(conversation.thread_id)["values"]
    assert len(values["messages"]) == len(conversation.values["messages"])


@pytest.mark.parametrize("token", [None, "tok-mallory"])
def test_a_request_without_a_known_token_is_refused(server, token):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{server.url}/threads", data=b"{}", headers=headers,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
