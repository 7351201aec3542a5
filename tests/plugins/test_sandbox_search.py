"""glob and grep through the real agent: results by virtual path, bounds, errors, confinement."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from antler.contracts.toolmeta import tool_meta
from antler.contracts.tooloutput import budgeted_output
from antler.plugin_api.paths import PathLayout, ThreadPaths
from tests.plugins.support import make_agent

WS = "/mnt/user-data/workspace"


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


def results(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def thread(home: Path) -> ThreadPaths:
    paths = PathLayout(home).thread("default", "t1")
    paths.ensure_directories()
    files = {
        "src/app.py": "import os\nprint('Hello')\n# TODO: tidy\n",
        "src/lib/util.py": "def helper():\n    return 'hello world'\n",
        "notes.md": "hello from the notes\nnothing else (a+b)\n",
        "data.bin": "hello\x00\x01\x02binary",
    }
    for name, text in files.items():
        target = paths.workspace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return paths


def run(home: Path, script: list[Any], fuse: bool = False, **kwargs: Any) -> list[ToolMessage]:
    agent, _ = make_agent(home, [*script, "done"], fuse=fuse, **kwargs)
    with agent:
        state = agent.invoke("search", thread_id="t1")
    return results(state)


@pytest.mark.parametrize("fuse", [True, False])
def test_glob_lists_matching_paths_by_virtual_path(home, thread, fuse):
    found = run(home, [
        call("glob", pattern="**/*.py", path=WS),
        call("glob", pattern="*.py", path=f"{WS}/src"),
        call("glob", pattern="src/*", path=WS, include_dirs=True),
        call("glob", pattern="**/*.rs", path=WS),
    ], fuse=fuse)
    every, top, with_dirs, none = found
    assert every.content.splitlines() == [f"{WS}/src/app.py", f"{WS}/src/lib/util.py"]
    assert top.content.splitlines() == [f"{WS}/src/app.py"]
    assert with_dirs.content.splitlines() == [f"{WS}/src/app.py", f"{WS}/src/lib/"]
    assert none.status == "success" and none.content.startswith("Nothing found")
    assert tool_meta(none).error_type == "no_results"
    assert str(home) not in str([m.content for m in found])


@pytest.mark.parametrize("fuse", [True, False])
def test_grep_reports_path_line_and_text(home, thread, fuse):
    found = run(home, [
        call("grep", pattern="hel+o", path=WS),
        call("grep", pattern="Hello", path=WS, case_sensitive=True),
        call("grep", pattern="(a+b)", path=WS, literal=True),
        call("grep", pattern="hello", path=WS, glob="*.py"),
        call("grep", pattern="hello", path=f"{WS}/src", glob="lib/*.py"),
    ], fuse=fuse)
    anycase, exact, literal, python, nested = (m.content.splitlines() for m in found)
    assert anycase == [f"{WS}/notes.md:1: hello from the notes",
                           f"{WS}/src/app.py:2: print('Hello')",
                           f"{WS}/src/lib/util.py:2: return 'hello world'",
                           "[1 binary file(s) skipped]"]
    assert exact == [f"{WS}/src/app.py:2: print('Hello')", "[1 binary file(s) skipped]"]
    assert literal == [f"{WS}/notes.md:2: nothing else (a+b)", "[1 binary file(s) skipped]"]
    assert python == [f"{WS}/src/app.py:2: print('Hello')",
                      f"{WS}/src/lib/util.py:2: return 'hello world'"]
    assert nested == [f"{WS}/src/lib/util.py:2: return 'hello world'"]


def test_bad_patterns_and_paths_are_clear_tool_errors(home, thread):
    found = run(home, [
        call("grep", pattern="(unclosed", path=WS),
        call("glob", pattern="/etc/*", path=WS),
        call("glob", pattern="../*", path=WS),
        call("grep", pattern="x", path="workspace"),
        call("glob", pattern="*", path="/etc"),
        call("grep", pattern="x", path=WS, max_results=0),
    ])
    assert all(m.status == "error" for m in found)
    assert "Traceback" not in str([m.content for m in found])
    unclosed, absolute, dotdot, relative, outside, zero = found
    assert "Invalid regular expression '(unclosed'" in unclosed.content
    assert "literal=true" in unclosed.content
    assert "is absolute" in absolute.content and "Invalid glob pattern" in absolute.content
    assert "'..'" in dotdot.content
    assert "Invalid search path 'workspace'" in relative.content
    assert "Invalid search path '/etc'" in outside.content
    assert "Invalid max_results 0" in zero.content
    # tool_error_handling classifies them as arguments the model can fix.
    assert {tool_meta(m).error_type for m in found} == {"invalid_input"}
    assert all(tool_meta(m).recoverable_by_model for m in found)


def test_results_are_bounded_with_a_note_saying_how_to_narrow(home, thread):
    for index in range(30):
        (thread.workspace / f"many-{index:02}.txt").write_text("match here\n" * 5)
    found = run(home, [
        call("grep", pattern="match", path=WS, max_results=7),
        call("glob", pattern="many-*", path=WS, max_results=4),
        call("grep", pattern="match", path=WS, max_results=5000),
    ])
    grep, glob, capped = found
    lines = grep.content.splitlines()
    assert len(lines) == 9 and lines[0] == f"{WS}/many-00.txt:1: match here"
    assert lines[7].startswith("[output truncated: more than 7 matching lines; narrow")
    assert lines[8] == "[1 binary file(s) skipped]"
    assert glob.content.splitlines()[:4] == [f"{WS}/many-0{i}.txt" for i in range(4)]
    assert "more than 4 matches" in glob.content and "raise max_results" in glob.content
    assert grep.status == glob.status == "success"
    assert tool_meta(grep).status == "partial_success"
    # max_results is capped at 1000; the 150 lines are all shown (and the binary note).
    assert len(capped.content.splitlines()) == 151


def test_binary_files_are_skipped(home, thread):
    (thread.workspace / "image.png").write_bytes(b"\x89PNG\r\n\x00\x00needle")
    (thread.workspace / "plain.txt").write_text("needle\n")
    (grep,) = run(home, [call("grep", pattern="needle", path=WS)])
    assert grep.content.splitlines() == [f"{WS}/plain.txt:1: needle",
                                         "[2 binary file(s) skipped]"]


def test_symlinks_out_of_the_thread_are_never_followed(home, thread, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("hello OUTSIDE-7c1d\n")
    os.symlink(outside, thread.workspace / "link")
    os.symlink(outside / "secret.txt", thread.workspace / "secret-link.txt")
    os.symlink("/etc", thread.workspace / "etc")
    found = run(home, [
        call("grep", pattern="OUTSIDE|root", path=WS),
        call("glob", pattern="**/*", path=WS),
        call("grep", pattern="OUTSIDE", path=f"{WS}/link"),
        call("glob", pattern="*", path=f"{WS}/etc"),
        call("grep", pattern="root", path="/mnt/user-data/../../../../../../etc"),
    ])
    grep, glob, through, etc, dotdot = found
    assert grep.content.startswith("Nothing found")
    listed = glob.content.splitlines()
    assert f"{WS}/link" in listed and f"{WS}/secret-link.txt" in listed
    assert not any(path.startswith(f"{WS}/link/") for path in listed)
    assert through.status == etc.status == dotdot.status == "error"
    assert "points outside" in through.content and "points outside" in etc.content
    assert "Refusing path" in dotdot.content
    shown = str([m.content for m in found])
    assert "OUTSIDE-7c1d" not in shown and "root:x:0" not in shown and str(home) not in shown


def test_saved_tool_results_are_searched_only_when_asked(home, thread):
    saved = thread.outputs / ".tool-results"
    saved.mkdir()
    (saved / "bash-1.log").write_text("needle in a saved result\n")
    (thread.outputs / "report.txt").write_text("needle in a report\n")
    everywhere, inside = run(home, [
        call("grep", pattern="needle", path="/mnt/user-data"),
        call("grep", pattern="needle", path="/mnt/user-data/outputs/.tool-results"),
    ])
    assert everywhere.content.splitlines() == [
        "/mnt/user-data/outputs/report.txt:1: needle in a report", "[1 binary file(s) skipped]"]
    assert inside.content == ("/mnt/user-data/outputs/.tool-results/bash-1.log:1: needle in a "
                              "saved result")


def test_a_long_grep_result_goes_through_the_tool_output_budget(home, thread):
    for index in range(40):
        (thread.workspace / f"long-{index:02}.txt").write_text(
            "".join(f"needle {index} {line} {'x' * 200}\n" for line in range(20)))
    (grep,) = run(home, [call("grep", pattern="needle", path=WS, max_results=1000)])
    record = budgeted_output(grep)
    assert record is not None and record["externalized"]
    assert record["path"].startswith("/mnt/user-data/outputs/.tool-results/grep-")
    saved = thread.user_data / record["path"].removeprefix("/mnt/user-data/")
    assert len(saved.read_text().splitlines()) >= 250
    assert len(grep.content) < 12_000


def test_a_grep_hit_is_not_a_read_for_read_before_write(home, thread):
    """A grep shows matching lines, not the file: editing still needs read_file first."""
    found = run(home, [
        call("grep", pattern="TODO", path=WS, glob="*.py"),
        call("str_replace", path=f"{WS}/src/app.py", old="# TODO: tidy", new="# tidied"),
        call("read_file", path=f"{WS}/src/app.py"),
        call("str_replace", path=f"{WS}/src/app.py", old="# TODO: tidy", new="# tidied"),
    ])
    grep, refused, read, edited = found
    assert grep.content == f"{WS}/src/app.py:3: # TODO: tidy"
    assert refused.status == "error" and tool_meta(refused).error_type == "blocked"
    assert tool_meta(refused).recommended_next_action == "read_first"
    assert read.status == edited.status == "success"
    assert (thread.workspace / "src/app.py").read_text().endswith("# tidied\n")


def test_a_regex_that_backtracks_badly_ends_the_call_with_a_note(home, thread, monkeypatch):
    """Through the agent: the engine's timeout stops the search; the run goes on."""
    from antler.runtime.sandbox import search

    monkeypatch.setattr(search, "TIME_LIMIT_SECONDS", 0.3)
    (thread.workspace / "hostile.txt").write_text("a" * 40 + "!\n")
    grep, after = run(home, [call("grep", pattern="(a|aa)+$", path=WS),
                             call("read_file", path="notes.md")])
    assert grep.status == "success" and tool_meta(grep).status == "partial_success"
    assert grep.content.splitlines()[-2:] == [
        "[output truncated: the search stopped after 0.3s; narrow `path` or `glob`, or "
        "simplify the pattern]", "[1 binary file(s) skipped]"]
    assert after.content.startswith("hello from the notes")
