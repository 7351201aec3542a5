"""contrib approval: a person approves or rejects a tool call; the run pauses and resumes.

Through a real graph with the built-in guardrail plugin: the interrupt reaches the
caller with the pending action, the resumed run runs the tool only when approved, and
an interrupt is never mistaken for a provider failure (not even with fail_closed off).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.types import Command

from antler.contrib.approval.provider import ApprovalGuardrail
from antler.plugin_api.providers import GUARDRAIL_PROVIDER, TOOL_META_KEY, ProviderConfigError
from tests.plugins.guard_support import Counter, call, make_agent, tool_results

APPROVAL = """
guardrails:
  enabled: true
  provider: approval
  fail_closed: {fail_closed}
  provider_options: {{tools: [launch]}}
"""


def approval(fail_closed: bool = True) -> str:
    return APPROVAL.format(fail_closed=str(fail_closed).lower())


def run(agent: Any, payload: Any, thread: str, use_async: bool) -> dict[str, Any]:
    config, context = agent.run_config(thread), agent.context(thread, run_id=f"{thread}-r")
    if use_async:
        return asyncio.run(agent.graph.ainvoke(payload, config=config, context=context))
    return agent.graph.invoke(payload, config=config, context=context)


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("fail_closed", [True, False])
@pytest.mark.parametrize(("answer", "runs"), [("approve", 1), ({"decision": "approve"}, 1),
                                              ("reject", 0), ({"decision": "reject",
                                                              "reason": "not today"}, 0),
                                              ("maybe", 0)])
def test_the_run_waits_for_a_person_and_runs_the_tool_only_when_approved(
        tmp_path, answer, runs, fail_closed, use_async):
    counter = Counter()
    agent, _ = make_agent(tmp_path, [call("launch", target="moon"), "done"],
                          approval(fail_closed), tools=[counter.tool("launch")])
    with agent:
        paused = run(agent, agent.input("go"), "t1", use_async)
        [pending] = paused["__interrupt__"]
        assert pending.value["type"] == "approval" and pending.value["tool"] == "launch"
        assert pending.value["args"] == {"target": "moon"}
        assert counter["launch"] == 0  # nothing ran while waiting
        state = run(agent, Command(resume=answer), "t1", use_async)
    [result] = tool_results(state)
    assert counter["launch"] == runs
    meta = result.additional_kwargs.get(TOOL_META_KEY)
    if runs:
        assert result.status == "success" and meta["status"] == "success"  # no refusal
    else:
        assert result.status == "error" and meta["error_type"] == "denied"
        assert meta["rule"] in ("rejected", "unanswered")
    if isinstance(answer, dict) and answer.get("reason"):
        assert "not today" in result.content


def test_tools_that_need_no_approval_run_without_a_pause(tmp_path):
    counter = Counter()
    agent, _ = make_agent(tmp_path, [call("lookup"), "done"], approval(),
                          tools=[counter.tool("lookup")])
    with agent:
        state = agent.invoke("go", thread_id="t1")
    assert "__interrupt__" not in state and counter["lookup"] == 1
    assert isinstance(agent.services.get(GUARDRAIL_PROVIDER), ApprovalGuardrail)


def test_bad_options_are_a_clear_error():
    with pytest.raises(ProviderConfigError, match="must be a list"):
        ApprovalGuardrail(tools="bash")  # type: ignore[arg-type]
