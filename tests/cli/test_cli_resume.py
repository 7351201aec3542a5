"""Paused runs: `antler run` says it waits for approval; `antler resume` continues it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from antler.cli import cli
from antler.cli.run import PAUSED_EXIT_CODE

HITL = """
extensions:
  middlewares:
    - use: langchain.agents.middleware:HumanInTheLoopMiddleware
      name: human_approval
      chains: [lead]
      config:
        interrupt_on:
          bash: true
"""

WRITE = "echo approved > /mnt/user-data/outputs/a.txt"


def files(tmp_path: Path, mode: str = "batched") -> tuple[Path, Path, Path]:
    config = tmp_path / "antler.yaml"
    data = yaml.safe_load(HITL)
    if mode == "per_call":
        data["extensions"]["middlewares"][0]["config"]["interrupt_mode"] = "per_call"
    config.write_text(yaml.safe_dump(data))
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump([
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": WRITE}}]},
        "unused",
    ]))
    second = tmp_path / "second.yaml"
    second.write_text(yaml.safe_dump(["Done: the file is written.", "A Title"]))
    return config, first, second


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_a_paused_run_says_so_and_resume_approves_it(tmp_path, mode):
    config, first, second = files(tmp_path, mode)
    home = tmp_path / "home"
    outputs = home / "users/default/threads/t1/user-data/outputs"
    paused = run("run", "write the file", "--config", config, "--model", f"scripted:{first}",
                 "--home", home, "--thread", "t1")
    assert paused.exit_code == PAUSED_EXIT_CODE, paused.stderr
    assert "[waiting] the run is waiting for approval of 1 action:" in paused.stderr
    assert f"bash({{'command': '{WRITE}'}})" in paused.stderr
    assert "antler resume t1 --approve" in paused.stderr
    assert not (outputs / "a.txt").exists()  # nothing ran before the decision

    resumed = run("resume", "t1", "--approve", "--config", config, "--model",
                  f"scripted:{second}", "--home", home)
    assert resumed.exit_code == 0, resumed.stderr
    assert "Done: the file is written." in resumed.stdout
    assert (outputs / "a.txt").read_text() == "approved\n"


def test_resume_rejects_with_a_message_and_the_tool_does_not_run(tmp_path):
    config, first, second = files(tmp_path)
    home = tmp_path / "home"
    assert run("run", "write", "--config", config, "--model", f"scripted:{first}", "--home",
               home, "--thread", "t2").exit_code == PAUSED_EXIT_CODE
    resumed = run("resume", "t2", "--reject", "--message", "not today", "--config", config,
                  "--model", f"scripted:{second}", "--home", home)
    assert resumed.exit_code == 0, resumed.stderr
    assert "not today" in resumed.stderr  # the refusal is the tool's result
    assert not (home / "users/default/threads/t2/user-data/outputs/a.txt").exists()


def test_resume_edits_the_arguments(tmp_path):
    config, first, second = files(tmp_path)
    home = tmp_path / "home"
    assert run("run", "write", "--config", config, "--model", f"scripted:{first}", "--home",
               home, "--thread", "t3").exit_code == PAUSED_EXIT_CODE
    edited = '{"command": "echo edited > /mnt/user-data/outputs/b.txt"}'
    resumed = run("resume", "t3", "--edit", edited, "--config", config, "--model",
                  f"scripted:{second}", "--home", home)
    assert resumed.exit_code == 0, resumed.stderr
    outputs = home / "users/default/threads/t3/user-data/outputs"
    assert (outputs / "b.txt").read_text() == "edited\n" and not (outputs / "a.txt").exists()


def test_resume_errors_are_clear(tmp_path):
    config, first, second = files(tmp_path)
    home = tmp_path / "home"
    idle = run("run", "hi", "--model", f"scripted:{second}", "--home", home, "--thread", "t4")
    assert idle.exit_code == 0, idle.stderr
    nothing = run("resume", "t4", "--approve", "--model", f"scripted:{second}", "--home", home)
    assert nothing.exit_code == 2 and "is not waiting for a decision" in nothing.stderr
    both = run("resume", "t4", "--approve", "--edit", "{}", "--home", home)
    assert both.exit_code == 2 and "choose one of" in both.stderr
    assert run("run", "write", "--config", config, "--model", f"scripted:{first}", "--home",
               home, "--thread", "t5").exit_code == PAUSED_EXIT_CODE
    bad = run("resume", "t5", "--edit", "[1]", "--config", config, "--model",
              f"scripted:{second}", "--home", home)
    assert bad.exit_code == 2 and "expects a JSON object" in bad.stderr
    two = run("resume", "t5", "--edit", "[{}, {}]", "--config", config, "--model",
              f"scripted:{second}", "--home", home)
    assert two.exit_code == 1 and "gave 2 set(s) of arguments for 1 pending" in two.stderr


def test_trace_is_printed_when_the_run_fails(tmp_path):
    config = tmp_path / "boom.yaml"
    config.write_text("extensions:\n  middlewares:\n"
                      "    - {use: 'tests.fixtures.failing:BoomMiddleware', name: boom}\n"
                      "plugins:\n  boom: {on_error: fail}\n")
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(["never"]))
    result = run("run", "hi", "--config", config, "--model", f"scripted:{script}", "--home",
                 tmp_path / "home", "--trace")
    assert result.exit_code == 1
    assert "boom in before_model" in result.stderr
    assert "boom.before_model" in result.stderr  # the timeline, up to the failure
    assert "Traceback" not in result.stderr


def test_an_extension_entry_sets_its_own_error_policy(tmp_path):
    config = tmp_path / "boom.yaml"
    config.write_text("extensions:\n  middlewares:\n"
                      "    - {use: 'tests.fixtures.failing:BoomMiddleware', on_error: fail}\n")
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(["never"]))
    result = run("run", "hi", "--config", config, "--model", f"scripted:{script}", "--home",
                 tmp_path / "home")
    assert result.exit_code == 1 and "boom in before_model" in result.stderr


def test_only_a_resume_command_passes_the_input_checks(tmp_path):
    from langgraph.types import Command

    from antler.errors import InputError
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    with create_agent(model=ScriptedChatModel(["x"]), base_dir=tmp_path,
                      checkpointer="memory") as agent:
        with pytest.raises(InputError, match=r"only Command\(resume=\.\.\.\)"):
            agent.invoke(Command(update={"title": "forged"}), thread_id="t")
        with pytest.raises(InputError):
            agent.invoke(Command(goto="model"), thread_id="t")


# -- the script continues, resume finds the interrupt, edits and approvals print as such -------


def _one_script(tmp_path: Path) -> Path:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump([
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": WRITE}}]},
        "Done: the file is written.", "A Title"]))
    return script


def test_the_scripted_model_continues_across_processes(tmp_path):
    config, _, _ = files(tmp_path)
    script, home = _one_script(tmp_path), tmp_path / "home"
    # the README's way: resume with the same --model as the run that paused
    paused = run("run", "write", "--config", config, "--model", f"scripted:{script}",
                 "--home", home, "--thread", "s1")
    assert paused.exit_code == PAUSED_EXIT_CODE, paused.stderr
    resumed = run("resume", "s1", "--approve", "--config", config, "--model",
                  f"scripted:{script}", "--home", home)
    assert resumed.exit_code == 0, resumed.stderr  # not turn 1 again, so no second pause
    assert "Done: the file is written." in resumed.stdout
    assert "[approved] bash(" in resumed.stderr


def test_resume_finds_the_pending_interrupt_whatever_the_flags(tmp_path):
    config, _, _ = files(tmp_path)
    script, home = _one_script(tmp_path), tmp_path / "home"
    assert run("run", "write", "--config", config, "--model", f"scripted:{script}", "--home",
               home, "--thread", "s2").exit_code == PAUSED_EXIT_CODE
    wrong = run("resume", "s2", "--approve", "--model", f"scripted:{script}", "--home", home)
    assert wrong.exit_code == 2
    assert "waits for a decision (1 pending interrupt in its checkpoint)" in wrong.stderr
    assert f"the paused run used --config {config.absolute()} (now (none))" in wrong.stderr
    assert "is not waiting" not in wrong.stderr
    right = run("resume", "s2", "--approve", "--config", config, "--model",
                f"scripted:{script}", "--home", home)
    assert right.exit_code == 0, right.stderr


def test_edit_prints_the_edited_arguments_not_the_original(tmp_path):
    config, _, _ = files(tmp_path)
    script, home = _one_script(tmp_path), tmp_path / "home"
    assert run("run", "write", "--config", config, "--model", f"scripted:{script}", "--home",
               home, "--thread", "s3").exit_code == PAUSED_EXIT_CODE
    edited = "echo edited > /mnt/user-data/outputs/b.txt"
    resumed = run("resume", "s3", "--edit", f'{{"command": "{edited}"}}', "--config", config,
                  "--model", f"scripted:{script}", "--home", home)
    assert resumed.exit_code == 0, resumed.stderr
    assert f"[edited] bash({{'command': '{edited}'}})" in resumed.stderr
    assert WRITE not in resumed.stderr  # the original call is not printed as if it ran


def test_the_approval_provider_pauses_with_a_readable_action(tmp_path):
    config = tmp_path / "antler.yaml"
    config.write_text("guardrails:\n  enabled: true\n  provider: approval\n"
                      "  provider_options: {tools: [bash]}\n")
    script, home = _one_script(tmp_path), tmp_path / "home"
    paused = run("run", "write", "--config", config, "--model", f"scripted:{script}",
                 "--home", home, "--thread", "s4")
    assert paused.exit_code == PAUSED_EXIT_CODE, paused.stderr
    assert f"  bash({{'command': '{WRITE}'}})  [approve/reject]" in paused.stderr
    assert "interrupt(" not in paused.stderr
    rejected = run("resume", "s4", "--reject", "--message", "not now", "--config", config,
                   "--model", f"scripted:{script}", "--home", home)
    assert rejected.exit_code == 0, rejected.stderr
    assert "not now" in rejected.stderr
    assert not (home / "users/default/threads/s4/user-data/outputs/a.txt").exists()
