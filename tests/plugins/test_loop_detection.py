"""loop_detection: repeated tool calls get a hidden hint, then are stripped and stop the run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic import ValidationError

from antler.chain.config import parse_config
from antler.contracts.messages import is_hidden
from antler.errors import ConfigError
from antler.plugins.loop_detection.config import LoopDetectionConfig
from antler.plugins.loop_detection.middleware import (
    STATE_KEY,
    WARNING_NAME,
    LoopDetectionMiddleware,
    call_set_hash,
    call_signature,
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
    tail_registry,
)

SAME = call("lookup", query="the same thing")

# -- config ----------------------------------------------------------------------------------


def test_defaults_follow_the_reference():
    config = LoopDetectionConfig()
    assert (config.warn_threshold, config.hard_limit, config.window_size) == (3, 5, 20)
    assert (config.tool_freq_warn, config.tool_freq_hard_limit) == (30, 50)
    assert config.tool_limits("bash") == (30, 50)
    assert config.tool_window == 50


@pytest.mark.parametrize("bad, message", [
    ({"warn_threshold": 4, "hard_limit": 3}, "hard_limit (3) must be at least warn_threshold"),
    ({"tool_freq_warn": 9, "tool_freq_hard_limit": 8}, "tool_freq_hard_limit (8) must be"),
    ({"window_size": 4}, "window_size (4) must be at least hard_limit (5)"),
    ({"tool_freq_overrides": {"bash": {"warn": 5, "hard_limit": 2}}}, "hard_limit (2) must"),
    ({"hard_limit": 0}, "greater than or equal to 1"),
    ({"warn_threshold": "3"}, "valid integer"),
])
def test_inconsistent_thresholds_are_refused_with_the_reason(bad, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LoopDetectionConfig(**bad)


def test_overrides_replace_the_per_tool_limits_and_widen_the_window():
    config = LoopDetectionConfig(tool_freq_overrides={"bash": {"warn": 60, "hard_limit": 100}})
    assert config.tool_limits("bash") == (60, 100)
    assert config.tool_limits("ls") == (30, 50)
    assert config.tool_window == 100


def test_the_operator_section_is_loop_detection():
    registry = tail_registry()
    config = parse_config("loop_detection: {warn_threshold: 2, hard_limit: 4}", registry)
    assert config.section("loop_detection").hard_limit == 4
    with pytest.raises(ConfigError, match="max_tracked_threads"):
        parse_config("loop_detection: {max_tracked_threads: 100}", registry)
    with pytest.raises(ConfigError, match="must be at least warn_threshold"):
        parse_config("loop_detection: {warn_threshold: 5, hard_limit: 4}", registry)


# -- what counts as the same calls ---------------------------------------------------------


def tc(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": None}


def test_the_set_hash_ignores_order_and_ids_but_not_multiplicity():
    a, b = tc("ls", path="/a"), tc("bash", command="make")
    assert call_set_hash([a, b]) == call_set_hash([{**b, "id": "x"}, {**a, "id": "y"}])
    assert call_set_hash([a, a]) != call_set_hash([a])
    # Windows in saved checkpoints hold these hashes.
    assert call_set_hash([{"name": "bash", "args": {"command": "wc -l \u00e9"}, "id": "1"},
                          {"name": "read_file", "args": {"path": "/a", "start_line": 3},
                           "id": "2"}]) == "714dd4d72b7cc849"
    assert call_set_hash([a]) != call_set_hash([tc("ls", path="/b")])


def test_only_the_identifying_arguments_count():
    assert call_signature(tc("web_search", query="q", max_results=3)) == \
        call_signature(tc("web_search", query="q", max_results=9))
    assert call_signature(tc("bash", command="ls", timeout=1)) == \
        call_signature(tc("bash", command="ls", timeout=5))
    # A call with none of them is identified by all its arguments.
    assert call_signature(tc("task", description="a")) != call_signature(tc("task",
                                                                              description="b"))


def test_reads_hash_by_200_line_buckets_in_either_direction():
    first = call_signature(tc("read_file", path="/f", start_line=1, end_line=150))
    assert first == call_signature(tc("read_file", path="/f", start_line=20, end_line=200))
    assert first != call_signature(tc("read_file", path="/f", start_line=1, end_line=201))
    assert call_signature(tc("read_file", path="/f", start_line=400, end_line=10)) == \
        call_signature(tc("read_file", path="/f", start_line=10, end_line=400))
    assert call_signature(tc("read_file", path="/f")) != first


def test_writes_hash_by_every_argument():
    assert call_signature(tc("write_file", path="/f", content="a")) != \
        call_signature(tc("write_file", path="/f", content="b"))
    assert call_signature(tc("str_replace", path="/f", old="x", new="y")) != \
        call_signature(tc("str_replace", path="/f", old="x", new="z"))


def test_json_string_and_odd_arguments_do_not_crash():
    parsed = call_signature({"name": "bash", "args": '{"command": "ls", "timeout": 3}'})
    assert parsed == call_signature(tc("bash", command="ls"))
    for odd in ("not json", None, 42, ["a", 1], {"path": object()}):
        assert call_signature({"name": "x", "args": odd}).startswith("x:")
    assert call_signature({"args": {}}) == ":{}"


# -- the hook on its own ---------------------------------------------------------------------


def reply(n: int, *calls: dict[str, Any]) -> AIMessage:
    return AIMessage("", id=f"ai-{n}", tool_calls=[
        {**c, "id": f"c{n}-{i}", "type": "tool_call"} for i, c in enumerate(calls)])


def feed(middleware: LoopDetectionMiddleware, replies_: list[AIMessage],
         window: Any = None) -> tuple[dict[str, Any] | None, Any]:
    update = None
    for message in replies_:
        update = middleware.inspect({"messages": [HumanMessage("go"), message],
                                     STATE_KEY: window}, FakeRuntime())
        if update is not None:
            window = update.get(STATE_KEY, window)
    return update, window


def test_one_warning_per_set_until_it_leaves_the_window():
    middleware = LoopDetectionMiddleware(LoopDetectionConfig(
        warn_threshold=2, hard_limit=4, window_size=4))
    key = ("t", "r")
    a = tc("ls", path="/a")
    _, window = feed(middleware, [reply(1, a), reply(2, a)])
    assert len(middleware.pending.peek(key)) == 1
    middleware.pending.clear(key)
    _, window = feed(middleware, [reply(3, a)], window)
    assert middleware.pending.peek(key) == ()  # warned once already
    others = [reply(4 + i, tc("read_file", path=f"/{i}")) for i in range(4)]
    _, window = feed(middleware, others, window)  # a leaves the window
    assert middleware.pending.peek(key) == ()
    _, window = feed(middleware, [reply(9, a), reply(10, a)], window)
    assert len(middleware.pending.peek(key)) == 1


def test_counting_the_same_reply_again_changes_nothing():
    middleware = LoopDetectionMiddleware()
    message = reply(1, tc("ls", path="/a"))
    first = middleware.inspect({"messages": [message]}, FakeRuntime())
    again = middleware.inspect({"messages": [message], STATE_KEY: first[STATE_KEY]},
                               FakeRuntime())
    assert first[STATE_KEY]["sets"] == [call_set_hash(message.tool_calls)]
    assert again is None
    assert asyncio.run(middleware.aafter_model(
        {"messages": [message], STATE_KEY: first[STATE_KEY]}, FakeRuntime())) is None


def test_replies_without_calls_and_other_messages_are_not_counted():
    middleware = LoopDetectionMiddleware()
    for messages in ([], [HumanMessage("hi")], [AIMessage("answer", id="a")],
                     [ToolMessage("r", tool_call_id="c")]):
        assert middleware.inspect({"messages": messages}, FakeRuntime()) is None


def test_a_malformed_window_starts_afresh():
    middleware = LoopDetectionMiddleware()
    update = middleware.inspect({"messages": [reply(1, tc("ls"))],
                                 STATE_KEY: {"sets": "oops", "tools": [1, 2], "counted": 7}},
                                FakeRuntime())
    assert update[STATE_KEY]["sets"] == [call_set_hash([tc("ls")])]
    assert update[STATE_KEY]["tools"] == ["1", "2", "ls"]


def test_the_hash_layer_explains_a_stop_both_layers_reach():
    middleware = LoopDetectionMiddleware(LoopDetectionConfig(
        warn_threshold=1, hard_limit=2, window_size=5, tool_freq_warn=1,
        tool_freq_hard_limit=2))
    update, _ = feed(middleware, [reply(1, tc("ls", path="/a")), reply(2, tc("ls", path="/a"))])
    assert update["antler_stop_reason"]["detail"] == "`ls` repeated 2 times"
    update, _ = feed(LoopDetectionMiddleware(LoopDetectionConfig(
        warn_threshold=2, hard_limit=3, tool_freq_warn=1, tool_freq_hard_limit=2)),
        [reply(1, tc("ls", path="/a")), reply(2, tc("ls", path="/b"))])
    assert update["antler_stop_reason"]["detail"] == "`ls` called 2 times"


def test_pending_hints_are_capped_per_run():
    middleware = LoopDetectionMiddleware(LoopDetectionConfig(
        warn_threshold=1, hard_limit=50, window_size=50, tool_freq_warn=1,
        tool_freq_hard_limit=50))
    feed(middleware, [reply(i, tc(f"tool{i}")) for i in range(6)])
    assert len(middleware.pending.peek(("t", "r"))) == 4


# -- in a real graph -------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_a_loop_is_warned_then_stopped(tmp_path, mode, use_async):
    tools = Tools()
    agent, model = make_agent(tmp_path, [SAME] * 5 + ["never reached"], tools=tools,
                              **MODES[mode])
    with agent:
        assert "loop_detection" in agent.chain.names
        state = run(agent, "find it", use_async=use_async)

    assert tools.count("lookup") == 4  # the fifth identical call never ran
    assert model.remaining == 1
    # The hint rides exactly the request after the third identical reply, hidden.
    warned = [i for i, request in enumerate(model.calls) if named(request, WARNING_NAME)]
    assert warned == [3]
    [hint] = named(model.calls[3], WARNING_NAME)
    assert isinstance(hint, HumanMessage) and is_hidden(hint)
    assert model.calls[3][-1] == hint and isinstance(model.calls[3][-2], ToolMessage)
    assert "[LOOP DETECTED]" in hint.content and "3 times" in hint.content
    # Nothing of it is saved.
    assert not named(state["messages"], WARNING_NAME)
    final = state["messages"][-1]
    assert isinstance(final, AIMessage) and final.tool_calls == []
    assert final.content.startswith("[FORCED STOP] `lookup` repeated 5 times")
    assert final.response_metadata["finish_reason"] == "stop"
    assert len(replies(state)) == 5  # replaced in place, not appended
    assert reason(state) == "loop_capped"


def test_the_stopped_reply_keeps_its_id_and_loses_raw_calls(tmp_path):
    raw = AIMessage(content=[{"type": "text", "text": "again"},
                             {"type": "tool_use", "id": "u1", "name": "lookup", "input": {}}],
                    tool_calls=[{"name": "lookup", "args": {"query": "q"}, "id": "u1"}],
                    additional_kwargs={"tool_calls": [{"id": "u1", "type": "function"}]},
                    id="looping")
    tools = Tools()
    agent, _ = make_agent(tmp_path, [call("lookup", query="q")] * 4 + [raw], tools=tools)
    with agent:
        state = run(agent, "go")
    final = state["messages"][-1]
    assert final.id == "looping"
    assert "tool_calls" not in final.additional_kwargs
    assert [b["type"] for b in final.content] == ["text", "text"]
    assert final.content[-1]["text"].startswith("[FORCED STOP]")
    assert tools.count("lookup") == 4


@pytest.mark.parametrize("mode", ["unfused", "model_node"])
def test_the_hint_survives_a_retried_model_call(tmp_path, mode):
    tools = Tools()
    agent, model = make_agent(tmp_path, [SAME] * 3 + [failing_turn, "I will stop here."],
                              tools=tools, **MODES[mode])
    with agent:
        state = run(agent, "find it")
    # The failed request and its retry both carried the hint.
    assert [bool(named(request, WARNING_NAME)) for request in model.calls] == \
        [False, False, False, True, True]
    assert state["messages"][-1].content == "I will stop here."
    assert reason(state) is None


def test_the_per_tool_count_stops_calls_with_varying_arguments(tmp_path):
    tools = Tools()
    script = [call("lookup", query=f"q{i}") for i in range(4)] + ["never reached"]
    agent, model = make_agent(tmp_path, script, tools=tools,
                              config="loop_detection: {tool_freq_warn: 2, "
                                     "tool_freq_hard_limit: 3}\n")
    with agent:
        state = run(agent, "search widely")
    assert tools.count("lookup") == 2
    assert [bool(named(r, WARNING_NAME)) for r in model.calls] == [False, False, True]
    assert "`lookup` 2 times" in named(model.calls[2], WARNING_NAME)[0].content
    assert state["messages"][-1].content.startswith("[FORCED STOP] `lookup` called 3 times")
    assert reason(state) == "loop_capped"


def test_history_carries_over_to_the_next_run_of_the_thread_only(tmp_path):
    tools = Tools()
    agent, model = make_agent(tmp_path, [SAME, SAME, "ok", SAME, "done", SAME, "fine"],
                              tools=tools)
    with agent:
        run(agent, "first", run_id="r1")
        state = run(agent, "second", run_id="r2")
        assert [bool(named(r, WARNING_NAME)) for r in model.calls] == \
            [False, False, False, False, True]
        assert state["messages"][-1].content == "done"
        run(agent, "elsewhere", thread_id="t2", run_id="r3")
    assert not any(named(r, WARNING_NAME) for r in model.calls[5:])


def test_switched_off_it_leaves_the_chain(tmp_path):
    agent, _ = make_agent(tmp_path, ["hi"], config="loop_detection: {enabled: false}\n")
    with agent:
        assert "loop_detection" not in agent.chain.names


def test_it_joins_the_subagent_chain_among_the_guards(tmp_path):
    agent, _ = make_agent(tmp_path, ["hi"], chain="subagent")
    with agent:
        names = agent.chain.names
    assert names.index("read_before_write") < names.index("loop_detection") < \
        names.index("safety_finish_reason")
