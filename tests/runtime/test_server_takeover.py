"""A stated identity's takeover of another user's directory, refused over HTTP before a run starts.

With ``trust_client_identity`` a run's ``context.user_id`` names whose
directory the run uses. `StatedIdentityCheck` refuses, with 409 and the
reason, a run request (``/threads/{id}/runs``, its ``/stream``, ``/wait`` and
``/crons`` forms, a protocol ``run.start``) stating a user whose directory of
the thread exists and no run of the thread made; the server's auth, asked as
the caller, says who the caller is. In process, in front of an app whose
"auth" finds the caller and that records the requests reaching it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from antler.plugin_api.paths import PathLayout
from antler.runtime.servedfiles import ServedThreadFiles
from antler.runtime.serverapp import (
    DeletedThreadFiles,
    RunInputCheck,
    StatedIdentityCheck,
    served_app,
)

THREAD = "0c6f4d1e-3b6a-4c0e-9f49-1a2b3c4d5e6f"
HUMAN = {"messages": [{"role": "user", "content": "hello"}]}


class Server:
    """Stands for the server: its auth finds `caller` (None: refuses with 401), and it
    answers 200, keeping (method, path) of each request."""

    def __init__(self, caller: str | None) -> None:
        self.caller = caller
        self.requests: list[tuple[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.requests.append((scope["method"], scope["path"]))
        status = 401 if self.caller is None else 200
        if self.caller is not None:
            scope["user"] = {"identity": self.caller}  # as the auth middleware does
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


@pytest.fixture
def files(tmp_path) -> ServedThreadFiles:
    return ServedThreadFiles(PathLayout(tmp_path))


def bobs_directory(files: ServedThreadFiles) -> Path:
    """Bob's directory of THREAD, made by a local run (no served note)."""
    directory = files.directory("bob", THREAD)
    assert directory is not None
    (directory / "user-data" / "outputs").mkdir(parents=True)
    (directory / "user-data" / "outputs" / "secret.txt").write_text("bob's")
    return directory


def client(files: ServedThreadFiles, caller: str | None) -> tuple[Any, Server]:
    from starlette.testclient import TestClient

    server = Server(caller)
    return TestClient(StatedIdentityCheck(server, files.paths)), server


RUN_PATHS = [f"/threads/{THREAD}/runs", f"/threads/{THREAD}/runs/wait",
             f"/threads/{THREAD}/runs/stream", f"/threads/{THREAD}/runs/crons"]


@pytest.mark.parametrize("path", RUN_PATHS)
def test_stating_another_users_identity_on_their_threads_id_is_refused_before_a_run(
        files, path):
    bobs = bobs_directory(files)
    http, server = client(files, "front")
    response = http.post(path, json={"input": HUMAN, "context": {"user_id": "bob"}})
    assert response.status_code == 409
    detail = response.json()["detail"]
    assert f"thread {THREAD}: user 'bob' already has files" in detail
    assert "Start a new thread, or run as 'front'" in detail
    # Only the caller's identity was asked for; no run request reached the server.
    assert server.requests == [("GET", f"/threads/{THREAD}")]
    assert (bobs / "user-data" / "outputs" / "secret.txt").exists()
    assert files.users(THREAD) is None  # nothing noted


def test_a_protocol_run_start_stating_no_one_runs_as_the_default_user(files):
    default = files.directory("default", THREAD)
    assert default is not None
    default.mkdir(parents=True)
    http, server = client(files, "front")
    response = http.post(f"/threads/{THREAD}/commands",
                         json={"id": 1, "method": "run.start", "params": {"input": HUMAN}})
    assert response.status_code == 409 and "user 'default'" in response.json()["detail"]
    assert ("POST", f"/threads/{THREAD}/commands") not in server.requests


def test_the_same_run_passes_when_it_is_no_takeover(files):
    bobs_directory(files)
    # Bob himself, authenticated, may use his own directory.
    http, server = client(files, "bob")
    assert http.post(RUN_PATHS[1], json={"input": HUMAN, "context": {"user_id": "bob"}}
                     ).status_code == 200
    assert server.requests[-1] == ("POST", RUN_PATHS[1])
    # A run of this thread noted bob's directory: later runs stating bob continue it.
    files.claim(THREAD, "bob", "bob")
    http, server = client(files, "front")
    assert http.post(RUN_PATHS[1], json={"input": HUMAN, "context": {"user_id": "bob"}}
                     ).status_code == 200
    # A stated user without a directory of the thread, or none stated: no question asked.
    server.requests.clear()
    for context in ({"user_id": "carol"}, None):
        assert http.post(RUN_PATHS[0], json={"input": HUMAN, "context": context}
                         ).status_code == 200
    assert server.requests == [("POST", RUN_PATHS[0])] * 2
    # A stateless run names no thread.
    assert http.post("/runs/wait", json={"input": HUMAN, "context": {"user_id": "bob"}}
                     ).status_code == 200


def test_a_caller_the_auth_refuses_gets_the_servers_answer(files):
    bobs_directory(files)
    http, server = client(files, None)
    response = http.post(RUN_PATHS[0], json={"input": HUMAN, "context": {"user_id": "bob"}})
    assert response.status_code == 401
    assert server.requests[-1] == ("POST", RUN_PATHS[0])


@pytest.mark.parametrize("user", ["..", "../bob", "bob/../../x", "/etc", "a\x00"])
def test_a_hostile_stated_identity_names_no_path(files, user):
    bobs_directory(files)
    http, _ = client(files, "front")
    assert http.post(RUN_PATHS[0], json={"input": HUMAN, "context": {"user_id": user}}
                     ).status_code == 200  # the graph refuses it when the run starts


def test_the_served_app_checks_identities_only_when_it_trusts_them(tmp_path):
    layout = PathLayout(tmp_path)
    trusting = [m.cls for m in served_app({"human"}, layout,
                                          trust_client_identity=True).user_middleware]
    assert trusting[:3] == [RunInputCheck, StatedIdentityCheck, DeletedThreadFiles]
    assert StatedIdentityCheck not in [m.cls for m in served_app({"human"}, layout)
                                       .user_middleware]


ASSISTANT = "5e0a3c7d-2f4b-4a61-8d0e-9b7c6a5f4e3d"
ASSISTANTS = {ASSISTANT: {"assistant_id": ASSISTANT, "graph_id": "antler",
                          "context": {"user_id": "bob"}}}


class AssistantServer(Server):
    """`Server`, which also answers ``GET /assistants/{id}`` with the assistant as the
    caller may read it (404 for one it lacks or hides)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        if scope["method"] != "GET" or not path.startswith("/assistants/") \
                or self.caller is None:
            await super().__call__(scope, receive, send)
            return
        self.requests.append((scope["method"], path))
        assistant = ASSISTANTS.get(path.rsplit("/", 1)[1])
        await send({"type": "http.response.start", "status": 200 if assistant else 404,
                    "headers": []})
        await send({"type": "http.response.body",
                    "body": json.dumps(assistant or {"detail": "not found"}).encode()})


def assistant_client(files: ServedThreadFiles, caller: str) -> tuple[Any, Server]:
    from starlette.testclient import TestClient

    server = AssistantServer(caller)
    return TestClient(StatedIdentityCheck(server, files.paths)), server


RUN_START = f"/threads/{THREAD}/commands"


@pytest.mark.parametrize("path", [*RUN_PATHS, RUN_START])
def test_an_identity_from_the_runs_assistant_is_refused_before_a_run(files, path):
    bobs = bobs_directory(files)
    http, server = assistant_client(files, "front")
    run = {"assistant_id": ASSISTANT, "input": HUMAN}
    body = {"id": 1, "method": "run.start", "params": run} if path == RUN_START else run
    response = http.post(path, json=body)
    assert response.status_code == 409, response.text
    assert "user 'bob' already has files" in response.json()["detail"]
    # The assistant was read as the caller; no run request reached the server.
    assert ("GET", f"/assistants/{ASSISTANT}") in server.requests
    assert ("POST", path) not in server.requests
    assert (bobs / "user-data" / "outputs" / "secret.txt").exists()


@pytest.mark.parametrize("path", [RUN_PATHS[0], RUN_START])
def test_an_identity_from_the_runs_configurable_is_refused_before_a_run(files, path):
    bobs_directory(files)
    http, server = client(files, "front")
    run = {"assistant_id": "antler", "input": HUMAN,
           "config": {"configurable": {"user_id": "bob"}}}
    body = {"id": 1, "method": "run.start", "params": run} if path == RUN_START else run
    response = http.post(path, json=body)
    assert response.status_code == 409 and "user 'bob'" in response.json()["detail"]
    assert ("POST", path) not in server.requests


def test_the_runs_own_context_stands_over_its_assistants(files):
    bobs_directory(files)
    http, server = assistant_client(files, "front")
    # The request's context names carol: the assistant's bob is not the run's identity.
    response = http.post(RUN_PATHS[0], json={"assistant_id": ASSISTANT, "input": HUMAN,
                                             "context": {"user_id": "carol"}})
    assert response.status_code == 200
    assert server.requests == [("POST", RUN_PATHS[0])]  # and it was not asked for
    # An assistant the caller cannot read states no one (the server refuses the run).
    missing = "00000000-0000-4000-8000-000000000000"
    assert http.post(RUN_PATHS[0], json={"assistant_id": missing, "input": HUMAN}
                     ).status_code == 200
    assert server.requests[-2:] == [("GET", f"/assistants/{missing}"), ("POST", RUN_PATHS[0])]
