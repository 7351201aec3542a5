"""token_budget: a per-run token cap that counts only new usage, warns once and stops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import ValidationError

from antler.chain.config import parse_config
from antler.contracts.fallback import error_fallback_message
from antler.contracts.messages import is_hidden
from antler.contracts.runcontext import RunContext
from antler.contracts.stop_reason import stop_reason_of
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.plugins.token_budget.config import TokenBudgetConfig
from antler.plugins.token_budget.middleware import (
    BUDGET_KEY,
    WARNING_NAME,
    TokenBudgetMiddleware,
)
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

from .model_guard_support import MODE_IDS, MODES, QUIET, guarded_agent, run


class FakeRuntime:
    def __init__(self, run_id: str = "run-1") -> None:
        self.context = RunContext(thread_id="t", run_id=run_id)


def usage(i: int, o: int) -> dict[str, int]:
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}


def calling(message_id: str, tokens: tuple[int, int], content: Any = "",
            **kwargs: Any) -> AIMessage:
    return AIMessage(content, id=message_id, usage_metadata=usage(*tokens),
                     tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": f"c-{message_id}",
                                  "type": "tool_call"}], **kwargs)


# -- config --------------------------------------------------------------------------------


def test_config_defaults_bounds_and_the_subagent_defaults():
    config = TokenBudgetConfig()
    assert (config.enabled, config.max_tokens, config.warn_threshold,
            config.hard_stop_threshold) == (None, 200_000, 0.8, 1.0)
    with pytest.raises(ValidationError, match="below warn_threshold"):
        TokenBudgetConfig(warn_threshold=0.9, hard_stop_threshold=0.5)
    with pytest.raises(ValidationError):
        TokenBudgetConfig(max_tokens=999)
    assert TokenBudgetConfig.for_subagent(summarization=True).max_tokens == 1_000_000
    sub = TokenBudgetConfig.for_subagent(summarization=False)
    assert (sub.enabled, sub.max_tokens) == (True, 2_000_000)
    assert TokenBudgetConfig.for_subagent(summarization=False, max_tokens=5000).max_tokens == 5000


def test_off_on_the_lead_by_default_and_validated_when_set(registry, tmp_path):
    assert "token_budget" not in create_agent(
        parse_config(QUIET, registry), model=ScriptedChatModel([]), checkpointer=None,
        registry=registry, base_dir=tmp_path).chain.names
    with pytest.raises(Exception, match="max_token"):
        parse_config("token_budget: {enabled: true, max_token: 5}", registry)


# -- the hooks on their own ----------------------------------------------------------------


def test_history_does_not_count_and_only_increases_do():
    middleware = TokenBudgetMiddleware(max_tokens=1000, warn_threshold=0.5)
    history = [HumanMessage("old"), AIMessage("old answer", id="old", usage_metadata=usage(
        5000, 5000))]
    state: dict[str, Any] = {"messages": list(history)}
    state.update(middleware.before_agent(state, FakeRuntime()))
    assert state[BUDGET_KEY]["seen"] == {"old": usage(5000, 5000)}
    state["messages"] += [HumanMessage("new"), AIMessage("short", id="a1",
                                                         usage_metadata=usage(100, 10))]
    update = middleware.after_model(state, FakeRuntime())
    assert update[BUDGET_KEY]["used"] == usage(100, 10)
    state.update(update)
    # token_usage merged a subagent's usage into a1: only the increase counts.
    state["messages"][-1] = AIMessage("short", id="a1", usage_metadata=usage(400, 50))
    state["messages"].append(AIMessage("next", id="a2", usage_metadata=usage(10, 0)))
    update = middleware.after_model(state, FakeRuntime())
    assert update[BUDGET_KEY]["used"] == usage(410, 50)
    assert update[BUDGET_KEY]["warning_pending"] is False  # 460 < 500


def test_the_warning_is_queued_once_and_cleared_after_a_successful_call():
    middleware = TokenBudgetMiddleware(max_tokens=1000, warn_threshold=0.5)
    state: dict[str, Any] = {"messages": [HumanMessage("q")]}
    state.update(middleware.before_agent(state, FakeRuntime()))
    state["messages"].append(calling("a1", (500, 100)))
    update = middleware.after_model(state, FakeRuntime())
    assert update[BUDGET_KEY]["warning_pending"] and update[BUDGET_KEY]["warned"]
    assert "messages" not in update
    state.update(update)
    state["messages"].append(calling("a2", (50, 10)))
    update = middleware.after_model(state, FakeRuntime())
    assert not update[BUDGET_KEY]["warning_pending"] and update[BUDGET_KEY]["warned"]


def test_at_the_cap_tool_calls_are_stripped_and_the_stop_is_recorded():
    middleware = TokenBudgetMiddleware(max_tokens=1000)
    state: dict[str, Any] = {"messages": [HumanMessage("q")]}
    state.update(middleware.before_agent(state, FakeRuntime()))
    reply = calling("a1", (900, 200), content=[
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "c-a1", "name": "lookup", "input": {}}],
        additional_kwargs={"tool_calls": [{"id": "c-a1", "type": "function"}]},
        response_metadata={"finish_reason": "tool_calls"})
    state["messages"].append(reply)
    update = asyncio.run(middleware.aafter_model(state, FakeRuntime()))
    [stopped] = update["messages"]
    assert stopped.id == "a1" and stopped.tool_calls == []
    assert "tool_calls" not in stopped.additional_kwargs
    assert [b["type"] for b in stopped.content] == ["text", "text"]
    assert stopped.content[-1]["text"].startswith("[TOKEN BUDGET EXCEEDED]")
    assert "1100 of 1000 total tokens" in stopped.content[-1]["text"]
    assert stopped.response_metadata["finish_reason"] == "stop"
    assert update["antler_stop_reason"]["reason"] == "token_capped"


def test_a_final_answer_over_the_cap_gets_the_notice_and_the_stop_reason():
    middleware = TokenBudgetMiddleware(max_tokens=1000)
    state = {"messages": [HumanMessage("q"), AIMessage(
        "answer", id="a1", usage_metadata=usage(2000, 10),
        response_metadata={"finish_reason": "length"})]}
    update = middleware.after_model(state, FakeRuntime())
    [capped] = update["messages"]
    assert capped.id == "a1" and capped.content.startswith("answer\n\n[TOKEN BUDGET EXCEEDED]")
    assert "2010 of 1000 total tokens" in capped.content
    assert capped.response_metadata["finish_reason"] == "length"  # the provider's word kept
    assert update["antler_stop_reason"]["reason"] == "token_capped"


def test_an_error_reply_over_the_cap_is_left_alone():
    middleware = TokenBudgetMiddleware(max_tokens=1000)
    reply = error_fallback_message("The provider failed.", error_type="transient",
                                   reason="failed")
    state = {"messages": [HumanMessage("q"), reply.model_copy(
        update={"usage_metadata": usage(2000, 10)})]}
    update = middleware.after_model(state, FakeRuntime()) or {}
    assert "messages" not in update and "antler_stop_reason" not in update


@pytest.mark.parametrize("fuse, use_async", MODES, ids=MODE_IDS)
def test_a_final_answer_that_crosses_the_cap_records_token_capped(tmp_path, registry, ran,
                                                                  lookup, fuse, use_async):
    agent, _ = guarded_agent(tmp_path, registry, [
        lookup_turn("one", 300, 100),
        {"content": "The report.", "usage": {"input_tokens": 500, "output_tokens": 200}},
    ], config="token_budget: {enabled: true, max_tokens: 1000}\n", fuse=fuse, tools=[lookup])
    with agent:
        state = run(agent, "research", use_async=use_async)
    final = state["messages"][-1]
    assert final.content.startswith("The report.\n\n[TOKEN BUDGET EXCEEDED] This run used "
                                    "1100 of 1000 total tokens")
    assert stop_reason_of(state)["reason"] == "token_capped"
    assert ran == ["one"]


@pytest.mark.parametrize("limits, tokens, capped", [
    ({"max_input_tokens": 500}, (600, 1), True),
    ({"max_input_tokens": 500}, (100, 900), False),
    ({"max_output_tokens": 100}, (10, 150), True),
    ({"max_output_tokens": 100}, (900, 10), False),
])
def test_input_and_output_caps_trigger_independently(limits, tokens, capped):
    middleware = TokenBudgetMiddleware(max_tokens=100_000, **limits)
    state = {"messages": [HumanMessage("q"), calling("a1", tokens)]}
    update = middleware.after_model(state, FakeRuntime()) or {}
    assert ("antler_stop_reason" in update) is capped


def test_replies_without_usage_count_nothing():
    middleware = TokenBudgetMiddleware(max_tokens=1000)
    state = {"messages": [HumanMessage("q"), AIMessage("", id="a1", tool_calls=[
        {"name": "lookup", "args": {}, "id": "c", "type": "tool_call"}])]}
    assert middleware.after_model(state, FakeRuntime()) is None  # nothing counted, nothing done


class FullScan:
    """Stands in for the middleware's record of what it counted: every call counts all."""

    def since(self, *_: Any) -> int:
        return 0

    def keep(self, *_: Any) -> None:
        return None


STEPS = st.lists(st.tuples(st.sampled_from(["reply", "call", "grow", "human", "drop"]),
                           st.integers(0, 400), st.integers(0, 400), st.integers(0, 50)),
                 min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(history=st.lists(st.tuples(st.booleans(), st.integers(0, 400)), max_size=6),
       steps=STEPS)
def test_counting_only_what_changed_gives_what_counting_everything_gives(history, steps):
    # Each call looks only at the messages after those the run's last call counted; the
    # reference looks at every message on every call. Same updates, call after call, as
    # replies arrive, earlier replies grow (token_usage's merge: a new object under the
    # same id), messages are dropped (summarization) or the cap strips a reply, and when a
    # step's writes are lost (a failed step: the next call finds the older ledger).
    fast, full = (TokenBudgetMiddleware(max_tokens=1000, warn_threshold=0.5)
                  for _ in range(2))
    fast._counted.FROM = 0  # keeps track from the first message (a long thread's way)
    full._counted = FullScan()
    messages: list[Any] = [AIMessage("old", id=f"h{i}", usage_metadata=usage(n, n))
                           if is_reply else HumanMessage("old", id=f"h{i}")
                           for i, (is_reply, n) in enumerate(history)]
    ledgers = [middleware.before_agent({"messages": messages}, FakeRuntime())[BUDGET_KEY]
               for middleware in (fast, full)]
    for index, (kind, i, o, pick) in enumerate(steps):
        replies = [k for k, m in enumerate(messages) if isinstance(m, AIMessage)]
        if kind == "grow" and replies:
            k = replies[pick % len(replies)]
            before = messages[k].usage_metadata or usage(0, 0)
            grown = usage(before["input_tokens"] + i, before["output_tokens"] + o)
            messages = [*messages[:k], messages[k].model_copy(update={"usage_metadata": grown}),
                        *messages[k + 1:]]
        elif kind == "drop" and messages:
            k = pick % len(messages)
            messages = [*messages[:k], *messages[k + 1:]]
        elif kind == "human":
            messages = [*messages, HumanMessage("more", id=f"u{index}")]
        else:
            messages = [*messages, calling(f"r{index}", (i, o)) if kind == "call" else
                        AIMessage("answer", id=f"r{index}", usage_metadata=usage(i, o))]
        updates = [middleware.after_model({"messages": messages, BUDGET_KEY: ledger},
                                          FakeRuntime())
                   for middleware, ledger in zip((fast, full), ledgers, strict=True)]
        assert updates[0] == updates[1]
        if pick % 7 == 0:
            continue  # the step failed: its writes never reached the state
        ledgers = [(update or {}).get(BUDGET_KEY, ledger)
                   for update, ledger in zip(updates, ledgers, strict=True)]
        stripped = {m.id: m for m in (updates[0] or {}).get("messages", [])}
        messages = [stripped.get(m.id, m) for m in messages]


def test_what_it_keeps_is_one_run_per_thread_bounded_in_threads_and_messages():
    middleware = TokenBudgetMiddleware(max_tokens=1000)
    kept = middleware._counted._threads

    def start(thread: str, messages: list[Any]) -> None:
        runtime = FakeRuntime()
        runtime.context = RunContext(thread_id=thread, run_id=f"run-{len(kept)}-{thread}")
        middleware.before_agent({"messages": messages}, runtime)

    short = [HumanMessage("q", id="q")]
    start("short", short)
    assert kept == {}  # a short thread is counted whole: nothing kept
    middleware._counted.FROM = 1
    for index in range(40):
        start(f"t{index}", short)
        start(f"t{index}", short)  # the thread's next run replaces what its last one left
    assert list(kept) == [f"t{index}" for index in range(24, 40)]
    long = [HumanMessage("q", id=f"q{i}") for i in range(20_000)]
    for index in range(3):
        start(f"long-{index}", long)
    assert list(kept) == ["long-1", "long-2"]  # 40k of the 50k messages it may hold


# -- in a real graph -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry():
    return discover()


@pytest.fixture
def ran() -> list[str]:
    return []


@pytest.fixture
def lookup(ran):
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        ran.append(q)
        return f"found {q}"

    return lookup


def lookup_turn(q: str, i: int, o: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "lookup", "args": {"q": q}}],
            "usage": {"input_tokens": i, "output_tokens": o}}


BUDGET = "token_budget: {enabled: true, max_tokens: 1000, warn_threshold: 0.5}\n"


def warnings_in(messages: list[Any]) -> list[Any]:
    return [m for m in messages if getattr(m, "name", None) == WARNING_NAME]


@pytest.mark.parametrize("fuse, use_async", MODES, ids=MODE_IDS)
def test_warned_once_then_stopped_at_the_cap(tmp_path, registry, ran, lookup, fuse,
                                             use_async):
    agent, model = guarded_agent(tmp_path, registry, [
        lookup_turn("one", 500, 100),   # 600 of 1000: warn
        lookup_turn("two", 100, 50),    # 750: already warned
        lookup_turn("three", 200, 100),  # 1050: stopped, "three" never runs
        "unused",
    ], config=BUDGET, fuse=fuse, tools=[lookup])
    with agent:
        state = run(agent, "research", use_async=use_async)
    assert ran == ["one", "two"]
    first, second, third = model.calls
    assert warnings_in(first) == [] and warnings_in(third) == []
    [warning] = warnings_in(second)
    assert second[-1].name == WARNING_NAME  # appended last
    assert is_hidden(warning) and "600 of 1000 total tokens" in warning.content
    assert not warnings_in(state["messages"])  # never persisted
    final = state["messages"][-1]
    assert isinstance(final, AIMessage) and final.tool_calls == []
    assert final.content.startswith("[TOKEN BUDGET EXCEEDED]")
    assert stop_reason_of(state)["reason"] == "token_capped"
    assert model.remaining == 1


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_retried_model_call_still_carries_the_warning(tmp_path, registry, ran, lookup,
                                                        fuse):
    sleeps: list[float] = []
    agent, model = guarded_agent(tmp_path, registry, [
        lookup_turn("one", 500, 100),
        {"error": {"kind": "server", "retry_after": 0}},  # transient error: retried
        lookup_turn("two", 10, 10),
        "Done.",
    ], config=BUDGET, fuse=fuse, tools=[lookup], sleeps=sleeps)
    with agent:
        state = agent.invoke("research", thread_id="t1")
    assert sleeps == [0]
    failed, retried, after = model.calls[1:]
    assert len(warnings_in(failed)) == 1 and len(warnings_in(retried)) == 1
    assert warnings_in(after) == []  # delivered once the call succeeded
    assert state["messages"][-1].content == "Done." and ran == ["one", "two"]


def test_each_run_has_its_own_budget(tmp_path, registry, ran, lookup):
    agent, model = guarded_agent(tmp_path, registry, [
        {"content": "big answer", "usage": {"input_tokens": 900, "output_tokens": 90}},
        lookup_turn("x", 300, 10),
        "ok",
    ], config=BUDGET, tools=[lookup])
    with agent:
        agent.invoke("first", thread_id="t1")
        state = agent.invoke("second", thread_id="t1")
    assert ran == ["x"] and warnings_in(model.calls[2]) == []
    assert state["messages"][-1].content == "ok" and stop_reason_of(state) is None


def test_a_subagent_chain_budget_stop_reaches_the_task_result(tmp_path, registry, lookup):
    """The subagent chain's own budget: on by default, set in `subagent_token_budget:`."""
    config = parse_config(QUIET + "subagent_token_budget: {max_tokens: 1000}\n", registry)
    lead = ScriptedChatModel([
        {"tool_calls": [{"name": "task", "args": {"description": "dig", "prompt": "dig"}}]},
        "Summarized.",
    ])
    sub = ScriptedChatModel([lookup_turn("deep", 900, 200), "never"])
    with create_agent(config, model=lead, subagent_model=sub, tools=[lookup],
                      checkpointer="memory", base_dir=tmp_path, registry=registry,
                      runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        state = agent.invoke("delegate", thread_id="t1")
    result = next(m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == "task")
    assert result.additional_kwargs["subagent_status"] == "completed"
    assert result.additional_kwargs["subagent_stop_reason"] == "token_capped"
    assert result.content.startswith("[TOKEN BUDGET EXCEEDED]")
    assert sub.remaining == 1


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_reply_grown_by_its_subagents_usage_counts_at_the_next_call(tmp_path, registry, ran,
                                                                      lookup, fuse):
    # token_usage merges the subagent's 700 tokens into the reply that dispatched it (a new
    # message under the same id, after this hook judged the second reply): the third call
    # counts them, and the run is over its cap only with them.
    lead = ScriptedChatModel([
        {"tool_calls": [{"name": "task", "args": {"description": "dig", "prompt": "dig"}}],
         "usage": {"input_tokens": 100, "output_tokens": 10}},
        lookup_turn("one", 10, 1),      # 121 of 1000
        lookup_turn("two", 100, 100),   # 121 + 700 + 200 = 1021: stopped, "two" never runs
        "unused",
    ])
    sub = ScriptedChatModel([{"content": "dug", "usage": {"input_tokens": 600,
                                                          "output_tokens": 100}}])
    with create_agent(parse_config(QUIET + BUDGET, registry), model=lead, subagent_model=sub,
                      tools=[lookup], checkpointer="memory", base_dir=tmp_path,
                      registry=registry, fuse=fuse,
                      runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        [budget] = [m for m in agent.chain.middlewares if isinstance(m, TokenBudgetMiddleware)]
        budget._counted.FROM = 0  # keep track as on a long thread
        state = agent.invoke("delegate", thread_id="t1")
    assert ran == ["one"] and lead.remaining == 1
    assert stop_reason_of(state)["reason"] == "token_capped"
    assert "1021 of 1000 total tokens" in state["messages"][-1].content


# -- the subagent chain's own budget (a per-chain override in the manifest) -----------------


def _budget(tmp_path: Any, registry: Any, config_text: str, chain: str = "subagent") -> Any:
    from antler.chain import build_chain
    from antler.plugin_api.context import MODEL, PATHS
    from antler.plugin_api.paths import PathLayout

    built = build_chain(parse_config(QUIET + config_text, registry), chain, registry=registry,
                        services={PATHS: PathLayout(tmp_path), MODEL: ScriptedChatModel(["x"])})
    return next((e.middleware for e in built.entries if e.name == "token_budget"), None)


def test_subagents_get_their_own_budget_on_by_default(tmp_path, registry):
    assert _budget(tmp_path, registry, "", chain="lead") is None  # off on the lead agent
    middleware = _budget(tmp_path, registry, "")
    assert middleware is not None and middleware.config.max_tokens == 2_000_000
    summarizing = _budget(tmp_path, registry, "summarization: {enabled: true}\n")
    assert summarizing.config.max_tokens == 1_000_000


def test_the_subagent_section_sets_or_switches_off_the_subagent_budget(tmp_path, registry):
    assert _budget(tmp_path, registry, "subagent_token_budget: {max_tokens: 5000}\n"
                   ).config.max_tokens == 5000
    assert _budget(tmp_path, registry, "subagent_token_budget: {enabled: false}\n") is None
    # the lead's section does not touch the subagents' budget
    assert _budget(tmp_path, registry, "token_budget: {enabled: true, max_tokens: 3000}\n"
                   ).config.max_tokens == 2_000_000
