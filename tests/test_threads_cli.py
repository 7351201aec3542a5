"""`antler threads list|show|prune|delete` on threads made by `antler run` (issue 10, defect 9)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from antler.cli import cli


def run(*args: object, **kwargs: Any) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], **kwargs)
    return result.exit_code, result.stdout, result.stderr


def turn(tmp_path: Path, home: Path, thread: str, user: str, prompt: str, answer: str) -> None:
    script = tmp_path / f"{thread}-{prompt}.yaml"
    script.write_text(yaml.safe_dump([answer, "A title"]), encoding="utf-8")
    code, _out, err = run("run", prompt, "--model", f"scripted:{script}", "--home", home,
                          "--thread", thread, "--user", user)
    assert code == 0, err


def checkpoints(home: Path, thread: str) -> int:
    with sqlite3.connect(home / "checkpoints.sqlite") as connection:
        return connection.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?",
                                  (thread,)).fetchone()[0]


def conversation(shown: dict[str, Any]) -> list[str]:
    """The user's and the model's messages; `show` also lists the hidden date reminder."""
    return [m["content"] for m in shown["messages"] if m["type"] != "system"]


def test_list_show_prune_and_delete(tmp_path):
    home = tmp_path / "home"
    for n in range(3):
        turn(tmp_path, home, "t1", "alice", f"question {n}", f"answer {n}")
    turn(tmp_path, home, "t2", "bob", "hello", "hi bob")

    code, out, err = run("threads", "list", "--home", home, "--json")
    assert code == 0, err
    listed = {row["thread"]: row for row in json.loads(out)}
    assert {t: row["owner"] for t, row in listed.items()} == {"t1": "alice", "t2": "bob"}
    assert listed["t1"]["checkpoints"] == checkpoints(home, "t1") > 3
    assert listed["t1"]["bytes"] > 0
    code, out, _err = run("threads", "list", "--home", home, "--user", "bob", "--json")
    assert [row["thread"] for row in json.loads(out)] == ["t2"]

    code, out, err = run("threads", "show", "t1", "--home", home, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert conversation(shown) == [
        "question 0", "answer 0", "question 1", "answer 1", "question 2", "answer 2"]
    code, _out, err = run("threads", "show", "t1", "--home", home, "--user", "bob")
    assert code == 1 and "belongs to another user" in err

    code, out, err = run("threads", "prune", "--keep", "2", "--home", home, "--json")
    assert code == 0, err
    assert json.loads(out)["removed"] > 0
    assert checkpoints(home, "t1") == checkpoints(home, "t2") == 2
    turn(tmp_path, home, "t1", "alice", "question 3", "answer 3")  # still resumes
    code, out, _err = run("threads", "show", "t1", "--home", home, "--json")
    assert conversation(json.loads(out))[-4:] == [
        "question 2", "answer 2", "question 3", "answer 3"]

    code, _out, err = run("threads", "delete", "t2", "--home", home, "--user", "alice")
    assert code == 1 and "belongs to another user" in err
    code, _out, err = run("threads", "delete", "t2", "--home", home)
    assert code == 0, err
    assert checkpoints(home, "t2") == 0
    code, out, _err = run("threads", "list", "--home", home, "--json")
    assert [row["thread"] for row in json.loads(out)] == ["t1"]
    turn(tmp_path, home, "t2", "carol", "mine now?", "yes")  # a deleted id is free again


def test_threads_on_an_empty_home_and_a_home_that_is_a_file(tmp_path):
    code, out, err = run("threads", "list", "--home", tmp_path / "none", "--json")
    assert code == 0 and json.loads(out) == [], err
    home = tmp_path / "file"
    home.write_text("x", encoding="utf-8")
    code, _out, err = run("threads", "list", env={"ANTLER_HOME": str(home)})
    assert code == 1 and "is a file, not a directory" in err and "Traceback" not in err
