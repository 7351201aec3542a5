"""`antler run` and `antler demo` from the command line, with scripted models."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from antler.cli import cli


def script(tmp_path: Path, turns: list) -> Path:
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(turns), encoding="utf-8")
    return path


def run(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def test_run_streams_the_answer_and_shows_tool_calls(tmp_path):
    path = script(tmp_path, [
        {"content": "", "tool_calls": [{"name": "bash", "args": {
            "command": "echo hello > /mnt/user-data/outputs/hi.txt && cat "
                       "/mnt/user-data/outputs/hi.txt"}}]},
        "Wrote hi.txt for you.",
    ])
    home = tmp_path / "home"
    code, out, err = run("run", "write a file", "--model", f"scripted:{path}", "--home", home,
                         "--thread", "t1", "--trace")
    assert code == 0, err
    assert out.strip() == "Wrote hi.txt for you."  # the answer alone on stdout
    assert "-> bash(" in err and "<- bash: hello" in err
    assert "[title] write a file" in err  # fallback title: the script has no title turn
    assert "sandbox_audit.wrap_tool_call" in err and "[tool execution]" in err  # --trace
    assert (home / "users/default/threads/t1/user-data/outputs/hi.txt").read_text() == "hello\n"


def test_run_uploads_files_and_resumes_the_thread(tmp_path):
    upload = tmp_path / "notes.md"
    upload.write_text("# Notes\n", encoding="utf-8")
    home = tmp_path / "home"
    first = script(tmp_path, ["Seen it."])
    code, out, err = run("run", "read this", "--upload", upload, "--model", f"scripted:{first}",
                         "--home", home, "--thread", "t1")
    assert code == 0, err
    assert (home / "users/default/threads/t1/user-data/uploads/notes.md").exists()
    second = tmp_path / "second.yaml"
    second.write_text(yaml.safe_dump(["Still here."]), encoding="utf-8")
    code, out, err = run("run", "and now?", "--model", f"scripted:{second}", "--home", home,
                         "--thread", "t1")
    assert code == 0, err
    assert out.strip() == "Still here."


def test_run_prints_a_clarification_question_on_stdout(tmp_path):
    path = script(tmp_path, [{"content": "", "tool_calls": [{"name": "ask_clarification", "args": {
        "question": "Which region?", "mode": "choice_with_other",
        "options": ["north", "south"]}}]}])
    code, out, err = run("run", "forecast", "--model", f"scripted:{path}", "--home",
                         tmp_path / "home")
    assert code == 0, err
    assert out.startswith("[clarification] Which region?")


def test_hostile_upload_name_and_missing_script_are_clear_errors(tmp_path):
    code, _, err = run("run", "x", "--model", "scripted", "--home", tmp_path / "home")
    assert code == 2 and "needs a script" in err
    code, _, err = run("run", "x", "--model", "openai:gpt-4o", "--home", tmp_path / "home")
    assert code == 1 and "pip install langchain-openai" in err
    hidden = tmp_path / ".secret"
    hidden.write_text("x", encoding="utf-8")
    path = script(tmp_path, ["ok"])
    code, _, err = run("run", "x", "--upload", hidden, "--model", f"scripted:{path}",
                       "--home", tmp_path / "home")
    assert code == 1 and "upload name '.secret' is refused" in err
    assert "Traceback" not in err


def test_demo_prints_the_chain_the_timelines_and_where_things_are(tmp_path):
    code, out, err = run("demo", "--home", tmp_path / "demo")
    assert code == 0, err
    assert "Lead chain: input_sanitization -> " in out
    assert "=== Turn 1 timeline ===" in out and "=== Turn 2 timeline ===" in out
    assert "Checkpoint:" in out and str(tmp_path / "demo") in out
