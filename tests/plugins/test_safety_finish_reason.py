"""safety_finish_reason: nothing runs on a reply the provider stopped for safety."""

from __future__ import annotations

import asyncio
import enum
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.errors import GraphInterrupt
from pydantic import ValidationError

from antler.chain.config import parse_config
from antler.contracts.runcontext import RunContext
from antler.errors import AntlerError, ConfigError
from antler.plugins.safety_finish_reason.config import SafetyFinishReasonConfig
from antler.plugins.safety_finish_reason.detectors import (
    AnthropicRefusalDetector,
    ContentFilterDetector,
    GeminiSafetyDetector,
    RefusalBlockDetector,
    SafetyDetector,
    SafetyTermination,
)
from antler.plugins.safety_finish_reason.middleware import (
    TERMINATION_KEY,
    SafetyFinishReasonMiddleware,
)
from antler.plugins.terminal_response.middleware import RECOVERY_NAME

from .tail_support import (
    MODES,
    FakeRuntime,
    Tools,
    call,
    make_agent,
    named,
    reason,
    replies,
    run,
    tail_registry,
)

DETECTORS = "antler.plugins.safety_finish_reason.detectors"


def filtered(content: Any = "", *calls: str, **metadata: Any) -> AIMessage:
    """A reply the provider's content filter stopped, with tool calls to `calls`."""
    return AIMessage(content, id="filtered",
                     tool_calls=[{"name": n, "args": {"secret": "s3"}, "id": f"c-{n}"}
                                 for n in calls],
                     response_metadata={"finish_reason": "content_filter", **metadata})


# -- detectors -------------------------------------------------------------------------------


class GeminiReason(enum.Enum):
    SAFETY = 3
    MAX_TOKENS = 2


@pytest.mark.parametrize("detector, message, found", [
    (ContentFilterDetector(), AIMessage("", response_metadata={
        "finish_reason": "content_filter", "content_filter_results": {"hate": {"filtered": True}}}),
     ("finish_reason", "content_filter")),
    (ContentFilterDetector(), AIMessage("", additional_kwargs={"finish_reason": "CONTENT_FILTER"}),
     ("finish_reason", "CONTENT_FILTER")),
    (ContentFilterDetector(), AIMessage("", response_metadata={"finish_reason": "blocked"}), None),
    (ContentFilterDetector(["blocked"]), AIMessage("", response_metadata={
        "finish_reason": "blocked"}), ("finish_reason", "blocked")),
    (AnthropicRefusalDetector(), AIMessage("", response_metadata={"stop_reason": "refusal"}),
     ("stop_reason", "refusal")),
    (AnthropicRefusalDetector(), AIMessage("", response_metadata={"stop_reason": "end_turn"}),
     None),
    (GeminiSafetyDetector(), AIMessage("", response_metadata={"finish_reason": "SAFETY"}),
     ("finish_reason", "SAFETY")),
    (GeminiSafetyDetector(), AIMessage("", response_metadata={
        "finish_reason": GeminiReason.SAFETY}), ("finish_reason", "SAFETY")),
    (GeminiSafetyDetector(), AIMessage("", response_metadata={
        "finish_reason": "IMAGE_PROHIBITED_CONTENT"}), ("finish_reason",
                                                        "IMAGE_PROHIBITED_CONTENT")),
    (GeminiSafetyDetector(), AIMessage("", response_metadata={
        "prompt_feedback": {"block_reason": "BLOCKLIST"}}),
     ("prompt_feedback.block_reason", "BLOCKLIST")),
    (GeminiSafetyDetector(), AIMessage("", response_metadata={
        "prompt_feedback": {"block_reason": 0}}), None),
    (RefusalBlockDetector(), AIMessage("", additional_kwargs={"refusal": "I can't help."}),
     ("additional_kwargs.refusal", "I can't help.")),
    (RefusalBlockDetector(), AIMessage([{"type": "refusal", "refusal": "No."}]),
     ("content.refusal", "No.")),
    (RefusalBlockDetector(), AIMessage("Sure, here it is."), None),
    # Text content, but a provider whose translator makes a refusal block of its metadata.
    (RefusalBlockDetector(), AIMessage("I cannot", response_metadata={
        "model_provider": "anthropic", "stop_reason": "refusal"}), ("content.refusal", "refusal")),
])
def test_built_in_detectors(detector, message, found):
    finding = detector.detect(message)
    if found is None:
        assert finding is None
    else:
        assert (finding.field, finding.value) == found
        assert finding.detector == detector.name


@pytest.mark.parametrize("reason_", ["MAX_TOKENS", "MALFORMED_FUNCTION_CALL", "OTHER", "STOP"])
def test_gemini_non_safety_reasons_are_not_safety_stops(reason_):
    message = AIMessage("", response_metadata={"finish_reason": reason_})
    assert GeminiSafetyDetector().detect(message) is None
    assert GeminiSafetyDetector().detect(
        AIMessage("", response_metadata={"finish_reason": GeminiReason.MAX_TOKENS})) is None


def test_azure_filter_results_ride_along_as_extras():
    results = {"violence": {"filtered": True, "severity": "high"}}
    finding = ContentFilterDetector().detect(AIMessage("", response_metadata={
        "finish_reason": "content_filter", "content_filter_results": results}))
    assert finding.extras == {"content_filter_results": results}


# -- config ----------------------------------------------------------------------------------


def test_an_empty_detector_list_is_refused_with_what_to_do():
    with pytest.raises(ValidationError, match="leave `detectors` out"):
        SafetyFinishReasonConfig(detectors=[])
    with pytest.raises(ValidationError, match="not of the form"):
        SafetyFinishReasonConfig(detectors=[{"use": "no_colon_here"}])


def test_the_operator_section_is_safety_finish_reason(tmp_path):
    with pytest.raises(ConfigError, match="safety_finish_reason"):
        make_agent(tmp_path, ["hi"], config="safety_finish_reason: {detectors: []}\n")


@pytest.mark.parametrize("use, message", [
    (f"{__name__}:NotADetector", "is not a safety detector class"),
    (f"{__name__}:no_such_thing", "no_such_thing"),
    ("no_such_module_xyz:Thing", "not installed"),
])
def test_a_bad_detector_class_stops_the_build_naming_the_entry(tmp_path, use, message):
    config = f"safety_finish_reason:\n  detectors:\n    - use: {use}\n"
    with pytest.raises(AntlerError, match=message):
        make_agent(tmp_path, ["hi"], config=config)


class NotADetector:
    """Configured as a detector, but has no detect method."""


class KeywordDetector(SafetyDetector):
    """Flags replies whose finish_reason is `keyword` (a configured custom detector)."""

    name = "keyword"

    def __init__(self, keyword: str) -> None:
        self.keyword = keyword

    def detect(self, message: Any) -> SafetyTermination | None:
        if message.response_metadata.get("finish_reason") == self.keyword:
            return SafetyTermination(self.name, "finish_reason", self.keyword)
        return None


class BrokenDetector(SafetyDetector):
    name = "broken"

    def detect(self, message: Any) -> SafetyTermination | None:
        raise RuntimeError("detector bug")


class InterruptingDetector(SafetyDetector):
    name = "interrupting"

    def detect(self, message: Any) -> SafetyTermination | None:
        raise GraphInterrupt(())


# -- the hook on its own ---------------------------------------------------------------------


def test_calls_are_stripped_raw_copies_too_and_the_finding_recorded():
    message = filtered([{"type": "text", "text": "Let me"},
                        {"type": "tool_use", "id": "c-bash", "name": "bash", "input": {}}],
                       "bash", "lookup")
    message.additional_kwargs["tool_calls"] = [{"id": "c-bash"}, {"id": "c-lookup"}]
    runtime = FakeRuntime()
    update = SafetyFinishReasonMiddleware().inspect({"messages": [message]}, runtime)
    [edited] = update["messages"]
    assert edited.id == "filtered" and edited.tool_calls == []
    assert "tool_calls" not in edited.additional_kwargs
    assert [b["type"] for b in edited.content] == ["text", "text"]
    assert "`bash`, `lookup`" in edited.content[-1]["text"]
    assert edited.response_metadata["finish_reason"] == "content_filter"  # as sent
    assert edited.additional_kwargs[TERMINATION_KEY] == {
        "detector": "openai_content_filter", "field": "finish_reason",
        "value": "content_filter", "count": 2, "names": ["bash", "lookup"], "extras": {}}
    assert update["antler_stop_reason"]["reason"] == "safety_capped"
    assert runtime.events == [{"type": TERMINATION_KEY, "detector": "openai_content_filter",
                               "field": "finish_reason", "value": "content_filter",
                               "names": ["bash", "lookup"]}]
    assert "s3" not in repr(runtime.events)  # tool arguments are never reported


@pytest.mark.parametrize("content", [None, "", "  ", []])
def test_a_blank_reply_is_filled_in(content):
    message = AIMessage(content if content is not None else "",
                        response_metadata={"stop_reason": "refusal"})
    [edited] = SafetyFinishReasonMiddleware().inspect({"messages": [message]},
                                                      FakeRuntime())["messages"]
    text = edited.content if isinstance(edited.content, str) else edited.content[-1]["text"]
    assert text.startswith("[SAFETY STOP]") and "anthropic_refusal" in text


def test_a_reply_with_visible_text_and_no_calls_is_left_as_it_is():
    message = AIMessage("Here is part of it", response_metadata={"finish_reason": "SAFETY"})
    update = SafetyFinishReasonMiddleware().inspect({"messages": [message]}, FakeRuntime())
    assert set(update) == {"antler_stop_reason"}
    assert update["antler_stop_reason"]["detail"] == "gemini_safety: finish_reason=SAFETY"


def test_cleaned_replies_and_unflagged_replies_are_left_alone():
    middleware = SafetyFinishReasonMiddleware()
    [edited] = middleware.inspect({"messages": [filtered("", "bash")]},
                                  FakeRuntime())["messages"]
    assert middleware.inspect({"messages": [edited]}, FakeRuntime()) is None
    assert middleware.inspect({"messages": [AIMessage("fine")]}, FakeRuntime()) is None
    assert middleware.inspect({"messages": [HumanMessage("hi")]}, FakeRuntime()) is None
    assert middleware.inspect({"messages": []}, FakeRuntime()) is None


def test_a_failing_detector_is_skipped_and_an_interrupt_passes_through(caplog):
    middleware = SafetyFinishReasonMiddleware([BrokenDetector(), ContentFilterDetector()])
    with caplog.at_level("WARNING"):
        update = asyncio.run(middleware.aafter_model({"messages": [filtered("", "bash")]},
                                                     FakeRuntime()))
    assert update["antler_stop_reason"]["reason"] == "safety_capped"
    [failure] = [r for r in caplog.records if "broken failed" in r.getMessage()]
    assert "RuntimeError: detector bug" in failure.getMessage() and failure.exc_info is None
    with pytest.raises(GraphInterrupt):
        SafetyFinishReasonMiddleware([InterruptingDetector()]).inspect(
            {"messages": [filtered()]}, FakeRuntime())


def test_no_stream_writer_is_fine():
    class Bare:
        context = RunContext(thread_id="t", run_id="r")

        @staticmethod
        def stream_writer(event: Any) -> None:
            raise RuntimeError("no stream here")

    update = SafetyFinishReasonMiddleware().inspect({"messages": [filtered()]}, Bare())
    assert update["antler_stop_reason"]["reason"] == "safety_capped"


# -- in a real graph -------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_no_tool_runs_on_a_filtered_reply(tmp_path, mode, use_async):
    tools = Tools()
    agent, model = make_agent(tmp_path, [filtered("", "lookup"), "never reached"], tools=tools,
                              **MODES[mode])
    with agent:
        assert "safety_finish_reason" in agent.chain.names
        state = run(agent, "do something bad", use_async=use_async)
    assert tools.ran == []
    assert model.remaining == 1
    final = state["messages"][-1]
    assert final.id == "filtered" and final.tool_calls == []
    assert final.content.startswith("[SAFETY STOP]")
    assert final.additional_kwargs[TERMINATION_KEY]["names"] == ["lookup"]
    assert reason(state) == "safety_capped"


@pytest.mark.parametrize("mode", MODES)
def test_an_empty_safety_stop_after_tool_work_is_not_retried(tmp_path, mode):
    """safety's after_model runs before terminal_response's: the filled-in reply is final."""
    tools = Tools()
    agent, model = make_agent(tmp_path, [call("lookup", query="q"), filtered(), "unused"],
                              tools=tools, **MODES[mode])
    with agent:
        state = run(agent, "go")
    assert model.remaining == 1
    assert not any(named(request, RECOVERY_NAME) for request in model.calls)
    assert state["messages"][-1].content.startswith("[SAFETY STOP]")
    assert len(replies(state)) == 2
    assert reason(state) == "safety_capped"


def test_safety_cleans_the_reply_before_loop_detection_counts_it(tmp_path):
    tools = Tools()
    looping = call("lookup", query="same")
    agent, _ = make_agent(tmp_path, [looping, looping, filtered("", "lookup")], tools=tools,
                          config="loop_detection: {warn_threshold: 2, hard_limit: 3}\n")
    with agent:
        names = agent.chain.names
        state = run(agent, "go")
    assert names.index("loop_detection") < names.index("terminal_response") < \
        names.index("model_length_finish_reason") < names.index("safety_finish_reason")
    # The third identical call would hit the loop limit, but safety removed it first.
    assert reason(state) == "safety_capped"
    assert "[FORCED STOP]" not in str(state["messages"][-1].content)


def test_configured_detectors_replace_the_built_ins(tmp_path):
    config = (f"safety_finish_reason:\n  detectors:\n"
              f"    - use: {__name__}:KeywordDetector\n      config: {{keyword: flagged}}\n")
    tools = Tools()
    agent, _ = make_agent(tmp_path, [AIMessage("", tool_calls=[
        {"name": "lookup", "args": {}, "id": "1"}], response_metadata={
        "finish_reason": "flagged"}), filtered(content="kept as is")], tools=tools,
        config=config)
    with agent:
        first = run(agent, "one", run_id="r1")
        assert first["messages"][-1].additional_kwargs[TERMINATION_KEY]["detector"] == "keyword"
        second = run(agent, "two", run_id="r2")
    assert tools.ran == []
    # content_filter is no longer a detector here: the visible reply counts as a normal end.
    assert reason(second, "r2") is None


def test_the_safety_event_reaches_the_custom_stream(tmp_path):
    agent, _ = make_agent(tmp_path, [filtered("", "lookup")], tools=Tools())
    with agent:
        chunks = list(agent.stream("go", thread_id="t1", stream_mode="custom"))
    events = [c for c in chunks if isinstance(c, dict) and c.get("type") == TERMINATION_KEY]
    assert events and events[0]["names"] == ["lookup"]


def test_it_joins_both_chains_and_can_be_switched_off(tmp_path):
    agent, _ = make_agent(tmp_path, ["hi"], chain="subagent")
    with agent:
        assert "safety_finish_reason" in agent.chain.names
    agent, _ = make_agent(tmp_path, ["hi"], config="safety_finish_reason: {enabled: false}\n")
    with agent:
        assert "safety_finish_reason" not in agent.chain.names
    with pytest.raises(ConfigError, match="detector"):
        parse_config("safety_finish_reason: {detector: []}", tail_registry())
