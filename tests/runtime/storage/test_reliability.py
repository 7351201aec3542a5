"""Threads and storage, in one process: ownership, run locks, durability, settling a
stopped run, the memory store's damaged files and storage failures.

Each test reproduces one defect of issue 10 through the real `create_agent` graph,
fused and unfused. Tests with several real processes are in
tests/runtime/test_reliability_processes.py.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from langchain.tools import tool
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from antler.cli import cli
from antler.plugin_api.context import MEMORY_QUEUE, TITLE_MODEL
from antler.plugin_api.paths import InvalidIdentifierError
from antler.plugins._lib.memory import MemoryFile
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage import StorageError, ThreadBusyError, ThreadOwnershipError
from antler.runtime.storage import sqlite as sqlite_storage
from tests.plugins.support import visible

FUSE = pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])


class RecordingQueue:
    """A memory queue that keeps what the memory plugin submits."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    def add(self, **update: Any) -> None:
        self.updates.append(update)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


RAN: list[str] = []


@tool
def note(text: str) -> str:
    """Write a note."""
    RAN.append(text)
    return f"noted {text}"


@tool
def crash(text: str) -> str:
    """A tool whose process dies mid-call."""
    RAN.append(text)
    raise KeyboardInterrupt


def make_agent(home: Path, turns: list[Any], *, fuse: bool, **kwargs: Any) -> tuple[Any, Any, Any]:
    model = ScriptedChatModel(turns)
    queue = RecordingQueue()
    services = {TITLE_MODEL: ScriptedChatModel(["A title"] * 20), MEMORY_QUEUE: queue}
    agent = create_agent(model=model, tools=[note, crash], base_dir=home, fuse=fuse,
                         services=services, **kwargs)
    return agent, model, queue


def calls(turns: list[tuple[str, str]], cid: str = "c") -> dict[str, Any]:
    return {"content": "", "tool_calls": [
        {"name": name, "args": {"text": text}, "id": f"{cid}{i}"}
        for i, (name, text) in enumerate(turns)]}


# -- defect 1: a thread belongs to the user who created it ---------------------------------

@FUSE
def test_another_users_run_is_refused_before_any_step_and_reads_nothing(tmp_path, fuse):
    agent, model, queue = make_agent(tmp_path, ["Noted: your PIN is 4711.", "hi bob"],
                                     fuse=fuse)
    with agent:
        agent.invoke("my PIN is 4711", thread_id="t1", user_id="alice")
        before = agent.state("t1")
        with pytest.raises(ThreadOwnershipError, match="belongs to another user"):
            agent.invoke("what do you know?", thread_id="t1", user_id="bob")
        with pytest.raises(ThreadOwnershipError):
            agent.state("t1", user_id="bob")
        after = agent.state("t1")
    assert len(model.calls) == 1  # bob's run never reached the model
    assert after["messages"] == before["messages"]  # nothing written
    assert [u["user_id"] for u in queue.updates] == ["alice"]  # nothing reaches bob's memory
    assert not (tmp_path / "users" / "bob").exists()


def test_the_owner_record_survives_the_process(tmp_path):
    agent, _model, _queue = make_agent(tmp_path, ["ok"], fuse=True)
    with agent:
        agent.invoke("hello", thread_id="t1", user_id="alice")
    again, _model, _queue = make_agent(tmp_path, ["again"], fuse=True)
    with again, pytest.raises(ThreadOwnershipError):
        again.invoke("hello", thread_id="t1", user_id="bob")


def run_cli(*args: object, **kwargs: Any) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], **kwargs)
    return result.exit_code, result.stdout, result.stderr


def script(path: Path, turns: list[Any]) -> Path:
    path.write_text(yaml.safe_dump(turns), encoding="utf-8")
    return path


def test_antler_run_refuses_another_users_thread(tmp_path):
    home = tmp_path / "home"
    first = script(tmp_path / "a.yaml", ["Your PIN is noted.", "A title"])
    code, _out, err = run_cli("run", "my PIN is 4711", "--model", f"scripted:{first}",
                              "--home", home, "--thread", "t1", "--user", "alice")
    assert code == 0, err
    second = script(tmp_path / "b.yaml", ["I know your PIN is 4711."])
    code, out, err = run_cli("run", "what is my PIN?", "--model", f"scripted:{second}",
                             "--home", home, "--thread", "t1", "--user", "bob")
    assert code == 1
    assert "thread 't1' belongs to another user" in err and "Traceback" not in err
    assert "4711" not in out + err
    assert not (home / "users" / "bob").exists()


@pytest.mark.parametrize("option", ["--thread", "--user"])
def test_empty_ids_are_refused(tmp_path, option):
    turns = script(tmp_path / "s.yaml", ["ok"])
    code, _out, err = run_cli("run", "hi", "--model", f"scripted:{turns}", "--home",
                              tmp_path / "home", option, "")
    assert code == 1 and "it is empty" in err and "Traceback" not in err
    with pytest.raises(InvalidIdentifierError):
        agent, _model, _queue = make_agent(tmp_path / "api", ["ok"], fuse=True)
        with agent:
            agent.invoke("hi", thread_id="", user_id="u")


# -- defect 2: one run at a time per thread -------------------------------------------------

@FUSE
def test_a_second_run_on_a_busy_thread_is_refused(tmp_path, fuse):
    agent, model, _queue = make_agent(tmp_path, ["first", "second"], fuse=fuse)
    with agent:
        agent.invoke("hello", thread_id="t1", user_id="alice")
        # Held as another run (or another process) would hold it.
        with agent.storage.locks.hold("t1"), pytest.raises(ThreadBusyError, match="'t1' is busy"):
            agent.invoke("again", thread_id="t1", user_id="alice")
        assert len(model.calls) == 1
        state = agent.invoke("again", thread_id="t1", user_id="alice")
    assert [m.content for m in visible(state["messages"])] == [
        "hello", "first", "again", "second"]


# -- defects 4 and 5: durable checkpoints, and what a stopped run left ---------------------

class FailingSaver(SqliteSaver):
    """Fails to write the first checkpoint that holds a tool result, as a full disk does."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        messages = checkpoint.get("channel_values", {}).get("messages") or []
        if any(isinstance(m, ToolMessage) for m in messages):
            raise sqlite3.OperationalError("database or disk is full")
        return super().put(config, checkpoint, metadata, new_versions)


@FUSE
def test_a_failed_checkpoint_write_stops_the_run_before_the_next_tool(tmp_path, fuse):
    RAN.clear()
    turns = [calls([("note", "first")]), calls([("note", "second")], "d"), "done"]
    connection = sqlite3.connect(str(tmp_path / "db.sqlite"), check_same_thread=False)
    agent, model, _queue = make_agent(tmp_path, turns, fuse=fuse,
                                      checkpointer=FailingSaver(connection))
    with agent, pytest.raises(StorageError, match="disk is full"):
        agent.invoke("go", thread_id="t1")
    connection.close()
    assert RAN == ["first"]  # the second tool never ran
    assert len(model.calls) == 1


@FUSE
def test_a_stopped_run_keeps_saved_results_and_reports_the_rest(tmp_path, fuse):
    RAN.clear()
    turns = [calls([("note", "saved"), ("crash", "lost")]), "carry on"]
    agent, model, _queue = make_agent(tmp_path, turns, fuse=fuse)
    reported: list[list[dict[str, Any]]] = []
    with agent:
        with pytest.raises(KeyboardInterrupt):
            agent.invoke("go", thread_id="t1")
        state = agent.invoke("continue", thread_id="t1", on_interrupted=reported.append)
    # Both ran once (the two calls run in parallel threads, so in either order).
    assert sorted(RAN) == ["lost", "saved"]
    assert [[call["id"] for call in batch] for batch in reported] == [["c1"]]
    request = model.calls[-1]
    results = {m.tool_call_id: m.content for m in request if isinstance(m, ToolMessage)}
    assert results["c0"] == "noted saved"  # the saved result reaches the model
    assert "interrupted" in results["c1"]
    kept = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in kept] == ["noted saved"]


# -- defect 7: unreadable memory files --------------------------------------------------------

@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"{not json", b"[1, 2, 3]"],
                         ids=["bad-utf8", "bad-json", "wrong-shape"])
def test_an_unreadable_memory_file_is_set_aside_with_a_warning(tmp_path, content, caplog):
    path = tmp_path / "users" / "u" / "memory.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    store = MemoryFile(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert store.facts("u") == []
    aside = [p for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == content
    assert str(path) in caplog.text and str(aside[0]) in caplog.text
    assert [f.content for f in store.add_facts("u", ["Likes tea"])] == ["Likes tea"]
    assert [f.content for f in store.facts("u")] == ["Likes tea"]


# -- defect 8: storage failures are one clear line ------------------------------------------

def test_a_damaged_database_is_named_with_what_to_do(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "checkpoints.sqlite").write_bytes(b"this is not a database" * 100)
    turns = script(tmp_path / "s.yaml", ["ok"])
    code, _out, err = run_cli("run", "hi", "--model", f"scripted:{turns}", "--home", home)
    assert code == 1 and "Traceback" not in err
    assert f"{home / 'checkpoints.sqlite'} is damaged" in err and "Move it aside" in err


def test_a_home_that_is_a_file_is_named_with_what_to_do(tmp_path):
    home = tmp_path / "home"
    home.write_text("oops", encoding="utf-8")
    turns = script(tmp_path / "s.yaml", ["ok"])
    code, _out, err = run_cli("run", "hi", "--model", f"scripted:{turns}",
                              env={"ANTLER_HOME": str(home)})
    assert code == 1 and "Traceback" not in err
    assert f"{home} is a file, not a directory" in err


def test_a_locked_database_is_named_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_storage, "SQLITE_TIMEOUT_SECONDS", 0.1)
    home = tmp_path / "home"
    first = script(tmp_path / "a.yaml", ["ok", "A title"])
    assert run_cli("run", "hi", "--model", f"scripted:{first}", "--home", home)[0] == 0
    other = sqlite3.connect(str(home / "checkpoints.sqlite"))
    other.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
    try:
        second = script(tmp_path / "b.yaml", ["ok", "A title"])
        code, _out, err = run_cli("run", "hi", "--model", f"scripted:{second}", "--home", home)
    finally:
        other.rollback()
        other.close()
    assert code == 1 and "Traceback" not in err
    assert "is locked by another process" in err and str(home) in err


@pytest.mark.parametrize(("pragma", "expected"), [
    ("PRAGMA query_only = ON", "cannot be written"),
    ("PRAGMA max_page_count = {pages}", "the disk is full"),
], ids=["read-only", "full"])
def test_a_database_that_cannot_be_written_stops_the_run_clearly(tmp_path, pragma, expected):
    agent, _model, _queue = make_agent(tmp_path, ["first", "second"], fuse=True)
    with agent:
        agent.invoke("hello", thread_id="t1")
        connection = agent.storage.connection
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(pragma.format(pages=pages))
        with pytest.raises(StorageError, match=expected) as raised:
            agent.invoke("x" * 200_000, thread_id="t1")
    assert str(tmp_path / "checkpoints.sqlite") in str(raised.value)


# -- defect 9: prompts of any size --------------------------------------------------------------

def test_the_prompt_comes_from_a_file_or_standard_input(tmp_path):
    home = tmp_path / "home"
    big = "word " * 60_000  # 300 KB: more than an argument may hold
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(big, encoding="utf-8")
    turns = script(tmp_path / "s.yaml", ["read it", "A title"])
    code, out, err = run_cli("run", "--prompt-file", prompt, "--model", f"scripted:{turns}",
                             "--home", home, "--thread", "t1")
    assert code == 0, err
    turns = script(tmp_path / "t.yaml", ["read that too"])
    code, out, err = run_cli("run", "-", "--model", f"scripted:{turns}", "--home", home,
                             "--thread", "t1", input="from standard input")
    assert code == 0, err
    assert out.strip() == "read that too"
    agent, _model, _queue = make_agent(home, [], fuse=True)
    with agent:
        humans = [m.content for m in agent.state("t1")["messages"] if m.type == "human"]
    assert humans == [big, "from standard input"]
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    code, _out, err = run_cli("run", "--prompt-file", tmp_path / "bad.txt", "--home", home)
    assert code == 1 and "is not UTF-8 text" in err
