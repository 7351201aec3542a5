"""Runs that fail part-way, through the real chain: nothing said is lost, resume works."""

from __future__ import annotations

import pytest

from antler.contracts.fallback import error_fallback_of
from antler.runtime.models import ScriptedChatModel
from antler.runtime.models.scripted import ScriptExhaustedError
from tests.plugins.support import make_agent


def texts(state):
    return [(m.type, m.text) for m in state["messages"] if m.type in ("human", "ai", "tool")]


def test_a_script_that_ends_early_fails_clearly_and_the_thread_resumes(tmp_path):
    # First process: the model asks for a tool, then the script runs out.
    agent, _ = make_agent(tmp_path, [
        {"content": "", "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data"}}]},
    ], checkpointer="sqlite")
    with agent, pytest.raises(ScriptExhaustedError, match="it has 1 turn and turn 2 was requested"):
        agent.invoke("look around", thread_id="t1")
    # Second process, same base directory: the thread resumes with everything kept.
    agent, model = make_agent(tmp_path, ["I looked."], checkpointer="sqlite")
    with agent:
        state = agent.invoke("so?", thread_id="t1")
    kinds = [kind for kind, _ in texts(state)]
    assert kinds == ["human", "ai", "tool", "human", "ai"]
    assert texts(state)[-1] == ("ai", "I looked.")
    # The new model saw the earlier exchange, tool result included.
    sent = [m.type for m in model.calls[0] if m.type != "system"]
    assert sent[:3] == ["human", "ai", "tool"]


def test_a_model_that_raises_leaves_the_question_and_a_dangling_call_is_repaired(tmp_path):
    calls = {"n": 0}

    def flaky(messages):
        calls["n"] += 1
        raise RuntimeError("provider unavailable")

    agent, _ = make_agent(tmp_path, [
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": "sleep 0"}},
                                       {"name": "no_such_tool", "args": {}}]},
        flaky,
    ])
    with agent:
        agent.invoke("do it", thread_id="t1")  # the failure ends the run with an error reply
        assert calls["n"] == 1  # an unclassified error is not retried
        kept = agent.state("t1")
    assert texts(kept)[0] == ("human", "do it")  # what the user said is checkpointed
    assert any(m.type == "ai" and m.tool_calls for m in kept["messages"])
    assert "provider unavailable" in error_fallback_of(kept["messages"][-1])["detail"]


def test_an_interrupted_tool_turn_is_repaired_in_the_next_request(tmp_path):
    from langchain_core.messages import AIMessage, HumanMessage

    agent, model = make_agent(tmp_path, ["Starting over."])
    with agent:
        agent.graph.update_state(agent.run_config("t1"), {"messages": [
            HumanMessage(content="list files", id="h1"),
            AIMessage(content="", id="a1", tool_calls=[
                {"name": "ls", "args": {"path": "/"}, "id": "call_lost"}]),
        ]})
        state = agent.invoke("are you there?", thread_id="t1")
    request = [m for m in model.calls[0] if m.type != "system"]
    # The placeholder sits right after the interrupted call, before the new question.
    assert [m.type for m in request] == ["human", "ai", "tool", "human"]
    assert request[2].tool_call_id == "call_lost" and request[2].status == "error"
    # The checkpoint keeps the history as it was: the repair is for the request only.
    assert not any(m.type == "tool" for m in state["messages"])


def test_a_malformed_script_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"turn 1 \(index 0\) is malformed: tool_calls\[0\]"):
        ScriptedChatModel([{"content": "", "tool_calls": [{"args": {}}]}])
