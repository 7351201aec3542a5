"""terminal_response: an empty final reply after tool work gets one hidden retry, then an error."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage

from antler.contracts.fallback import error_fallback_of, is_error_fallback
from antler.contracts.messages import hidden_marker, is_hidden
from antler.plugins.terminal_response.middleware import (
    FALLBACK_TEXT,
    RECOVERY_NAME,
    TerminalResponseMiddleware,
    is_empty_terminal_reply,
)

from .tail_support import (
    MODES,
    FakeRuntime,
    Tools,
    call,
    failing_turn,
    make_agent,
    named,
    reason,
    replies,
    run,
)

LOOKUP = call("lookup", query="weather")


def recovered(model) -> list[bool]:
    """Per model request: did it carry the recovery prompt?"""
    return [bool(named(request, RECOVERY_NAME)) for request in model.calls]


# -- what counts as an empty final reply ---------------------------------------------------


@pytest.mark.parametrize("message, empty", [
    (AIMessage(""), True),
    (AIMessage("   \n"), True),
    (AIMessage([]), True),
    (AIMessage([{"type": "text", "text": " "}, {"type": "reasoning", "reasoning": "hm"}]), True),
    (AIMessage("Done."), False),
    (AIMessage("", tool_calls=[{"name": "x", "args": {}, "id": "1"}]), False),
    (AIMessage("", invalid_tool_calls=[{"name": "x", "args": "{", "id": "1",
                                        "error": "bad", "type": "invalid_tool_call"}]), False),
    (AIMessage("", additional_kwargs={"tool_calls": [{"id": "1"}]}), False),
    (AIMessage("", response_metadata={"finish_reason": "tool_calls"}), False),
    (AIMessage([{"type": "tool_use", "id": "1", "name": "x", "input": {}}]), False),
    (AIMessage("", additional_kwargs={"antler_error_fallback": {"reason": "r"}}), False),
    (HumanMessage(""), False),
])
def test_empty_means_no_visible_text_and_no_tool_call_intent(message, empty):
    assert is_empty_terminal_reply(message) is empty


# -- the hook on its own ---------------------------------------------------------------------


def after_tools(reply_id: str = "empty") -> list:
    return [HumanMessage("go", id="h"),
            AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}]),
            ToolMessage("result", tool_call_id="c1"), AIMessage("", id=reply_id)]


def test_no_tool_work_this_turn_or_no_user_message_means_no_retry():
    middleware = TerminalResponseMiddleware()
    plain = [HumanMessage("hi", id="h"), AIMessage("", id="e")]
    assert middleware.judge({"messages": plain}, FakeRuntime()) is None
    earlier_turn = [*after_tools()[:3], AIMessage("ok", id="x"), HumanMessage("again"),
                    AIMessage("", id="e")]
    assert middleware.judge({"messages": earlier_turn}, FakeRuntime()) is None
    scheduled = [HumanMessage("tick", additional_kwargs=hidden_marker("scheduler")),
                 *after_tools()[1:]]
    assert middleware.judge({"messages": scheduled}, FakeRuntime()) is None


def test_judging_the_same_reply_again_decides_the_same_way():
    middleware = TerminalResponseMiddleware()
    state = {"messages": after_tools()}
    first = middleware.judge(state, FakeRuntime())
    assert first["jump_to"] == "model"
    assert first["messages"] == [RemoveMessage(id="empty")]
    assert middleware.judge(state, FakeRuntime()) == first  # a node re-run
    second = middleware.judge({"messages": after_tools("empty-2")}, FakeRuntime())
    assert "jump_to" not in second and is_error_fallback(second["messages"][0])
    assert second["messages"][0].id == "empty-2"


def test_before_agent_gives_a_resumed_run_a_fresh_budget_and_drops_other_runs():
    middleware = TerminalResponseMiddleware()
    middleware.judge({"messages": after_tools()}, FakeRuntime("old"))
    middleware.judge({"messages": after_tools()}, FakeRuntime("r"))
    asyncio.run(middleware.abefore_agent({}, FakeRuntime("r")))
    assert len(middleware.retried) == 0 and middleware.pending.peek(("t", "old")) == ()
    assert middleware.judge({"messages": after_tools("x")}, FakeRuntime("r"))["jump_to"] == \
        "model"
    middleware.after_agent({}, FakeRuntime("r"))
    assert len(middleware.retried) == 0


# -- in a real graph -------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_an_empty_final_reply_is_retried_once_with_a_hidden_prompt(tmp_path, mode, use_async):
    tools = Tools()
    agent, model = make_agent(tmp_path, [LOOKUP, "", "It is sunny."], tools=tools,
                              **MODES[mode])
    with agent:
        assert "terminal_response" in agent.chain.names
        state = run(agent, "What is the weather?", use_async=use_async)

    assert recovered(model) == [False, False, True]
    [prompt] = named(model.calls[2], RECOVERY_NAME)
    assert isinstance(prompt, HumanMessage) and is_hidden(prompt)
    assert "<system_reminder>" in prompt.content
    assert isinstance(model.calls[2][-2], ToolMessage)  # the empty reply is gone
    # The state holds the answer, not the empty reply nor the prompt.
    assert [m.content for m in replies(state)] == ["", "It is sunny."]
    assert replies(state)[0].tool_calls
    assert not named(state["messages"], RECOVERY_NAME)
    assert reason(state) is None
    assert tools.count("lookup") == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_second_empty_reply_becomes_a_visible_error_fallback(tmp_path, mode):
    empty_again = AIMessage("", id="second-empty")
    agent, model = make_agent(tmp_path, [LOOKUP, "", empty_again], tools=Tools(),
                              **MODES[mode])
    with agent:
        state = run(agent, "What is the weather?")
    final = state["messages"][-1]
    assert final.id == "second-empty"
    assert final.content == FALLBACK_TEXT
    assert error_fallback_of(final)["error_type"] == "empty_response"
    assert len(replies(state)) == 2
    assert reason(state) == "error_fallback"
    assert model.remaining == 0


def test_no_retry_without_tool_work_in_the_turn(tmp_path):
    agent, model = make_agent(tmp_path, ["", "unused"], tools=Tools())
    with agent:
        state = run(agent, "hello")
    assert model.remaining == 1
    assert state["messages"][-1].content == ""


def test_the_budget_is_once_per_run_even_if_the_retry_calls_a_tool(tmp_path):
    tools = Tools()
    agent, model = make_agent(tmp_path, [LOOKUP, "", call("lookup", query="again"), ""],
                              tools=tools)
    with agent:
        state = run(agent, "weather?")
    assert recovered(model) == [False, False, True, False]
    assert tools.count("lookup") == 2
    assert is_error_fallback(state["messages"][-1])


def test_every_run_gets_its_own_retry(tmp_path):
    agent, model = make_agent(tmp_path, [LOOKUP, "", "sunny", LOOKUP, "", "rainy"],
                              tools=Tools())
    with agent:
        assert run(agent, "today?", run_id="r1")["messages"][-1].content == "sunny"
        assert run(agent, "tomorrow?", run_id="r2")["messages"][-1].content == "rainy"
    assert recovered(model) == [False, False, True, False, False, True]


@pytest.mark.parametrize("mode", ["unfused", "model_node"])
def test_the_recovery_prompt_survives_a_retried_model_call(tmp_path, mode):
    agent, model = make_agent(tmp_path, [LOOKUP, "", failing_turn, "It is sunny."],
                              tools=Tools(), **MODES[mode])
    with agent:
        state = run(agent, "weather?")
    assert recovered(model) == [False, False, True, True]
    assert state["messages"][-1].content == "It is sunny."
    assert not is_error_fallback(state["messages"][-1])
