"""`DELETE /threads/{id}` on the served app removes the thread's files too.

On the real `langgraph dev` server (started as in `test_server.py`, skipped
locally without the `dev` extra, failed under `CI=true`): a thread whose run
wrote a file in its sandbox is deleted by its owner, and its directory under
`ANTLER_HOME` is gone (the sandbox namespace the served process kept for it
ended) when the 204 arrives. Another user's DELETE, a missing thread's and a
hostile id's answer 404/422 and remove nothing. The middleware alone
(`DeletedThreadFiles`), behind an app that lets every DELETE succeed, shows
that no hostile thread id or user identity reaches a path outside the
`users` tree, and that a failed removal is logged with the directory and
the fix.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from antler.plugin_api.paths import PathLayout
from antler.runtime import servedfiles
from antler.runtime.sandbox.threaddir import INIT_FILE, ThreadDirectoryError
from antler.runtime.serverapp import DeletedThreadFiles
from tests.runtime.langgraph_dev import Server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HOSTILE_PATHS = ["/threads/..", "/threads/%2E%2E", "/threads/..%2F..%2Fbob",
                 "/threads/%2e%2e%2f%2e%2e%2fbob", "/threads/%2Fetc", "/threads/%2F",
                 "/threads/.%2E/users", "/threads/..%5C..%5Cbob"]


@pytest.fixture(scope="module")
def server(langgraph_server: Server) -> Server:
    """The session's server (tests/runtime/conftest.py)."""
    return langgraph_server


def thread_dir(server: Server, user: str, thread_id: str) -> Path:
    return server.home / "users" / user / "threads" / thread_id


def run_thread(server: Server, token: str, user: str) -> str:
    """A new thread of `user` after one turn whose sandbox command wrote a file."""
    client = server.client(token)
    thread_id = str(client.threads.create()["thread_id"])
    result = client.runs.wait(thread_id, "antler",
                              input={"messages": [{"role": "user", "content": "write it"}]})
    assert not (isinstance(result, dict) and "__error__" in result), result
    kept = thread_dir(server, user, thread_id) / "user-data" / "outputs" / "kept.txt"
    assert kept.read_text() == "kept\n"
    return thread_id


def status_of(call: Any) -> int:
    import httpx

    with pytest.raises(httpx.HTTPStatusError) as caught:
        call()
    return caught.value.response.status_code


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_owners_delete_removes_the_threads_files_and_ends_its_namespace(server):
    thread_id = run_thread(server, "tok-alice", "alice")
    directory = thread_dir(server, "alice", thread_id)
    init = directory / INIT_FILE
    pid = int(init.read_text().split()[0]) if init.exists() else None
    if shutil.which("bwrap"):  # the bubblewrap sandbox: the namespace the server keeps
        assert pid is not None and alive(pid)  # for the thread's next run
    server.client("tok-alice").threads.delete(thread_id)
    assert not directory.exists()
    assert pid is None or not alive(pid)
    assert status_of(lambda: server.client("tok-alice").threads.get(thread_id)) == 404


def test_another_users_or_a_missing_threads_delete_removes_nothing(server):
    thread_id = run_thread(server, "tok-alice", "alice")
    directory = thread_dir(server, "alice", thread_id)
    # bob holds a directory of that id too (as if a run of his had used it): his DELETE of
    # alice's thread is refused, so neither goes.
    (thread_dir(server, "bob", thread_id) / "user-data").mkdir(parents=True)
    assert status_of(lambda: server.client("tok-bob").threads.delete(thread_id)) == 404
    assert (directory / "user-data" / "outputs" / "kept.txt").exists()
    assert thread_dir(server, "bob", thread_id).is_dir()
    # A thread the server does not have: 404, and alice's directory of that id stays.
    missing = str(uuid.uuid4())
    (thread_dir(server, "alice", missing) / "user-data").mkdir(parents=True)
    assert status_of(lambda: server.client("tok-alice").threads.delete(missing)) == 404
    assert thread_dir(server, "alice", missing).is_dir()
    # Without a token: 401, nothing removed.
    assert status_of(lambda: server.client(None).threads.delete(thread_id)) == 401
    assert directory.is_dir()


def test_a_hostile_thread_id_over_http_removes_nothing(server):
    thread_id = run_thread(server, "tok-alice", "alice")
    canaries = [thread_dir(server, "alice", thread_id), server.home / "users" / "bob",
                server.home / "users", server.home / "outside"]
    (server.home / "users" / "bob").mkdir(parents=True, exist_ok=True)
    (server.home / "outside").mkdir(exist_ok=True)
    address = urlparse(server.url)
    for path in HOSTILE_PATHS:
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
        try:  # http.client sends the path as written: no dot-segment clean-up on the way
            connection.request("DELETE", path, headers={"Authorization": "Bearer tok-alice"})
            status = connection.getresponse().status
        finally:
            connection.close()
        assert not 200 <= status < 300, path
        assert all(canary.is_dir() for canary in canaries), path


# -- the middleware alone, behind an app that lets every DELETE succeed ---------------------

def permissive(user: Any, status: int = 204) -> Any:
    """An ASGI app answering `status` to everything, its auth having found `user`."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope["user"] = user  # as the server's auth middleware does, in the scope it gets
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    return app


def delete(app: Any, path: str) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "DELETE", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": []}
    asyncio.run(app(scope, receive, send))
    return int(sent[0]["status"])


@pytest.fixture
def home(tmp_path) -> Path:
    """A base directory: alice's and bob's thread `t1`, and folders outside `users`."""
    for user in ("alice", "bob"):
        outputs = tmp_path / "users" / user / "threads" / "t1" / "user-data" / "outputs"
        outputs.mkdir(parents=True)
        (outputs / "kept.txt").write_text("kept\n")
    (tmp_path / "outside" / "threads" / "t1").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    return tmp_path


def everything(home: Path) -> set[str]:
    return {str(path.relative_to(home)) for path in home.rglob("*")}


@pytest.mark.parametrize("path", [
    "/threads/..", "/threads/.", "/threads/../..", "/threads//etc", "/threads/\\etc",
    "/threads/..\\..\\outside", "/threads/t1\x00", "/threads/%2E%2E", "/threads/" + "a" * 300])
def test_no_hostile_thread_id_reaches_a_path_even_when_the_server_lets_it_through(home, path):
    before = everything(home)
    app = DeletedThreadFiles(permissive({"identity": "alice"}), PathLayout(home))
    assert delete(app, path) == 204
    assert everything(home) == before


@pytest.mark.parametrize("identity", ["..", "../bob", "/", "alice/../bob", ".", "../../outside"])
def test_no_hostile_user_identity_reaches_a_path(home, identity):
    before = everything(home)
    app = DeletedThreadFiles(permissive({"identity": identity}), PathLayout(home))
    assert delete(app, "/threads/t1") == 204
    assert everything(home) == before


def test_only_a_successful_delete_removes_and_only_the_callers_thread(home):
    layout = PathLayout(home)
    for status in (404, 403, 409, 422, 500):
        assert delete(DeletedThreadFiles(permissive({"identity": "alice"}, status), layout),
                      "/threads/t1") == status
    assert (home / "users" / "alice" / "threads" / "t1").is_dir()
    assert delete(DeletedThreadFiles(permissive({"identity": "alice"}, 204), layout),
                  "/threads/t1/") == 204
    assert not (home / "users" / "alice" / "threads" / "t1").exists()
    assert (home / "users" / "bob" / "threads" / "t1" / "user-data").is_dir()
    # Other routes under the thread are not deletes of it.
    assert delete(DeletedThreadFiles(permissive({"identity": "bob"}), layout),
                  "/threads/t1/runs/r1") == 204
    assert (home / "users" / "bob" / "threads" / "t1").is_dir()


def test_without_an_auth_handler_the_default_users_thread_goes(home):
    (home / "users" / "default" / "threads" / "t2").mkdir(parents=True)
    app = DeletedThreadFiles(permissive(None), PathLayout(home))
    assert delete(app, "/threads/t2") == 204
    assert not (home / "users" / "default" / "threads" / "t2").exists()


def test_a_failed_removal_is_logged_with_the_directory_and_the_fix(home, monkeypatch, caplog):
    def refuse(directory: Path) -> None:
        denied = PermissionError(13, "Permission denied", str(directory / "user-data"))
        raise ThreadDirectoryError(f"cannot remove the thread's files: {denied}") from denied

    monkeypatch.setattr(servedfiles, "remove_thread_directory", refuse)
    app = DeletedThreadFiles(permissive({"identity": "alice"}), PathLayout(home))
    with caplog.at_level(logging.ERROR, logger="antler.runtime.serverapp"):
        assert delete(app, "/threads/t1") == 204  # the checkpoints are gone: still a success
    directory = home / "users" / "alice" / "threads" / "t1"
    [record] = [r for r in caplog.records if r.name == "antler.runtime.serverapp"]
    message = record.getMessage()
    assert message.startswith("DELETE /threads/t1: ")
    assert f"were not removed: {directory}: {directory / 'user-data'}: Permission denied" \
        in message
    assert "remove them by hand" in message and "checkpoints" in message
    assert os.path.isdir(directory)
