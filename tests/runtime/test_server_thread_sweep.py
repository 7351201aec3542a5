"""Threads the server removes without a request lose their files at the next sweep.

LangGraph Server deletes threads no request names (its TTL sweep, rows deleted
in its database), where no middleware sees it. `GoneThreadSweep` asks the
server, as itself, about every thread with a served note and removes the noted
directories of those it answers 404 for. In process, against a Starlette app
standing for the server (its auth lets only the in-process ``/noauth`` client
through): only noted threads the server lacks lose files, never a thread it
has, a directory without a note or anything when the server cannot say; a run
claiming the thread meanwhile keeps its note; the app's lifespan sweeps at
start and then periodically; a thread created with a ``ttl`` (which the served
app lets through) loses its files at the first sweep after the server drops it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from antler.errors import ConfigError
from antler.plugin_api.paths import PathLayout
from antler.runtime.servedfiles import RECORD_DIR, ServedThreadFiles
from antler.runtime.serverapp import (
    SWEEP_SECONDS_ENV,
    DeletedThreadFiles,
    GoneThreadSweep,
    served_app,
)
from tests.runtime.test_server_thread_files import make


class Server:
    """The server's threads API as the sweep sees it: `threads` exist; its auth answers
    401 to anyone but the in-process client; `search` is what the search answers."""

    def __init__(self, threads: set[str], search: int = 200, failing: bool = False) -> None:
        self.threads = threads
        self.search = search
        self.failing = failing
        self.asked: list[str] = []
        self.ttls: dict[str, Any] = {}

    def expire(self) -> None:
        """The server's TTL sweep: every thread with a ``ttl`` goes, no request naming it."""
        self.threads -= set(self.ttls)

    def app(self, lifespan: Any = None) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        def authenticated(request: Request) -> bool:
            return request.scope.get("root_path") == "/noauth"

        async def search(request: Request) -> JSONResponse:
            if not authenticated(request):
                return JSONResponse({"detail": "no token"}, 401)
            return JSONResponse([], self.search)

        async def get(request: Request) -> JSONResponse:
            thread_id = request.path_params["thread_id"]
            self.asked.append(thread_id)
            if not authenticated(request):
                return JSONResponse({"detail": "no token"}, 401)
            if self.failing:
                raise RuntimeError("the database is down")
            if thread_id in self.threads:
                return JSONResponse({"thread_id": thread_id})
            return JSONResponse({"detail": f"Thread with ID {thread_id} not found"}, 404)

        async def create(request: Request) -> JSONResponse:
            body = await request.json()
            thread_id = body.get("thread_id") or str(uuid.uuid4())
            self.threads.add(thread_id)
            if body.get("ttl") is not None:
                self.ttls[thread_id] = body["ttl"]
            return JSONResponse({"thread_id": thread_id})

        async def patch(request: Request) -> JSONResponse:
            thread_id = request.path_params["thread_id"]
            self.ttls[thread_id] = (await request.json()).get("ttl")
            return JSONResponse({"thread_id": thread_id})

        return Starlette(routes=[Route("/threads/search", search, methods=["POST"]),
                                 Route("/threads", create, methods=["POST"]),
                                 Route("/threads/{thread_id}", get, methods=["GET"]),
                                 Route("/threads/{thread_id}", patch, methods=["PATCH"])],
                         lifespan=lifespan)


@pytest.fixture
def files(tmp_path) -> ServedThreadFiles:
    return ServedThreadFiles(PathLayout(tmp_path))


def served_thread(files: ServedThreadFiles, *users: str) -> tuple[str, list[Path]]:
    """A thread whose served runs noted `users`' directories, each holding a file."""
    thread_id = str(uuid.uuid4())
    for user in users:
        files.claim(thread_id, user, user)
    return thread_id, [make(files, user, thread_id) for user in users]


def sweep(files: ServedThreadFiles, server: Server) -> list[str]:
    return asyncio.run(GoneThreadSweep(files.paths, interval=60).sweep(server.app()))


def test_a_noted_thread_the_server_lacks_loses_its_files_and_nothing_else_does(files):
    gone, gone_dirs = served_thread(files, "alice", "carol")
    kept, kept_dirs = served_thread(files, "alice")
    # A directory without a note (a local thread's), whose id the server lacks too.
    local = make(files, "alice", str(uuid.uuid4()))
    # Files in the notes' directory that are no note of a thread id.
    records = Path(files.paths.base) / RECORD_DIR
    (records / "README").write_text("not a note")
    (records / "link").symlink_to(records / kept)
    assert sweep(files, Server({kept})) == [gone]
    assert not any(d.exists() for d in gone_dirs) and files.users(gone) is None
    assert all(d.exists() for d in kept_dirs) and files.users(kept) == ["alice"]
    assert (local / "user-data" / "outputs" / "f.txt").exists()
    assert (records / "README").exists() and (records / "link").is_symlink()
    assert sweep(files, Server({kept})) == []  # the next sweep has nothing left to do


@pytest.mark.parametrize("server", [
    Server(set(), search=404),  # the threads API is turned off: every id would answer 404
    Server(set(), failing=True),  # the server errs
], ids=["threads API off", "server error"])
def test_nothing_is_removed_when_the_server_cannot_say(files, server):
    thread_id, directories = served_thread(files, "alice")
    assert sweep(files, server) == []
    assert all(d.exists() for d in directories) and files.users(thread_id) == ["alice"]


def test_the_server_is_asked_as_itself_not_as_any_caller(files):
    # Seen from outside (no /noauth root path) every thread answers 401: nothing goes.
    thread_id, directories = served_thread(files, "alice")
    server = Server(set())
    from starlette.testclient import TestClient

    assert TestClient(server.app()).get(f"/threads/{thread_id}").status_code == 401
    assert sweep(files, server) == [thread_id]
    assert not directories[0].exists()


def test_a_run_claiming_the_thread_while_it_is_swept_keeps_its_note(files):
    thread_id, directories = served_thread(files, "alice")
    claimed = threading.Event()

    def gone() -> bool:
        # The server said 404; a run of a thread created again under the id claims now.
        waiting = threading.Thread(target=lambda: (files.claim(thread_id, "dave", "dave"),
                                                   claimed.set()))
        waiting.start()
        assert not claimed.wait(0.2)  # blocked on the note's lock until the removal ends
        return True

    assert files.remove_if_gone(thread_id, gone) == directories
    assert claimed.wait(10)
    assert files.users(thread_id) == ["dave"] and not directories[0].exists()


def test_the_served_app_sweeps_when_it_starts_and_then_periodically(files, monkeypatch):
    from starlette.testclient import TestClient

    first, first_dirs = served_thread(files, "alice")
    server = Server(set())
    monkeypatch.setenv(SWEEP_SECONDS_ENV, "0.05")
    app = served_app({"human"}, files.paths)
    assert app.router.lifespan_context is not None  # the sweep, started with the app
    sweeping = GoneThreadSweep(files.paths)
    assert sweeping.interval == 0.05
    with TestClient(server.app(lifespan=sweeping.lifespan())):
        wait_until(lambda: not first_dirs[0].exists())
        second, second_dirs = served_thread(files, "bob")
        wait_until(lambda: not second_dirs[0].exists())
    assert files.users(first) is None and files.users(second) is None


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the sweep did not run"
        time.sleep(0.01)


def test_a_bad_sweep_interval_stops_the_app_with_the_fix(files, monkeypatch):
    monkeypatch.setenv(SWEEP_SECONDS_ENV, "-1")
    with pytest.raises(ConfigError, match=f"{SWEEP_SECONDS_ENV}='-1' is not a number"):
        served_app({"human"}, files.paths)


def test_a_thread_with_a_ttl_loses_its_files_at_the_sweep_after_the_server_drops_it(files):
    from starlette.testclient import TestClient

    server = Server(set())
    client = TestClient(DeletedThreadFiles(server.app(), files.paths))
    thread_id = str(uuid.uuid4())
    ttl = {"strategy": "delete", "ttl": 1}
    # The served app lets a thread's ttl through, on creation and on a change.
    assert client.post("/threads", json={"thread_id": thread_id, "ttl": ttl}).status_code == 200
    assert client.patch(f"/threads/{thread_id}", json={"ttl": ttl}).status_code == 200
    assert server.ttls == {thread_id: ttl}
    # Its served runs note their directories, which stay while the server has the thread.
    files.claim(thread_id, "alice", "alice")
    files.claim(thread_id, "carol", "alice")
    directories = [make(files, user, thread_id) for user in ("alice", "carol")]
    assert sweep(files, server) == []
    assert all(d.exists() for d in directories)
    server.expire()  # the ttl ran out: the server drops the thread, no request names it
    assert sweep(files, server) == [thread_id]
    assert not any(d.exists() for d in directories) and files.users(thread_id) is None
