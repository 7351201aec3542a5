"""model_length_finish_reason: a final answer cut at the length limit records its stop reason."""

from __future__ import annotations

import asyncio
import enum
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage

from antler.contracts.stop_reason import StopReasonState, record_stop_reason, stop_reason_of
from antler.plugins.model_length_finish_reason.middleware import (
    ModelLengthFinishReasonMiddleware,
    length_stop,
)

from .tail_support import MODES, FakeRuntime, Tools, call, make_agent, reason, run


class FinishReason(enum.Enum):
    STOP = 1
    MAX_TOKENS = 2


@pytest.mark.parametrize("metadata, kwargs, expected", [
    ({"finish_reason": "length"}, {}, "openai: finish_reason=length"),
    ({"finish_reason": "LENGTH"}, {}, "openai: finish_reason=LENGTH"),
    ({}, {"finish_reason": "length"}, "openai: finish_reason=length"),
    ({"stop_reason": "max_tokens"}, {}, "anthropic: stop_reason=max_tokens"),
    ({"finish_reason": "MAX_TOKENS"}, {}, "gemini: finish_reason=MAX_TOKENS"),
    ({"finish_reason": FinishReason.MAX_TOKENS}, {}, "gemini: finish_reason=MAX_TOKENS"),
    ({"incomplete_details": {"reason": "max_output_tokens"}}, {},
     "generic: incomplete_details.reason=max_output_tokens"),
    ({"done_reason": "length"}, {}, "generic: done_reason=length"),
    ({"stopReason": "max_tokens"}, {}, "generic: stopReason=max_tokens"),
    ({"finish_reason": "stop"}, {}, None),
    ({"finish_reason": FinishReason.STOP}, {}, None),
    ({"stop_reason": "end_turn"}, {}, None),
    ({"finish_reason": "content_filter"}, {}, None),
    ({"incomplete_details": {"reason": "content_filter"}}, {}, None),
    ({}, {}, None),
])
def test_each_provider_spelling_is_detected(metadata, kwargs, expected):
    message = AIMessage("partial", response_metadata=metadata, additional_kwargs=kwargs)
    assert length_stop(message) == expected


def test_metadata_a_detector_cannot_read_counts_as_no_match():
    class Odd:
        @property
        def name(self) -> str:
            raise RuntimeError("broken enum")

    message = AIMessage("text", response_metadata={"finish_reason": Odd(),
                                                   "stop_reason": "max_tokens"})
    assert length_stop(message) == "anthropic: stop_reason=max_tokens"


@pytest.mark.parametrize("message", [
    AIMessage("", response_metadata={"finish_reason": "length"}),  # left to terminal_response
    AIMessage("cut", tool_calls=[{"name": "x", "args": {}, "id": "1"}],
              response_metadata={"finish_reason": "length"}),
    AIMessage('{"name": "x", "arguments": {"a"', response_metadata={"finish_reason": "length"},
              invalid_tool_calls=[{"name": "x", "args": '{"a"', "id": "1", "error": "cut",
                                   "type": "invalid_tool_call"}]),
])
def test_empty_replies_and_replies_with_tool_call_intent_are_left_alone(message):
    middleware = ModelLengthFinishReasonMiddleware()
    assert middleware.inspect({"messages": [message]}, FakeRuntime()) is None


def test_the_hook_records_without_touching_the_reply():
    middleware = ModelLengthFinishReasonMiddleware()
    message = AIMessage("half an ans", response_metadata={"stop_reason": "max_tokens"})
    update = asyncio.run(middleware.aafter_model({"messages": [message]}, FakeRuntime()))
    assert set(update) == {"antler_stop_reason"}
    assert update["antler_stop_reason"]["reason"] == "model_length_capped"


# -- in a real graph -------------------------------------------------------------------------


def capped(text: str, **metadata: Any) -> AIMessage:
    return AIMessage(text, response_metadata={"finish_reason": "length", **metadata})


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_a_cut_final_answer_keeps_its_text_and_records_the_reason(tmp_path, mode, use_async):
    agent, _ = make_agent(tmp_path, [call("lookup", query="q"),
                                     capped("The answer is that the")],
                          tools=Tools(), **MODES[mode])
    with agent:
        assert "model_length_finish_reason" in agent.chain.names
        state = run(agent, "explain", use_async=use_async)
    final = state["messages"][-1]
    assert final.content == "The answer is that the"
    assert final.response_metadata["finish_reason"] == "length"
    recorded = stop_reason_of(state, "r1")
    assert recorded["reason"] == "model_length_capped"
    assert recorded["detail"] == "openai: finish_reason=length"


def test_a_complete_answer_records_nothing(tmp_path):
    agent, _ = make_agent(tmp_path, ["All done."])
    with agent:
        state = run(agent, "hi")
    assert reason(state) is None


class EarlyGuard(AgentMiddleware):
    """Stands in for a guard that recorded its reason earlier in the run."""

    state_schema = StopReasonState

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if state["messages"][-1].tool_calls:
            return record_stop_reason("token_capped", runtime, detail="earlier")
        return None


def test_an_earlier_reason_of_the_run_wins_but_not_one_of_an_earlier_run(tmp_path):
    agent, _ = make_agent(tmp_path, [call("lookup", query="q"), capped("cut"), capped("cut")],
                          tools=Tools(), custom_middlewares=[EarlyGuard()])
    with agent:
        state = run(agent, "first", run_id="r1")
        assert stop_reason_of(state, "r1")["reason"] == "token_capped"
        state = run(agent, "second", run_id="r2")
    assert stop_reason_of(state, "r2")["reason"] == "model_length_capped"
    assert stop_reason_of(state, "r1") is None
