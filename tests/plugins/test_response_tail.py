"""The response guards together, and the contract helpers they added.

The end-to-end run: the lead delegates a task; the subagent loops on one call
until loop_detection warns it and then stops it; the lead's answer to the task
result is empty, so terminal_response retries it once; the retried answer is
cut at the length limit, which model_length_finish_reason records as the run's
stop reason.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent as langchain_create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.binop import BinaryOperatorAggregate

from antler.contracts.messages import (
    HIDDEN_KEY,
    is_hidden,
    provider_field,
    provider_text,
    strip_tool_calls,
)
from antler.contracts.runstore import PendingQueue
from antler.contracts.stop_reason import STOP_REASON_KEY, StopReasonState, stop_reason_of
from antler.plugin_api.context import RuntimeOptions
from antler.plugins.loop_detection.middleware import WARNING_NAME
from antler.plugins.terminal_response.middleware import RECOVERY_NAME
from antler.runtime.models import ScriptedChatModel

from .support import visible
from .tail_support import MODES, FakeRuntime, Tools, call, make_agent, named, run, tool_results

LOOP = call("lookup", query="the same page")


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_warning_stop_empty_reply_and_length_cap_in_one_run(tmp_path, mode, use_async):
    tools = Tools()
    script = [
        call("task", description="research", prompt="Find the page."),  # lead
        LOOP, LOOP, LOOP, LOOP, LOOP,                                    # subagent
        "",                                                              # lead: empty
        AIMessage("The page says that the answer is",                    # lead: retried
                  response_metadata={"finish_reason": "length"}),
    ]
    agent, model = make_agent(tmp_path, script, tools=tools,
                              runtime=RuntimeOptions(subagents_enabled=True), **MODES[mode])
    with agent:
        state = run(agent, "What does the page say?", use_async=use_async)

    assert model.remaining == 0
    # The subagent was warned in the request after its third identical call...
    assert [i for i, r in enumerate(model.calls) if named(r, WARNING_NAME)] == [4]
    # ...and stopped at the fifth: four lookups ran, and the lead got the stop note.
    assert tools.count("lookup") == 4
    [task_result] = tool_results(state)
    assert task_result.name == "task"
    assert task_result.content.startswith("[FORCED STOP] `lookup` repeated 5 times")
    assert task_result.additional_kwargs["subagent_stop_reason"] == "loop_capped"
    # The lead's empty answer was retried once with the hidden recovery prompt.
    assert [i for i, r in enumerate(model.calls) if named(r, RECOVERY_NAME)] == [7]
    # The final answer is the cut one, unchanged, and the run says why it ended.
    final = state["messages"][-1]
    assert final.content == "The page says that the answer is"
    assert [type(m).__name__ for m in visible(state["messages"])] == \
        ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    # The hints were request-only: the one hidden message kept is the date reminder.
    assert [m.additional_kwargs[HIDDEN_KEY]["source"] for m in state["messages"]
            if is_hidden(m)] == ["dynamic_context"]
    recorded = stop_reason_of(state, "r1")
    assert recorded["reason"] == "model_length_capped"
    assert recorded["detail"] == "openai: finish_reason=length"


# -- contract helpers ------------------------------------------------------------------------


def test_strip_tool_calls_can_keep_the_providers_finish_reason():
    message = AIMessage("", tool_calls=[{"name": "x", "args": {}, "id": "1"}],
                        response_metadata={"finish_reason": "content_filter"})
    assert strip_tool_calls(message, None, "note").response_metadata["finish_reason"] == \
        "content_filter"
    refused = AIMessage("", tool_calls=[{"name": "x", "args": {}, "id": "1"}])
    assert strip_tool_calls(refused, None, "n").response_metadata["finish_reason"] == "stop"
    kept = strip_tool_calls(refused, None, "n", keep_finish_reason=True)
    assert "finish_reason" not in kept.response_metadata and kept.tool_calls == []


def test_provider_fields_are_read_from_metadata_then_additional_kwargs():
    class Reason:
        name = "MAX_TOKENS"

    message = AIMessage("", response_metadata={"finish_reason": Reason(), "stop_reason": None},
                        additional_kwargs={"stop_reason": " refusal ", "finish_reason": "x"})
    assert provider_text(message, "finish_reason") == "MAX_TOKENS"
    assert provider_text(message, "stop_reason") == "refusal"
    assert provider_field(message, "missing") is None
    assert provider_text(HumanMessage("hi"), "finish_reason") is None
    assert provider_text(AIMessage("", response_metadata={"n": 3}), "n") == "3"


class Request:
    """The parts of a ModelRequest that `PendingQueue.deliver` uses."""

    def __init__(self, run_id: str) -> None:
        self.runtime = FakeRuntime(run_id)
        self.messages: list[Any] = [HumanMessage("q")]

    def override(self, messages: list[Any]) -> Request:
        copy = Request(self.runtime.context.run_id)
        copy.messages = messages
        return copy


def test_deliver_sends_pending_items_as_one_hidden_message_and_commits_after_success():
    queue: PendingQueue[str] = PendingQueue()
    queue.add(("t", "r"), "first")
    queue.add(("t", "r"), "second")
    seen: list[list[Any]] = []

    def failing(request: Any) -> Any:
        seen.append(request.messages)
        raise TimeoutError

    with pytest.raises(TimeoutError):
        queue.deliver(Request("r"), failing, name="hint", source="test")
    assert queue.peek(("t", "r")) == ("first", "second")  # kept for the retry

    def answer(request: Any) -> str:
        seen.append(request.messages)
        return "ok"

    assert asyncio.run(queue.adeliver(Request("r"), _async(answer), name="hint",
                                      source="test")) == "ok"
    assert queue.peek(("t", "r")) == ()
    note = seen[-1][-1]
    assert seen[0][-1] == note and note.name == "hint" and is_hidden(note)
    assert note.content == "first\n\nsecond"
    assert queue.deliver(Request("r"), answer, name="hint", source="test") == "ok"
    assert seen[-1] == [HumanMessage("q")]  # nothing pending: the request is unchanged
    assert queue.deliver(Request("other"), answer, name="h", source="t") == "ok"


def _async(function: Any) -> Any:
    async def wrapper(request: Any) -> Any:
        return function(request)

    return wrapper


def test_the_stop_reason_channel_uses_its_reducer_in_a_graph():
    graph = langchain_create_agent(model=ScriptedChatModel(["hi"]), state_schema=StopReasonState)
    channel = graph.channels[STOP_REASON_KEY]
    assert isinstance(channel, BinaryOperatorAggregate)
    # Callers cannot set it through the graph input.
    assert STOP_REASON_KEY not in graph.get_input_jsonschema().get("properties", {})
