"""Checkpoints and the shared store on every backend: SQLite, memory and PostgreSQL.

Runs go through the real `create_agent` graph with `ScriptedChatModel`, fused
and unfused, sync (`invoke`/`stream`) and async (`ainvoke`/`astream`, through
`agent.graph`). The Postgres tests use the server of $ANTLER_TEST_POSTGRES_URL
(`.ci/postgres up`); without one they skip here and fail under CI=true (see
conftest.py). Every Postgres test uses fresh thread and user ids: the database
outlives the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from langchain_core.messages import AIMessage, HumanMessage

from antler.chain.config import StorageSettings, parse_config
from antler.cli import cli
from antler.errors import ConfigError
from antler.plugin_api.context import MEMORY_QUEUE, STORE
from antler.plugin_api.registry import discover
from antler.plugins._lib.memory import MemoryFile, MemoryStore, StoreMemoryQueue
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage import (
    StorageError,
    ThreadBusyError,
    ThreadOwnershipError,
    open_storage,
    open_store,
)

FUSE = pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
QUIET = {"title": {"enabled": False}, "memory": {"enabled": False}}
HANG_GUARD = 120


@pytest.fixture(scope="module")
def registry():
    return discover()


@pytest.fixture(params=["sqlite", "memory", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request) -> str:
    """A `storage.checkpointer` value: 'sqlite', 'memory' or the test server's URL."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return request.param


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def config_for(registry, checkpointer: str, **sections: Any) -> Any:
    data = {**QUIET, "storage": {"checkpointer": checkpointer}, **sections}
    return parse_config(yaml.safe_dump(data), registry)


def texts(messages: list[Any]) -> list[str]:
    return [m.text for m in messages if isinstance(m, (HumanMessage, AIMessage))]


# -- configuration -----------------------------------------------------------------------

def test_the_checkpointer_accepts_kinds_urls_and_env_references():
    for value in ("sqlite", "memory", "none", "postgresql://antler@db:5432/antler",
                  "postgres://u:p@h/d", "${DATABASE_URL}"):
        assert StorageSettings(checkpointer=value).checkpointer == value


def test_a_bare_postgres_is_refused_with_what_to_write_instead(registry):
    with pytest.raises(ConfigError) as caught:
        parse_config("storage:\n  checkpointer: postgres\n", registry)
    message = str(caught.value)
    assert "'postgres' is not a checkpointer" in message
    assert "postgresql://" in message and "${DATABASE_URL}" in message
    assert "pattern" not in message and "^(" not in message  # no regex shown to the user


def test_the_pool_is_checked(registry):
    with pytest.raises(ConfigError, match=r"min \(5\) is more than max \(3\)"):
        parse_config("storage:\n  pool: {min: 5, max: 3}\n", registry)


def test_an_unset_env_reference_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTLER_TEST_UNSET_URL", raising=False)
    with pytest.raises(StorageError, match="ANTLER_TEST_UNSET_URL is not set"):
        open_storage("${ANTLER_TEST_UNSET_URL}", tmp_path)


def test_a_connection_failure_is_one_line_naming_host_and_database(tmp_path, registry):
    url = "postgresql://alice:s3cret-pw@127.0.0.1:9/antler_db"  # port 9: nothing listens
    with pytest.raises(StorageError) as caught:
        create_agent(config_for(registry, url), model=ScriptedChatModel(["x"]),
                     base_dir=tmp_path)
    message = str(caught.value)
    assert "cannot connect to PostgreSQL at host 127.0.0.1 port 9, database antler_db" in message
    assert "user alice" in message
    assert "s3cret-pw" not in message and url not in message


def test_antler_run_reports_an_unreachable_database_without_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTLER_TEST_DB", "postgresql://bob:hunter22@127.0.0.1:9/threads")
    config = tmp_path / "antler.yaml"
    config.write_text(yaml.safe_dump({"storage": {"checkpointer": "${ANTLER_TEST_DB}"}}),
                      encoding="utf-8")
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(["hi"]), encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", "hello", "--config", str(config), "--model",
                                      f"scripted:{script}", "--home", str(tmp_path / "h")])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot connect to PostgreSQL at host 127.0.0.1")
    assert "database threads" in result.stderr and "hunter22" not in result.stderr
    assert "Traceback" not in result.stderr


# -- every saver, sync and async ---------------------------------------------------------

@FUSE
def test_sync_and_async_turns_share_one_thread(tmp_path, registry, backend, fuse):
    thread = fresh("t")
    model = ScriptedChatModel(["one", "two", "three", "four"])
    with create_agent(config_for(registry, backend), model=model, base_dir=tmp_path,
                      fuse=fuse) as agent:
        agent.invoke("first", thread_id=thread)

        async def later_turns() -> list[Any]:
            config = agent.run_config(thread)
            context = agent.context(thread)
            await agent.graph.ainvoke(agent.input("second"), config=config, context=context)
            chunks = [chunk async for chunk in agent.graph.astream(
                agent.input("third"), config=config, context=context, stream_mode="updates")]
            assert chunks
            return (await agent.graph.aget_state(config)).values["messages"]

        messages = asyncio.run(later_turns())
        assert texts(messages) == ["first", "one", "second", "two", "third", "three"]
        # A new event loop (a second asyncio.run) gets its own async saver.
        again = asyncio.run(agent.graph.ainvoke(
            agent.input("fourth"), config=agent.run_config(thread),
            context=agent.context(thread)))
        assert texts(again["messages"])[-2:] == ["fourth", "four"]
        assert texts(agent.state(thread)["messages"])[-1] == "four"


@pytest.mark.postgres
@FUSE
def test_a_postgres_thread_resumes_in_a_new_agent_and_keeps_its_owner(tmp_path, registry,
                                                                      postgres_url, fuse):
    thread, owner = fresh("t"), fresh("u")
    config = config_for(registry, postgres_url)
    with create_agent(config, model=ScriptedChatModel(["hello"]), base_dir=tmp_path / "a",
                      fuse=fuse) as first:
        first.invoke("hi", thread_id=thread, user_id=owner)
    # Another base directory: nothing is shared but the database.
    with create_agent(config, model=ScriptedChatModel(["again"]), base_dir=tmp_path / "b",
                      fuse=fuse) as second:
        with pytest.raises(ThreadOwnershipError, match="belongs to another user"):
            second.invoke("let me in", thread_id=thread, user_id=fresh("stranger"))
        state = second.invoke("more", thread_id=thread, user_id=owner)
        assert texts(state["messages"]) == ["hi", "hello", "more", "again"]


@pytest.mark.postgres
def test_the_postgres_run_lock_excludes_another_pool(tmp_path, postgres_url):
    thread = fresh("t")
    one = open_storage(postgres_url, tmp_path, store=None)
    two = open_storage(postgres_url, tmp_path, store=None)
    try:
        with (one.locks.hold(thread), pytest.raises(ThreadBusyError, match="is busy"),
              two.locks.hold(thread)):
            pass
        with two.locks.hold(thread):  # released when the holder let go
            pass
    finally:
        one.close()
        two.close()


# -- two processes, one Postgres thread --------------------------------------------------

def antler_process(*args: object, env: dict[str, str] | None = None,
                   ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "antler", *map(str, args)],
                          capture_output=True, text=True, timeout=HANG_GUARD,
                          env={**os.environ, **(env or {})})


def scripted(path: Path, turns: list[Any]) -> str:
    path.write_text(yaml.safe_dump(turns), encoding="utf-8")
    return f"scripted:{path}"


@pytest.mark.postgres
def test_two_antler_run_processes_resume_the_same_thread_from_postgres(tmp_path, registry,
                                                                       postgres_url):
    thread, user = fresh("t"), fresh("u")
    config = tmp_path / "antler.yaml"
    config.write_text(yaml.safe_dump({**QUIET, "storage": {
        "checkpointer": "${ANTLER_RUN_DB}", "pool": {"min": 1, "max": 3}}}), encoding="utf-8")
    env = {"ANTLER_RUN_DB": postgres_url}
    for n, home in enumerate([tmp_path / "machine-a", tmp_path / "machine-b"]):
        model = scripted(tmp_path / f"s{n}.yaml", [f"answer {n}"])
        done = antler_process("run", f"question {n}", "--config", config, "--model", model,
                              "--thread", thread, "--user", user, "--home", home, env=env)
        assert done.returncode == 0, done.stderr
        assert f"answer {n}" in done.stdout
    with create_agent(config_for(registry, postgres_url), model=ScriptedChatModel([]),
                      base_dir=tmp_path / "reader") as reader:
        assert texts(reader.state(thread, user)["messages"]) == [
            "question 0", "answer 0", "question 1", "answer 1"]


# -- the shared store --------------------------------------------------------------------

@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_kind(request) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return request.param


def test_memory_facts_keep_their_order_dedupe_and_cap_in_the_store(tmp_path, store_kind):
    user = fresh("u")
    store = open_store(store_kind, tmp_path)
    try:
        memory = MemoryStore(store, max_facts=3)
        added = memory.add_facts(user, ["Likes tea.", "likes  TEA", "Has a cat"],
                                 source_thread="t1")
        assert [f.content for f in added] == ["Likes tea.", "Has a cat"]
        assert memory.add_facts(user, ["Has a cat."], source_thread="t2") == []
        memory.add_facts(user, ["Plays chess", "Reads poetry"])
        facts = memory.facts(user)
        assert [f.content for f in facts] == ["Has a cat", "Plays chess", "Reads poetry"]
        assert asyncio.run(memory.afacts(user)) == facts
        with pytest.raises(ValueError, match="user id"):
            memory.add_facts("../escape", ["x"])
    finally:
        store.close()


def test_memory_one_process_writes_is_visible_to_another(tmp_path, store_kind):
    """`antler run` (one process) learns a fact; `antler memory show` (another) reads it."""
    user, home = fresh("u"), tmp_path / "home"
    config = tmp_path / "antler.yaml"
    extractor = scripted(tmp_path / "extract.yaml", ['["Grows tomatoes on a balcony."]'])
    config.write_text(yaml.safe_dump({
        "title": {"enabled": False},
        "memory": {"model": extractor},
        "storage": {"checkpointer": "memory", "store": store_kind},
    }), encoding="utf-8")
    model = scripted(tmp_path / "s.yaml", ["Lovely!"])
    done = antler_process("run", "My balcony tomatoes are ripe.", "--config", config,
                          "--model", model, "--user", user, "--home", home)
    assert done.returncode == 0, done.stderr
    shown = antler_process("memory", "show", "--user", user, "--json", "--config", config,
                           "--home", home)
    assert shown.returncode == 0, shown.stderr
    assert [fact["content"] for fact in json.loads(shown.stdout)] == [
        "Grows tomatoes on a balcony."]


@pytest.mark.postgres
@FUSE
def test_postgres_store_holds_memory_across_agents_sync_and_async(tmp_path, registry,
                                                                 postgres_url, fuse):
    """One agent's memory reaches another's prompt through the Postgres store."""
    user = fresh("u")
    config = config_for(registry, postgres_url, memory={"enabled": True},
                        dynamic_context={"enabled": True})
    extractor = ScriptedChatModel(['["Speaks Norwegian."]'])
    with create_agent(config, model=ScriptedChatModel(["Hei!"]), base_dir=tmp_path / "a",
                      services={"memory_model": extractor}, fuse=fuse) as writer:
        asyncio.run(writer.graph.ainvoke(writer.input("Hei, jeg snakker norsk."),
                                         config=writer.run_config(fresh("t")),
                                         context=writer.context(fresh("t"), user)))
        assert writer.services.get(MEMORY_QUEUE).flush() == 1
    reader_model = ScriptedChatModel(["Noted."])
    with create_agent(config, model=reader_model, base_dir=tmp_path / "b", fuse=fuse,
                      services={"memory_model": ScriptedChatModel(["[]"])}) as reader:
        reader.invoke("What do you know about me?", thread_id=fresh("t"), user_id=user)
    prompt = "\n".join(str(m.content) for m in reader_model.calls[0])
    assert "Speaks Norwegian." in prompt


# -- the debounce without a thread -------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_store_queue_debounces_in_the_store_and_runs_due_updates_on_a_later_add(tmp_path):
    seen: list[Any] = []
    clock = Clock()
    store = open_store("sqlite", tmp_path)
    try:
        queue = StoreMemoryQueue(seen.append, store, debounce_seconds=30, clock=clock)
        messages = [HumanMessage("hi"), AIMessage("hello")]
        queue.add(thread_id="t1", user_id="u", messages=messages)
        queue.add(thread_id="t1", user_id="u", messages=[*messages, HumanMessage("more")])
        assert len(queue) == 1 and seen == []  # replaced, not due
        # Another process (a second queue on the same store) processes it once due.
        clock.now += 31
        other = StoreMemoryQueue(seen.append, open_store("sqlite", tmp_path), clock=clock)
        other.add(thread_id="t2", user_id="v", messages=messages)
        assert [(u.thread_id, texts(list(u.messages))) for u in seen] == [
            ("t1", ["hi", "hello", "more"])]
        assert [u.thread_id for u in queue.pending] == ["t2"]
        assert queue.flush() == 1 and [u.thread_id for u in seen] == ["t1", "t2"]
        assert len(queue) == 0
    finally:
        store.close()


@FUSE
def test_memory_queue_store_runs_without_a_thread_sync_and_async(tmp_path, registry, fuse):
    config = config_for(registry, "sqlite", memory={"enabled": True, "queue": "store",
                                                    "debounce_seconds": 0})
    extractor = ScriptedChatModel(['["Bakes sourdough."]', '["Owns a bike."]'])
    before = {t.name for t in threading.enumerate()}
    with create_agent(config, model=ScriptedChatModel(["Nice.", "Cool."]), base_dir=tmp_path,
                      services={"memory_model": extractor}, fuse=fuse) as agent:
        assert isinstance(agent.services.get(MEMORY_QUEUE), StoreMemoryQueue)
        agent.invoke("I bake sourdough.", thread_id="t1", user_id="ann")
        asyncio.run(agent.graph.ainvoke(agent.input("I ride my bike."),
                                        config=agent.run_config("t2"),
                                        context=agent.context("t2", "ann")))
        facts = MemoryStore(agent.services.get(STORE)).facts("ann")
        assert [f.content for f in facts] == ["Bakes sourdough.", "Owns a bike."]
        assert "antler-memory-queue" not in {t.name for t in threading.enumerate()} - before


# -- antler memory import ----------------------------------------------------------------

def test_memory_import_moves_json_files_into_the_store_once(tmp_path):
    home = tmp_path / "home"
    MemoryFile(home).add_facts("alice", ["Likes jazz.", "Lives in Lyon."], source_thread="t1")
    MemoryFile(home).add_facts("bob", ["Is a nurse."])
    loose = tmp_path / "exported.json"
    loose.write_text(json.dumps({"user_id": "carol", "facts": [{"content": "Runs marathons"}]}),
                     encoding="utf-8")

    def run(*args: str) -> Any:
        result = CliRunner().invoke(cli, ["memory", *args, "--home", str(home), "--json"])
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    report = run("import", "auto")
    assert {(row["user"], row["facts"], row["imported"]) for row in report} == {
        ("alice", 2, 2), ("bob", 1, 1)}
    assert run("import", "auto")[0]["imported"] == 0  # idempotent
    assert run("import", str(loose)) == [{"user": "carol", "file": str(loose), "facts": 1,
                                          "imported": 1}]
    alice = run("show", "--user", "alice")
    assert [f["content"] for f in alice] == ["Likes jazz.", "Lives in Lyon."]
    assert {f["source_thread"] for f in alice} == {"t1"}
    assert (home / "users" / "alice" / "memory.json").exists()  # the file is left in place

    missing = CliRunner().invoke(cli, ["memory", "import", str(tmp_path / "nope.json"),
                                       "--home", str(home)])
    assert missing.exit_code == 1 and "is not a file" in missing.stderr


# -- what a server opens -----------------------------------------------------------------

@pytest.mark.postgres
def test_storage_for_gives_a_server_the_async_saver_and_store_of_its_loop(tmp_path,
                                                                         postgres_url):
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from antler.runtime.storage import storage_for

    storage = storage_for(StorageSettings(checkpointer=postgres_url,
                                          pool={"min": 1, "max": 2}), tmp_path)
    namespace = ("tests", fresh("ns"))

    async def serve() -> Any:
        saver = await storage.async_saver()
        assert isinstance(saver, AsyncPostgresSaver)
        assert await saver.aget_tuple({"configurable": {"thread_id": fresh("t")}}) is None
        await storage.store.aput(namespace, "k", {"v": 1})
        item = await storage.store.aget(namespace, "k")
        await storage.aclose()
        return item.value

    assert asyncio.run(serve()) == {"v": 1}
    assert not storage.closers  # the pool is closed


def test_reading_a_sqlite_store_that_does_not_exist_creates_no_file(tmp_path):
    store = open_store("sqlite", tmp_path)
    try:
        assert MemoryStore(store).facts("nobody") == []
        assert asyncio.run(MemoryStore(store).afacts("nobody")) == []
        assert not (tmp_path / "store.sqlite").exists()
        MemoryStore(store).add_facts("somebody", ["Writes haiku."])
        assert (tmp_path / "store.sqlite").exists()
        assert [f.content for f in MemoryStore(store).facts("somebody")] == ["Writes haiku."]
    finally:
        store.close()
