"""`antler threads list|show|prune|delete` on threads made by `antler run` (issue 10, defect 9),
in the SQLite file under the base directory and in the Postgres database a config names.

The Postgres case uses the server of $ANTLER_TEST_POSTGRES_URL (`.ci/postgres up`);
without one it skips here and fails under CI=true (see conftest.py). Its thread ids
are fresh: the database outlives the test.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from antler.cli import cli


def run(*args: object, **kwargs: Any) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], **kwargs)
    return result.exit_code, result.stdout, result.stderr


@dataclass
class Store:
    """Where `antler run` keeps the threads, and how the test counts their checkpoints."""

    args: list[object]
    """--home, and --config when the checkpointer is not the SQLite file there."""
    count: Callable[[str], int]
    prefix: str = ""
    """Thread ids' prefix: fresh for a database that outlives the test."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path) -> Store:
    home = tmp_path / "home"
    if request.param == "sqlite":
        def in_file(thread: str) -> int:
            with sqlite3.connect(home / "checkpoints.sqlite") as connection:
                return connection.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?",
                                          (thread,)).fetchone()[0]

        return Store(["--home", home], in_file)
    url = request.getfixturevalue("postgres_url")
    config = tmp_path / "antler.yaml"
    config.write_text(yaml.safe_dump({"storage": {"checkpointer": url}}), encoding="utf-8")

    def in_postgres(thread: str) -> int:
        import psycopg

        with psycopg.connect(url) as connection:
            return connection.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = %s",
                                      (thread,)).fetchone()[0]

    return Store(["--home", home, "--config", config], in_postgres, f"{uuid.uuid4().hex[:8]}-")


def turn(tmp_path: Path, store: Store, thread: str, user: str, prompt: str,
         answer: str) -> None:
    script = tmp_path / f"{thread}-{prompt}.yaml"
    script.write_text(yaml.safe_dump([answer, "A title"]), encoding="utf-8")
    code, _out, err = run("run", prompt, "--model", f"scripted:{script}", *store.args,
                          "--thread", thread, "--user", user)
    assert code == 0, err


def conversation(shown: dict[str, Any]) -> list[str]:
    return [m["content"] for m in shown["messages"]]


def test_list_show_prune_and_delete(tmp_path, store):
    t1, t2 = f"{store.prefix}t1", f"{store.prefix}t2"
    for n in range(3):
        turn(tmp_path, store, t1, "alice", f"question {n}", f"answer {n}")
    turn(tmp_path, store, t2, "bob", "hello", "hi bob")

    code, out, err = run("threads", "list", *store.args, "--json")
    assert code == 0, err
    listed = {row["thread"]: row for row in json.loads(out)}
    assert {t: listed[t]["owner"] for t in (t1, t2)} == {t1: "alice", t2: "bob"}
    assert listed[t1]["checkpoints"] == store.count(t1) > 3
    assert listed[t1]["bytes"] > 0
    code, out, _err = run("threads", "list", *store.args, "--user", "bob", "--json")
    assert t2 in [row["thread"] for row in json.loads(out)]
    assert t1 not in [row["thread"] for row in json.loads(out)]

    code, out, err = run("threads", "show", t1, *store.args, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert conversation(shown) == [
        "question 0", "answer 0", "question 1", "answer 1", "question 2", "answer 2"]
    code, _out, err = run("threads", "show", t1, *store.args, "--user", "bob")
    assert code == 1 and "belongs to another user" in err

    code, out, err = run("threads", "prune", t1, t2, "--keep", "2", *store.args, "--json")
    assert code == 0, err
    assert json.loads(out)["removed"] > 0
    assert store.count(t1) == store.count(t2) == 2
    turn(tmp_path, store, t1, "alice", "question 3", "answer 3")  # still resumes
    code, out, _err = run("threads", "show", t1, *store.args, "--json")
    assert conversation(json.loads(out))[-4:] == [
        "question 2", "answer 2", "question 3", "answer 3"]

    code, _out, err = run("threads", "delete", t2, *store.args, "--user", "alice", "--yes")
    assert code == 1 and "belongs to another user" in err
    code, _out, err = run("threads", "delete", t2, *store.args, "--yes")
    assert code == 0, err
    assert store.count(t2) == 0
    code, out, _err = run("threads", "list", *store.args, "--json")
    listed_ids = [row["thread"] for row in json.loads(out)]
    assert t1 in listed_ids and t2 not in listed_ids
    turn(tmp_path, store, t2, "carol", "mine now?", "yes")  # a deleted id is free again


def test_show_leaves_injected_messages_out_unless_asked_and_then_marks_them(tmp_path):
    store = Store(["--home", tmp_path / "home"], lambda _thread: 0)
    turn(tmp_path, store, "t1", "alice", "question", "answer")

    code, out, err = run("threads", "show", "t1", *store.args, "--json")
    assert code == 0, err
    assert [(m["type"], m["content"], m["hidden"]) for m in json.loads(out)["messages"]] == [
        ("human", "question", False), ("ai", "answer", False)]

    code, out, err = run("threads", "show", "t1", *store.args, "--json", "--hidden")
    assert code == 0, err
    messages = json.loads(out)["messages"]
    hidden = [m for m in messages if m["hidden"]]
    assert [m["type"] for m in hidden] == ["system"]  # the date reminder
    assert "date" in hidden[0]["content"].lower()
    assert [m["content"] for m in messages if not m["hidden"]] == ["question", "answer"]

    code, out, err = run("threads", "show", "t1", *store.args, "--hidden")
    assert code == 0, err
    assert "system [hidden]:" in out
    code, out, _err = run("threads", "show", "t1", *store.args)
    assert "system" not in out and "question" in out


def test_threads_refuses_a_checkpointer_that_keeps_no_database(tmp_path):
    config = tmp_path / "antler.yaml"
    config.write_text(yaml.safe_dump({"storage": {"checkpointer": "memory"}}), encoding="utf-8")
    code, _out, err = run("threads", "list", "--home", tmp_path / "home", "--config", config)
    assert code == 1 and "Traceback" not in err
    assert "storage.checkpointer must be 'sqlite'" in err


def test_threads_on_an_empty_home_and_a_home_that_is_a_file(tmp_path):
    code, out, err = run("threads", "list", "--home", tmp_path / "none", "--json")
    assert code == 0 and json.loads(out) == [], err
    home = tmp_path / "file"
    home.write_text("x", encoding="utf-8")
    code, _out, err = run("threads", "list", env={"ANTLER_HOME": str(home)})
    assert code == 1 and "is a file, not a directory" in err and "Traceback" not in err
