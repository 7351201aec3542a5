"""`ServedThreadFiles`: where a served thread's files are, noted per run, removed together.

The notes alone (races between runs and a delete, hostile ids, a stated
identity's takeover of a directory), then the served graph as LangGraph Server
runs it (`build_server_agent`, fused and unfused): a run notes the directory it
used, a run without a checkpointer (a stateless run) leaves none, and a run
whose thread was deleted while it ran removes what it wrote after.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from antler.contracts.runcontext import AUTH_USER_KEY
from antler.errors import ClientInputError, InputError
from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL
from antler.plugin_api.paths import PathLayout
from antler.runtime.models import ScriptedChatModel
from antler.runtime.servedfiles import RECORD_DIR, ServedThreadFiles
from antler.runtime.server import build_server_agent
from antler.runtime.storage.base import StorageError
from tests.runtime.test_server_identity import RBAC, SCRIPT, served


@pytest.fixture
def files(tmp_path) -> ServedThreadFiles:
    return ServedThreadFiles(PathLayout(tmp_path))


def make(files: ServedThreadFiles, user: str, thread: str) -> Path:
    directory = files.directory(user, thread)
    assert directory is not None
    (directory / "user-data" / "outputs").mkdir(parents=True)
    (directory / "user-data" / "outputs" / "f.txt").write_text("x")
    return directory


def test_every_directory_a_threads_runs_used_goes_with_it(files):
    files.claim("t1", "carol", "front")
    files.claim("t1", "dave", "front")
    files.claim("t1", "carol", "front")  # noted once
    assert files.users("t1") == ["carol", "dave"]
    carol, dave = make(files, "carol", "t1"), make(files, "dave", "t1")
    front_other = make(files, "front", "t2")
    assert files.remove("t1", "front") == [carol, dave]
    assert not carol.exists() and not dave.exists() and front_other.exists()
    assert files.users("t1") is None


def test_without_a_note_the_authenticated_users_directory_goes(files):
    mine, bobs = make(files, "alice", "t1"), make(files, "bob", "t1")
    assert files.remove("t1", "alice") == [mine]
    assert not mine.exists() and bobs.exists()


def test_a_stated_identity_cannot_adopt_a_directory_no_run_of_the_thread_made(files):
    bobs = make(files, "bob", "t1")
    with pytest.raises(InputError, match="take over another user's directory"):
        files.claim("t1", "bob", "mallory")
    assert files.users("t1") == []  # nothing noted: deleting the thread leaves bob's files
    files.remove("t1", "mallory")
    assert (bobs / "user-data" / "outputs" / "f.txt").exists()
    # The authenticated user may adopt a directory of their own (runs before the notes).
    mine = make(files, "alice", "t2")
    files.claim("t2", "alice", "alice")
    assert files.remove("t2", "alice") == [mine]


@pytest.mark.parametrize("user, thread", [("..", "t1"), ("../bob", "t1"), ("alice", ".."),
                                          ("alice", "../../x"), ("alice", "/etc"),
                                          ("a\x00", "t1"), ("alice", "t1/../../x")])
def test_hostile_ids_name_no_path(files, tmp_path, user, thread):
    make(files, "bob", "t1")
    before = set(tmp_path.rglob("*"))
    files.claim(thread, user, user)
    assert files.remove(thread, user) == []
    files.settle(thread, user, user, temporary=True)
    assert set(tmp_path.rglob("*")) == before


def test_many_runs_noting_at_once_lose_no_user(files):
    users = [f"u{n}" for n in range(24)]
    barrier = threading.Barrier(len(users))

    def claim(user: str) -> None:
        barrier.wait()
        files.claim("t1", user, user)

    workers = [threading.Thread(target=claim, args=(u,)) for u in users]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(files.users("t1") or []) == sorted(users)


def test_a_run_noting_while_the_thread_is_removed_is_not_lost(files):
    # The removal holds the note's lock and unlinks it; a run waiting for the lock on
    # the old file must write its note into a file that still has a name.
    files.claim("t1", "alice", "alice")
    done = threading.Event()
    with files._locked("t1", create=False) as fd:
        assert fd is not None
        waiting = threading.Thread(target=lambda: (files.claim("t1", "bob", "bob"),
                                                   done.set()))
        waiting.start()
        assert not done.wait(0.3)  # blocked on the lock, the old file open
        (files.records / "t1").unlink()
    waiting.join(10)
    assert done.is_set() and files.users("t1") == ["bob"]


def test_settling_after_a_run(files):
    files.claim("t1", "alice", "alice")
    kept = make(files, "alice", "t1")
    files.settle("t1", "alice", "alice", temporary=False)
    assert kept.exists()  # the thread lives on: its files stay
    files.settle("t1", "alice", "alice", temporary=True)
    assert not kept.exists() and files.users("t1") is None  # a stateless run's thread
    # A run whose thread was removed while it ran: what it wrote after goes too.
    files.claim("t2", "alice", "alice")
    files.remove("t2", "alice")
    late = make(files, "alice", "t2")
    files.settle("t2", "alice", "alice", temporary=False)
    assert not late.exists()
    assert (files.records).is_dir() and not (files.records / "t2").exists()


# -- the served graph ------------------------------------------------------------------------

CAROL = {"user_id": "carol", "roles": ["agent"]}  # a trusted front end states both


def sandboxed(tmp_path: Path, *, fuse: bool) -> Any:
    """The served agent trusting the client's identity, with the real sandbox (so a run's
    command makes the thread's directory)."""
    config = tmp_path / "antler.yaml"
    config.write_text(RBAC + "server: {trust_client_identity: true}\n"
                      f"storage: {{base_dir: {str(tmp_path / 'home')!r}}}\n", encoding="utf-8")
    return build_server_agent(
        config, model=ScriptedChatModel(list(SCRIPT) * 2), fuse=fuse,
        services={TITLE_MODEL: ScriptedChatModel(["t"] * 3),
                  MEMORY_MODEL: ScriptedChatModel(["[]"] * 3)})


def run(agent: Any, user: Any, thread: str, *, context: Any = None,
        checkpointer: bool = True) -> dict[str, Any]:
    """One run of the served graph as LangGraph Server starts it."""
    from langgraph.checkpoint.memory import InMemorySaver

    graph = agent.graph.copy(update={"checkpointer": InMemorySaver() if checkpointer
                                     else None})
    config = {"configurable": {"thread_id": thread, AUTH_USER_KEY: user}}
    return graph.invoke({"messages": [HumanMessage(content="run echo")]}, config=config,
                        context=context)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_the_served_graph_notes_each_runs_directory_and_a_stateless_run_keeps_none(
        tmp_path, fuse):
    agent = sandboxed(tmp_path, fuse=fuse)
    files = ServedThreadFiles(PathLayout(tmp_path / "home"))
    state = run(agent, {"identity": "front"}, "t1", context=CAROL)
    assert "/users/carol/threads/t1/" in state["thread_data"]["workspace_path"]
    assert files.users("t1") == ["carol"]
    carol = tmp_path / "home" / "users" / "carol" / "threads" / "t1"
    assert carol.is_dir()
    # A stateless run (no checkpointer): its thread's files go when it ends.
    try:
        run(agent, {"identity": "front"}, "t2", context=CAROL,
            checkpointer=False)
    finally:
        agent.close()
    assert not (tmp_path / "home" / "users" / "carol" / "threads" / "t2").exists()
    assert files.users("t2") is None
    assert carol.is_dir() and (tmp_path / "home" / RECORD_DIR / "t1").is_file()


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_the_served_graph_refuses_a_stated_takeover_before_anything_runs(tmp_path, fuse):
    agent = served(tmp_path, trust=True, fuse=fuse)
    bobs = tmp_path / "home" / "users" / "bob" / "threads" / "t1" / "user-data"
    bobs.mkdir(parents=True)
    with pytest.raises(ClientInputError, match="take over another user's directory"):
        run(agent, {"identity": "front"}, "t1", context={"user_id": "bob"})
    assert [p.name for p in bobs.iterdir()] == []
    # Without trust the stated id is ignored: the run is front's own, in front's directory.
    (tmp_path / "plain").mkdir()
    plain = served(tmp_path / "plain")
    state = run(plain, {"identity": "front"}, "t1", context={"user_id": "bob"})
    assert "/users/front/threads/t1/" in state["thread_data"]["workspace_path"]


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_note_that_cannot_be_written_stops_the_run_with_a_clear_error(tmp_path, fuse):
    """The served graph notes each run's directory before the run: when it cannot (here a
    file stands where the notes' folder goes), the run does not start and the error says
    which path, why, and what to do, instead of a bare OSError."""
    agent = sandboxed(tmp_path, fuse=fuse)
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / RECORD_DIR).write_text("not a folder")
    try:
        with pytest.raises(StorageError) as raised:
            run(agent, {"identity": "front"}, "t1", context=CAROL)
    finally:
        agent.close()
    message = str(raised.value)
    assert RECORD_DIR in message and "writable" in message and "t1" in message, message
    assert not (tmp_path / "home" / "users" / "carol" / "threads" / "t1").exists()
