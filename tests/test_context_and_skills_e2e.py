"""One scripted run: a slash skill and its tool policy, summarization, and the date reminder.

Not covered yet: durable_context (the delegation and skill record across summarization).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from antler.plugin_api.context import CLOCK, SKILLS
from antler.plugins.skill_activation.middleware import ACTIVATION_KEY
from antler.runtime.skills import SkillsRegistry

from .plugins.tail_support import MODES, Tools, call, make_agent, run

FIXTURES = Path(__file__).parent / "fixtures" / "skills"
SUMMARIZE = ("dynamic_context: {enabled: true}\n"
             "summarization:\n  enabled: true\n  trigger: [{type: messages, value: 8}]\n"
             "  keep: {type: messages, value: 3}\n")
DATE = "<current_date>2026-12-01, Tuesday</current_date>"


class Provider:
    """Script turns from a provider that accepts only one, leading, system message.

    Summary requests (summarization asks the same model) get a summary; the agent's
    requests get the next planned reply.
    """

    def __init__(self, replies):
        self.replies = list(replies)
        self.summaries = 0

    def __call__(self, messages):
        positions = [i for i, m in enumerate(messages) if isinstance(m, SystemMessage)]
        assert positions in ([], [0]), f"system messages at {positions}"
        if "summar" in str(messages[-1].content).lower() and len(messages) == 1:
            self.summaries += 1
            return "SUMMARY: the user asked for a data report; tables were read"
        return self.replies.pop(0)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_slash_skill_through_summarization_keeps_skill_and_one_date(tmp_path, mode, use_async):
    tools = Tools()
    provider = Provider([call("ls", path="/mnt/user-data/uploads"),
                         call("bash", command="cat /mnt/user-data/uploads/*.csv"),
                         *[call("read_file", path=f"/mnt/user-data/uploads/t{i}.csv")
                           for i in range(4)], "The report."])
    agent, model = make_agent(
        tmp_path, [provider] * 12, SUMMARIZE, tools=tools,
        tool_names=("ls", "read_file", "bash"),
        services={SKILLS: SkillsRegistry([FIXTURES]),
                  CLOCK: lambda: datetime(2026, 12, 1, 9, 0)}, **MODES[mode])
    state = run(agent, "/data-report summarize uploads", use_async=use_async)

    assert state["messages"][-1].text == "The report."
    # The model saw only the skill's tools, and its call outside them was refused.
    agent_requests = [r for r in model.requests if len(r.messages) > 1]
    assert all(set(r.tool_names) == {"ls", "read_file", "ask_clarification"}
               for r in agent_requests)
    # (Summarization folds that early result away later, so read it from the next request.)
    bash = [m for r in model.calls for m in r if isinstance(m, ToolMessage) and m.name == "bash"]
    assert bash and all(m.status == "error" and "not allowed by the active skill policy"
                        in m.text for m in bash)
    assert provider.summaries >= 1, "summarization never triggered"
    agent_calls = [c for c in model.calls if len(c) > 1]
    last = agent_calls[-1]
    assert any(getattr(m, "additional_kwargs", {}).get("lc_source") == "summarization"
               for m in last), "the last call does not follow a summary"
    # The skill still rides the request after summarization ...
    assert any(isinstance(m, HumanMessage) and ACTIVATION_KEY in m.additional_kwargs
               for m in last), "the skill is gone after summarization"
    # ... and the date reminder is present once, in the one leading system message.
    systems = [m for m in last if isinstance(m, SystemMessage)]
    assert len(systems) == 1 and last[0] is systems[0]
    assert systems[0].text.count(DATE) == 1
