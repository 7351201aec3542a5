"""skill_activation through real graphs: /skill-name loads the skill for the run, once."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from antler.contracts.messages import is_hidden
from antler.plugin_api.context import SKILLS
from antler.plugins.skill_activation.middleware import ACTIVATION_KEY, AUDIT_LOGGER, parse_slash
from antler.runtime.skills import SkillsRegistry

from .tail_support import MODES, Tools, call, failing_turn, make_agent, run

FIXTURES = Path(__file__).parent.parent / "fixtures" / "skills"


def registry(tmp_path: Path | None = None, **kwargs: Any) -> SkillsRegistry:
    return SkillsRegistry([FIXTURES], **kwargs)


def agent_for(tmp_path, script, *, skills: SkillsRegistry | None = None, mode="unfused",
              tools: Tools | None = None):
    return make_agent(tmp_path, script, services={SKILLS: skills or registry()},
                      tools=tools or Tools(), tool_names=("ls", "read_file", "bash"),
                      **MODES[mode])


def activations(request: list[Any]) -> list[HumanMessage]:
    return [m for m in request if isinstance(m, HumanMessage) and ACTIVATION_KEY in
            m.additional_kwargs]


def audits(caplog) -> list[dict[str, Any]]:
    return [getattr(r, ACTIVATION_KEY) for r in caplog.records if hasattr(r, ACTIVATION_KEY)]


def test_the_slash_grammar():
    assert parse_slash("/data-report summarize uploads") == ("data-report", "summarize uploads")
    assert parse_slash("  /data-report") == ("data-report", "")
    assert parse_slash("/help me") is None              # reserved
    assert parse_slash("/usr/bin is a folder") is None   # not followed by a space
    assert parse_slash("/Data-Report x") is None
    assert parse_slash("please /data-report") is None


def test_activation_loads_the_skill_for_every_model_call_of_the_run_and_audits_once(
        tmp_path, mode, use_async, caplog):
    agent, model = agent_for(tmp_path, [call("ls", path="/mnt/user-data/uploads"), "Report."],
                             mode=mode)
    with caplog.at_level(logging.INFO, logger=AUDIT_LOGGER):
        state = run(agent, "/data-report summarize uploads", use_async=use_async)
    assert state["messages"][-1].text == "Report."
    for request in model.calls:
        (note,) = activations(request)
        user = next(m for m in request if isinstance(m, HumanMessage) and not is_hidden(m))
        assert request.index(note) + 1 == request.index(user)      # just before the message
        assert "<skill_content>" in note.text and "Read every CSV" not in note.text
        assert "read every CSV file there" in note.text
        assert "<user_request>summarize uploads</user_request>" in note.text
        assert 'path="/mnt/skills/public/data-report/SKILL.md"' in note.text
    # Nothing is written to the conversation, and the file was audited once.
    assert not any(ACTIVATION_KEY in m.additional_kwargs for m in state["messages"])
    (record,) = audits(caplog)
    assert record["event"] == "middleware:skill_activation"
    assert record["skill"] == "data-report" and record["run"] == "r1"
    assert len(record["sha256"]) == 64


def test_a_retried_model_call_still_carries_the_skill(tmp_path, caplog):
    agent, model = agent_for(tmp_path, [failing_turn, "Report."])
    with caplog.at_level(logging.INFO, logger=AUDIT_LOGGER):
        run(agent, "/data-report go")
    assert len(model.calls) == 2 and all(activations(request) for request in model.calls)
    assert len(audits(caplog)) == 1


def test_a_new_slash_message_activates_again_and_a_plain_one_does_not(tmp_path, caplog):
    agent, model = agent_for(tmp_path, ["one", "two", "three"])
    with caplog.at_level(logging.INFO, logger=AUDIT_LOGGER):
        run(agent, "/data-report first")
        run(agent, "thanks", run_id="r2")
        run(agent, "/data-report second", run_id="r3")
    assert [len(activations(r)) for r in model.calls] == [1, 0, 1]
    assert [a["run"] for a in audits(caplog)] == ["r1", "r3"]


@pytest.mark.parametrize("text, reply", [
    ("/nope do it", "Skill `/nope` is not installed. Installed skills: /data-report."),
    ("/data-report do it", "Skill `/data-report` is disabled by the operator."),
])
def test_unknown_or_disabled_skills_get_a_direct_reply_without_the_model(
        tmp_path, mode, use_async, text, reply):
    agent, model = agent_for(tmp_path, [], skills=registry(disabled=["data-report"])
                             if "data-report" in text else None, mode=mode)
    state = run(agent, text, use_async=use_async)
    assert model.calls == []
    assert isinstance(state["messages"][-1], AIMessage) and state["messages"][-1].text == reply


def test_skills_that_cannot_be_loaded_get_a_direct_reply(tmp_path):
    class Broken:
        def get(self, name):
            raise OSError("disk gone")

        def index(self):
            raise OSError("disk gone")

    agent, model = agent_for(tmp_path, [], skills=Broken())  # type: ignore[arg-type]
    state = run(agent, "/data-report x")
    assert model.calls == [] and "could not be loaded" in state["messages"][-1].text


def test_the_enabled_skills_index_is_in_the_system_prompt(tmp_path):
    agent, model = agent_for(tmp_path, ["hi"])
    run(agent, "hello")
    system = model.calls[0][0]
    assert isinstance(system, SystemMessage)
    assert "- data-report (/mnt/skills/public/data-report/SKILL.md): Summarizes" in system.text
    assert "broken" not in system.text
