"""Every way the served API removes a thread removes its files, on the real server.

On `langgraph dev` (started as in `test_server.py`; skipped locally without the
`dev` extra, failed under `CI=true`), each the way a careless client or an
attacker would hit it:

* ``POST /threads/prune`` (strategy ``delete``) removes the pruned threads'
  directories; a prune the server refuses (another user's thread in the list,
  ``keep_latest``, which the in-memory server does not offer) removes nothing;
* a thread's ``ttl`` is the server's to apply: a thread created or changed with
  one runs as any other, and its files are noted for the served app's sweep;
* a copy of a thread keeps its files apart: its runs use its own directory, and
  deleting either thread leaves the other's files;
* a stateless run (``POST /runs/wait``: the server deletes its thread when the
  run ends) leaves no thread directory behind;
* a ``DELETE`` while a run of the thread is still in its sandbox command cancels
  the run first and answers 204 as LangGraph documents; the directory is gone
  then and stays gone (the run writes nothing afterwards);
* with ``server: {trust_client_identity: true}`` a thread run as stated users
  loses every one of their directories of it when deleted, and a client cannot
  take over (and later delete) another user's existing directory by creating a
  thread under its id and stating that user: the run request answers 409 with
  the reason, and no run starts, whether the identity is stated in the run's
  context, its assistant's or its configurable;
* a thread the server no longer has (its row deleted in the database, a TTL
  sweep) loses every noted directory at the served app's next sweep; a thread it
  has, and a directory without a note, keep theirs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.langgraph_dev import Server, serving

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
# The trusting server's tests share a worker (it starts that server once); the session's
# server's tests share another (tests/runtime/conftest.py).
ON_THE_TRUSTING_SERVER = pytest.mark.xdist_group("langgraph-server-removal-trusting")

# Every run ("write it", tests/runtime/served_model.py): a sandbox command that writes
# kept.txt and, in a thread whose uploads hold `slow`, then sleeps and writes late.txt;
# then a file written by the write_file tool; then an answer.
MESSAGE = {"messages": [{"role": "user", "content": "write it"}]}


@pytest.fixture(scope="module")
def server(langgraph_server: Server) -> Server:
    """The session's server (tests/runtime/conftest.py)."""
    return langgraph_server


@pytest.fixture(scope="module")
def interrupted(server: Server) -> Server:
    """The server whose run its test cancels: the session's (its model answers each run
    by the run's own thread, so the turns the cancelled run leaves unread are no one's)."""
    return server


@pytest.fixture(scope="module")
def trusting(tmp_path_factory) -> Iterator[Server]:
    tokens = {"tok-front": {"user": "front", "roles": ["agent"]},
              "tok-admin": {"user": "admin", "roles": ["agent", "admin"]}}
    with serving(tmp_path_factory.mktemp("langgraph-trusting"), tokens,
                 config="server: {trust_client_identity: true}\n",
                 environment={"ANTLER_SERVED_SWEEP_SECONDS": "1"}) as running:
        yield running


def thread_dir(server: Server, user: str, thread_id: str) -> Path:
    return server.home / "users" / user / "threads" / thread_id


def kept(server: Server, user: str, thread_id: str) -> Path:
    return thread_dir(server, user, thread_id) / "user-data" / "outputs" / "kept.txt"


def run_thread(server: Server, token: str, user: str, context: Any = None) -> str:
    """A new thread after one turn whose sandbox command wrote kept.txt in `user`'s
    directory of it."""
    client = server.client(token)
    thread_id = str(client.threads.create()["thread_id"])
    result = client.runs.wait(thread_id, "antler", input=MESSAGE, context=context)
    assert not (isinstance(result, dict) and "__error__" in result), result
    assert kept(server, user, thread_id).read_text() == "kept\n"
    return thread_id


def status_of(call: Any) -> int:
    import httpx

    with pytest.raises(httpx.HTTPStatusError) as caught:
        call()
    return caught.value.response.status_code


def threads_of(server: Server, user: str) -> set[str]:
    threads = server.home / "users" / user / "threads"
    return {p.name for p in threads.iterdir()} if threads.is_dir() else set()


# -- prune -----------------------------------------------------------------------------------

def test_a_prune_removes_the_files_of_every_thread_it_deleted(server):
    first, second = (run_thread(server, "tok-alice", "alice") for _ in range(2))
    alice = server.client("tok-alice")
    assert alice.threads.prune([first, second]) == {"pruned_count": 2}
    for thread_id in (first, second):
        assert not thread_dir(server, "alice", thread_id).exists()
        assert status_of(lambda t=thread_id: alice.threads.get(t)) == 404


def test_a_prune_the_server_refuses_removes_nothing(server):
    mine = run_thread(server, "tok-alice", "alice")
    bobs = run_thread(server, "tok-bob", "bob")
    alice = server.client("tok-alice")
    # Another user's thread in the list: the whole prune is refused.
    assert status_of(lambda: alice.threads.prune([mine, bobs])) == 404
    # bob cannot prune alice's thread either, even alone.
    assert status_of(lambda: server.client("tok-bob").threads.prune([mine])) == 404
    # keep_latest keeps the thread; this server does not offer it and says so.
    assert status_of(lambda: alice.threads.prune([mine], strategy="keep_latest")) == 422
    assert kept(server, "alice", mine).exists() and kept(server, "bob", bobs).exists()
    assert alice.threads.get(mine)["thread_id"] == mine


def test_a_prune_of_missing_or_hostile_ids_removes_nothing(server):
    missing = str(uuid.uuid4())
    (thread_dir(server, "alice", missing) / "user-data").mkdir(parents=True)
    alice = server.client("tok-alice")
    assert status_of(lambda: alice.threads.prune([missing])) == 404
    assert thread_dir(server, "alice", missing).is_dir()
    for hostile in ("..", "../bob", "/etc"):
        assert status_of(lambda h=hostile: alice.threads.prune([h])) == 422
    assert (server.home / "users" / "alice").is_dir()
    # A hostile size: refused with the limit before any thread is looked at.
    import httpx

    many = [str(uuid.uuid4()) for _ in range(1001)]
    response = httpx.post(f"{server.url}/threads/prune", json={"thread_ids": many},
                          headers={"Authorization": "Bearer tok-alice"})
    assert response.status_code == 400
    assert "names 1001 threads; prune at most 1000" in response.json()["detail"]
    assert thread_dir(server, "alice", missing).is_dir()


def test_a_thread_ttl_is_the_servers_to_apply(server):
    # The server deletes an expired thread where no middleware sees it; the served app's
    # sweep removes its files then (tests/runtime/test_server_thread_sweep.py).
    import httpx

    headers = {"Authorization": "Bearer tok-alice"}
    ttl = {"ttl": {"strategy": "delete", "ttl": 60}}
    created = httpx.post(server.url + "/threads", json=ttl, headers=headers)
    assert created.status_code == 200, created.text
    thread_id = created.json()["thread_id"]
    changed = httpx.patch(f"{server.url}/threads/{thread_id}", json=ttl, headers=headers)
    assert changed.status_code == 200, changed.text
    # The thread runs as any other, and its files are noted for the sweep.
    client = server.client("tok-alice")
    client.runs.wait(thread_id, "antler", input=MESSAGE)
    assert kept(server, "alice", thread_id).exists()
    assert (server.home / "served-threads" / thread_id).read_text().split() == ["alice"]


def test_a_copy_keeps_its_files_apart_from_the_original(server):
    # A copy carries the original's checkpoints (its thread_data and sandbox included):
    # its runs must still use its own directory, and each delete only its own.
    original = run_thread(server, "tok-alice", "alice")
    alice = server.client("tok-alice")
    copy = str(alice.threads.copy(original)["thread_id"])
    result = alice.runs.wait(copy, "antler", input=MESSAGE)
    assert not (isinstance(result, dict) and "__error__" in result), result
    assert kept(server, "alice", copy).exists()
    alice.threads.delete(original)
    assert not thread_dir(server, "alice", original).exists()
    assert kept(server, "alice", copy).exists()
    alice.threads.delete(copy)
    assert not thread_dir(server, "alice", copy).exists()


def test_a_thread_id_sent_in_the_runs_config_names_no_other_directory(server):
    # The server's thread id, not one the client puts in the run's configurable, names
    # the directory: a hostile one reaches no path, another user's reaches not theirs.
    alice = server.client("tok-alice")
    bobs = run_thread(server, "tok-bob", "bob")
    before = set((server.home / "users" / "bob").rglob("*"))
    for claimed in ("../../bob/threads/" + bobs, "..", bobs):
        thread_id = str(alice.threads.create()["thread_id"])
        alice.runs.wait(thread_id, "antler", input=MESSAGE, raise_error=False,
                        config={"configurable": {"thread_id": claimed}})
        assert kept(server, "alice", thread_id).exists()  # the server's id named it
        alice.threads.delete(thread_id)
        assert not thread_dir(server, "alice", thread_id).exists()
    assert set((server.home / "users" / "bob").rglob("*")) == before
    assert kept(server, "bob", bobs).read_text() == "kept\n"


# -- stateless runs --------------------------------------------------------------------------

def test_a_stateless_run_leaves_no_thread_directory(server):
    before = threads_of(server, "alice")
    result = server.client("tok-alice").runs.wait(None, "antler", input=MESSAGE)
    assert not (isinstance(result, dict) and "__error__" in result), result
    assert threads_of(server, "alice") == before


# -- a delete during a run -------------------------------------------------------------------

def test_a_delete_during_a_run_cancels_it_first_and_nothing_comes_back(interrupted):
    server = interrupted
    logged = server.log.stat().st_size  # the server's log before this test
    alice = server.client("tok-alice")
    thread_id = str(alice.threads.create()["thread_id"])
    directory = thread_dir(server, "alice", thread_id)
    (directory / "user-data" / "uploads").mkdir(parents=True)
    (directory / "user-data" / "uploads" / "slow").write_text("")
    run = alice.runs.create(thread_id, "antler", input=MESSAGE)
    deadline = time.monotonic() + 60
    while not kept(server, "alice", thread_id).exists():  # the command is in its sleep
        assert time.monotonic() < deadline, alice.runs.get(thread_id, run["run_id"])
        time.sleep(0.1)
    alice.threads.delete(thread_id)  # 204: no error raised
    assert not directory.exists()
    time.sleep(7)  # past the command's sleep and the run's next turns
    assert not directory.exists()
    assert status_of(lambda: alice.threads.get(thread_id)) == 404
    # The run was cancelled before the thread went; it did not go on into a deleted
    # thread (whose end the server's worker then fails on: the thread is not found).
    with server.log.open("rb") as output:
        log = output.read()[logged:].decode(errors="replace")
    assert "Background run interrupted" in log
    assert "Background worker failed" not in log


# -- trust_client_identity -------------------------------------------------------------------

@ON_THE_TRUSTING_SERVER
def test_a_thread_run_as_stated_users_loses_all_their_directories(trusting):
    front = trusting.client("tok-front")
    thread_id = run_thread(trusting, "tok-front", "carol", context={"user_id": "carol"})
    front.runs.wait(thread_id, "antler", input=MESSAGE, context={"user_id": "dave"})
    assert kept(trusting, "dave", thread_id).exists()
    front.threads.delete(thread_id)
    assert not thread_dir(trusting, "carol", thread_id).exists()
    assert not thread_dir(trusting, "dave", thread_id).exists()


@ON_THE_TRUSTING_SERVER
def test_a_stated_identity_cannot_take_over_another_users_directory(trusting):
    # bob's directory of a thread id this server never ran (a local thread, a leftover).
    taken = str(uuid.uuid4())
    secret = thread_dir(trusting, "bob", taken) / "user-data" / "outputs" / "secret.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("bob's\n")
    front = trusting.client("tok-front")
    front.threads.create(thread_id=taken)
    # Refused at the HTTP layer, with the reason and the fix, before any run starts.
    import httpx

    with pytest.raises(httpx.HTTPStatusError) as refused:
        front.runs.wait(taken, "antler", input=MESSAGE, context={"user_id": "bob"})
    assert refused.value.response.status_code == 409
    detail = refused.value.response.json()["detail"]
    assert "take over another user's directory" in detail
    assert "Start a new thread, or run as 'front'" in detail
    assert front.runs.list(taken) == []
    assert not kept(trusting, "bob", taken).exists()  # no command ran in bob's directory
    front.threads.delete(taken)
    assert secret.read_text() == "bob's\n"
    # A stated identity that is no directory name reaches no path either.
    canaries = set((trusting.home / "users").rglob("*"))
    thread_id = str(front.threads.create()["thread_id"])
    for hostile in ("../bob", "..", "/etc", "bob/../alice"):
        front.runs.wait(thread_id, "antler", input=MESSAGE, context={"user_id": hostile},
                        raise_error=False)
    front.threads.delete(thread_id)
    assert canaries <= set((trusting.home / "users").rglob("*"))
    assert secret.read_text() == "bob's\n"


@ON_THE_TRUSTING_SERVER
def test_an_identity_from_an_assistant_or_the_configurable_is_refused_the_same(trusting):
    import httpx

    front, admin = trusting.client("tok-front"), trusting.client("tok-admin")
    # The server makes a run's context of its assistant's (an admin made them) and of the
    # request's configurable: each names the directory the run uses.
    carols = admin.assistants.create("antler", context={"user_id": "carol"})["assistant_id"]
    by_assistant = str(front.threads.create()["thread_id"])
    front.runs.wait(by_assistant, carols, input=MESSAGE)
    assert kept(trusting, "carol", by_assistant).exists()
    by_configurable = str(front.threads.create()["thread_id"])
    front.runs.wait(by_configurable, "antler", input=MESSAGE,
                    config={"configurable": {"user_id": "erin"}})
    assert kept(trusting, "erin", by_configurable).exists()
    # So either stating bob on his directory's thread id is refused before a run starts.
    taken = str(uuid.uuid4())
    secret = thread_dir(trusting, "bob", taken) / "user-data" / "outputs" / "secret.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("bob's\n")
    front.threads.create(thread_id=taken)
    bobs = admin.assistants.create("antler", context={"user_id": "bob"})["assistant_id"]
    for assistant, config in ((bobs, None), ("antler", {"configurable": {"user_id": "bob"}})):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            front.runs.wait(taken, assistant, input=MESSAGE, config=config)
        assert refused.value.response.status_code == 409
        assert "take over another user's directory" in refused.value.response.json()["detail"]
    assert front.runs.list(taken) == []
    front.threads.delete(taken)
    assert secret.read_text() == "bob's\n"


@ON_THE_TRUSTING_SERVER
def test_a_thread_the_server_no_longer_has_loses_its_files_at_the_next_sweep(trusting):
    # This server sweeps every second. A thread it has, after a turn as carol...
    live = run_thread(trusting, "tok-front", "carol", context={"user_id": "carol"})
    # ... and one whose row went without a request: its note and carol's and dave's files.
    # The files first, then the note, whole (renamed into place): a sweep that read the
    # note before the files were made, or half of it, would take the note with it.
    gone = str(uuid.uuid4())
    for user in ("carol", "dave"):
        (thread_dir(trusting, user, gone) / "user-data").mkdir(parents=True)
    note = trusting.home / f"note-{gone}"
    note.write_text("carol\ndave\n")
    note.replace(trusting.home / "served-threads" / gone)
    unnoted = thread_dir(trusting, "carol", str(uuid.uuid4())) / "user-data"
    unnoted.mkdir(parents=True)
    deadline = time.monotonic() + 20
    # The sweep removes the directories, then the note.
    while thread_dir(trusting, "carol", gone).exists() \
            or thread_dir(trusting, "dave", gone).exists() \
            or (trusting.home / "served-threads" / gone).exists():
        assert time.monotonic() < deadline, "the sweep did not remove the gone thread's files"
        time.sleep(0.1)
    assert kept(trusting, "carol", live).exists() and unnoted.exists()
