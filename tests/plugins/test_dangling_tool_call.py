"""dangling_tool_call: placeholders for unanswered tool calls, in the model request only."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from langchain.agents.middleware.types import ModelRequest
from langchain.tools import tool
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from antler.plugins.dangling_tool_call.middleware import (
    INTERRUPTED_PLACEHOLDER,
    MALFORMED_PLACEHOLDER,
    DanglingToolCallMiddleware,
    repair_messages,
    sanitize_tool_name,
)
from tests.depth import scaled
from tests.plugins.support import make_agent, visible


def ai_calls(*calls: tuple[str, str], content: str = "", msg_id: str | None = None) -> AIMessage:
    return AIMessage(content=content, id=msg_id, tool_calls=[
        {"name": name, "args": {}, "id": call_id, "type": "tool_call"} for name, call_id in calls])


def result(call_id: str, name: str = "bash", text: str = "ok") -> ToolMessage:
    return ToolMessage(text, tool_call_id=call_id, name=name)


def shape(messages: list[BaseMessage]) -> list[str]:
    """A compact picture of a history: h, s, ai(ids), tool(id[!])."""
    out = []
    for m in messages:
        if isinstance(m, ToolMessage):
            out.append(f"tool({m.tool_call_id}{'!' if m.status == 'error' else ''})")
        elif isinstance(m, AIMessage):
            out.append(f"ai({','.join(c['id'] for c in m.tool_calls)})")
        else:
            out.append({"human": "h", "system": "s"}[m.type])
    return out


# -- in a real graph --------------------------------------------------------------------------


def test_a_seeded_dangling_call_is_answered_in_the_request_but_not_in_state(tmp_path):
    agent, model = make_agent(tmp_path / "home", ["Carrying on."])
    with agent:
        config = agent.run_config("t1")
        agent.graph.update_state(config, {"messages": [
            HumanMessage("list files", id="h1"),
            ai_calls(("ls", "c1"), ("bash", "c2"), content="Looking.", msg_id="a1"),
            result("c2", text="answered"),
            HumanMessage("are you there?", id="h2"),
        ]})
        state = agent.invoke("continue", thread_id="t1")
    sent = model.calls[0]
    assert shape(sent) == ["s", "h", "ai(c1,c2)", "tool(c2)", "tool(c1!)", "h", "h"]
    placeholder = sent[4]
    assert placeholder.content == INTERRUPTED_PLACEHOLDER
    assert (placeholder.name, placeholder.status) == ("ls", "error")
    assert shape(visible(state["messages"])) == ["h", "ai(c1,c2)", "tool(c2)", "h", "h", "ai()"]
    assert not any(m.content == INTERRUPTED_PLACEHOLDER for m in state["messages"])


@pytest.mark.parametrize("fuse", [True, False])
def test_a_result_that_arrived_after_the_next_user_message_is_moved_to_its_call(tmp_path,
                                                                                 fuse):
    agent, model = make_agent(tmp_path / "home", ["Carrying on."], fuse=fuse)
    with agent:
        agent.graph.update_state(agent.run_config("t1"), {"messages": [
            HumanMessage("list files", id="h1"),
            ai_calls(("ls", "c1"), msg_id="a1"),
            HumanMessage("are you there?", id="h2"),
            result("c1", name="ls", text="late answer"),
        ]})
        state = agent.invoke("continue", thread_id="t1")
    sent = model.calls[0]
    assert shape(sent) == ["s", "h", "ai(c1)", "tool(c1)", "h", "h"]
    assert sent[3].content == "late answer"  # the real result, not a placeholder
    # The state is as it was.
    assert shape(visible(state["messages"]))[:4] == ["h", "ai(c1)", "h", "tool(c1)"]


class WorkerLost(BaseException):
    """The process running a tool died: not an error the tool reports (tool_error_handling
    answers those), so the run stops with the call unanswered."""


@tool
def flaky(question: str) -> str:
    """A tool whose process dies mid-call."""
    raise WorkerLost("worker lost")


def test_an_interrupted_run_resumes_with_the_call_answered_and_nothing_lost(tmp_path):
    script = [{"content": "Let me check.", "tool_calls": [{"name": "flaky", "args": {
        "question": "q"}, "id": "c1"}]}, "Sorry, that tool failed; here is what I know."]
    agent, model = make_agent(tmp_path / "home", script, tools=[flaky])
    with agent:
        with pytest.raises(WorkerLost):
            agent.invoke("What is up?", thread_id="t1")
        interrupted = agent.state("t1")["messages"]
        assert shape(visible(interrupted)) == ["h", "ai(c1)"]  # the call has no result

        state = agent.invoke("Still there?", thread_id="t1")
    assert shape(model.calls[1]) == ["s", "h", "ai(c1)", "tool(c1!)", "h"]
    messages = visible(state["messages"])
    assert shape(messages) == ["h", "ai(c1)", "h", "ai()"]
    assert messages[0].content == "What is up?"
    assert messages[1].content == "Let me check."
    assert messages[1].tool_calls[0]["args"] == {"question": "q"}
    assert messages[3].content == "Sorry, that tool failed; here is what I know."


def test_a_run_cancelled_while_its_tool_runs_continues_cleanly(tmp_path):
    started = asyncio.Event()

    @tool
    async def slow_job(name: str) -> str:
        """A long job that the user stops."""
        started.set()
        await asyncio.sleep(30)
        return "finished"

    script = [{"content": "Starting it.", "tool_calls": [
        {"name": "slow_job", "args": {"name": "report"}, "id": "c1"}]}, "Stopped; what next?"]
    agent, model = make_agent(tmp_path / "home", script, tools=[slow_job])

    async def stop_midway() -> None:
        run = asyncio.create_task(agent.graph.ainvoke(
            agent.input("run the job"), config=agent.run_config("t1"),
            context=agent.context("t1")))
        await asyncio.wait_for(started.wait(), timeout=10)
        run.cancel()  # the user pressed stop
        with pytest.raises(asyncio.CancelledError):
            await run

    with agent:
        asyncio.run(stop_midway())
        assert shape(visible(agent.state("t1")["messages"])) == ["h", "ai(c1)"]
        state = agent.invoke("never mind", thread_id="t1")
    assert shape(model.calls[1]) == ["s", "h", "ai(c1)", "tool(c1!)", "h"]
    assert [m.content for m in visible(state["messages"])] == [
        "run the job", "Starting it.", "never mind", "Stopped; what next?"]


def test_malformed_calls_are_sanitized_for_the_model_and_kept_raw_in_state(tmp_path):
    raw_payload = [{"id": "c1", "type": "function",
                    "function": {"name": "my tool!", "arguments": "{}"}},
                   {"id": "c2", "type": "function", "function": {"name": "", "arguments": "{oops"}}]
    broken = AIMessage(content="", id="a1", additional_kwargs={"tool_calls": raw_payload},
                       tool_calls=[{"name": "my tool!", "args": {}, "id": "c1"}],
                       invalid_tool_calls=[{"name": "", "args": "{oops", "id": "c2",
                                            "error": "bad json", "type": "invalid_tool_call"}])
    agent, model = make_agent(tmp_path / "home", ["ok"])
    with agent:
        config = agent.run_config("t1")
        agent.graph.update_state(config, {"messages": [HumanMessage("go", id="h1"), broken]})
        state = agent.invoke("next", thread_id="t1")
    sent = model.calls[0]
    # LangChain itself answers the unparsable call (c2) in state; the interrupted one (c1) is
    # answered here, after it, in the request only.
    assert shape(sent) == ["s", "h", "ai(c1,c2)", "tool(c2!)", "tool(c1!)", "h"]
    sent_ai = sent[2]
    assert [(c["name"], c["args"]) for c in sent_ai.tool_calls] == [
        ("my_tool_", {}), ("unknown", {"raw_arguments": "{oops"})]
    assert sent_ai.invalid_tool_calls == []
    assert sent_ai.additional_kwargs["tool_calls"] == raw_payload  # raw payload preserved
    assert (sent[4].name, sent[4].content) == ("my_tool_", INTERRUPTED_PLACEHOLDER)
    kept = state["messages"][1]
    assert kept.tool_calls[0]["name"] == "my tool!"
    assert kept.invalid_tool_calls[0]["args"] == "{oops"
    assert not any(m.content == INTERRUPTED_PLACEHOLDER for m in state["messages"])


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_an_interrupted_call_without_a_name_is_answered_as_unknown(tmp_path, fuse):
    nameless = AIMessage(content="", id="a1",
                         tool_calls=[{"name": "", "args": {}, "id": "c1"}])
    agent, model = make_agent(tmp_path / "home", ["ok"], fuse=fuse)
    with agent:
        config = agent.run_config("t1")
        agent.graph.update_state(config, {"messages": [HumanMessage("go", id="h1"), nameless]})
        agent.invoke("next", thread_id="t1")
    sent = model.calls[0]
    assert shape(sent) == ["s", "h", "ai(c1)", "tool(c1!)", "h"]
    assert sent[2].tool_calls[0]["name"] == "unknown"
    assert (sent[3].name, sent[3].status, sent[3].content) == (
        "unknown", "error", INTERRUPTED_PLACEHOLDER)


def test_async_runs_repair_too(tmp_path):
    agent, model = make_agent(tmp_path / "home", ["ok"])
    with agent:
        config = agent.run_config("t1")
        agent.graph.update_state(config, {"messages": [HumanMessage("go", id="h1"),
                                                        ai_calls(("bash", "c1"), msg_id="a1")]})
        asyncio.run(agent.graph.ainvoke(agent.input("next"), config=config,
                                        context=agent.context("t1")))
    assert shape(model.calls[0]) == ["s", "h", "ai(c1)", "tool(c1!)", "h"]


# -- repair_messages ---------------------------------------------------------------------------


def test_a_well_formed_history_passes_through_as_the_same_request():
    history = [HumanMessage("a"), ai_calls(("bash", "c1")), result("c1"), AIMessage("done")]
    assert repair_messages(history) is None
    seen = []
    request = type("Request", (), {"messages": history})()
    DanglingToolCallMiddleware().wrap_model_call(request, seen.append)  # type: ignore[arg-type]
    assert seen == [request]

    async def handler(req: Any) -> Any:
        seen.append(req)

    asyncio.run(DanglingToolCallMiddleware().awrap_model_call(request, handler))  # type: ignore[arg-type]
    assert seen[1] is request


def test_placeholders_go_right_after_their_message_never_at_the_end():
    history = [
        HumanMessage("a"),
        ai_calls(("bash", "c1"), ("ls", "c2")),
        result("c2"),
        ai_calls(("bash", "c3")),
        HumanMessage("b"),
        ai_calls(("bash", "c4")),
        result("c4"),
        AIMessage("final"),
        ai_calls(("bash", "c5")),
    ]
    repaired = repair_messages(history)
    assert repaired is not None
    assert shape(repaired) == ["h", "ai(c1,c2)", "tool(c2)", "tool(c1!)", "ai(c3)", "tool(c3!)",
                               "h", "ai(c4)", "tool(c4)", "ai()", "ai(c5)", "tool(c5!)"]
    assert shape(history)[3] == "ai(c3)"  # the input list is untouched
    assert all(a is b for a, b in zip(repaired[:3], history[:3], strict=True))


def test_an_unanswered_unparsable_call_becomes_a_call_with_an_error_result():
    message = AIMessage(content="", invalid_tool_calls=[
        {"name": "a b", "args": "{", "id": "c9", "error": "bad", "type": "invalid_tool_call"}])
    repaired = repair_messages([message, HumanMessage("next")])
    assert repaired is not None
    assert repaired[0].tool_calls == [
        {"name": "a_b", "args": {"raw_arguments": "{"}, "id": "c9", "type": "tool_call"}]
    assert (repaired[1].tool_call_id, repaired[1].content) == ("c9", MALFORMED_PLACEHOLDER)
    assert message.invalid_tool_calls[0]["name"] == "a b"


def test_a_call_without_an_id_gets_a_stable_one_and_a_placeholder():
    message = AIMessage(content="", tool_calls=[{"name": "bash", "args": {}, "id": None}])
    repaired = repair_messages([HumanMessage("a"), message])
    assert repaired is not None
    call_id = repaired[1].tool_calls[0]["id"]
    assert call_id == "antler_missing_id_1_0"
    assert repaired[2].tool_call_id == call_id
    assert repair_messages([HumanMessage("a"), message])[1].tool_calls[0]["id"] == call_id  # type: ignore[index]


@pytest.mark.parametrize(("args", "expected"), [
    ('{"command": "ls"}', {"command": "ls"}),
    ("not json", {"raw_arguments": "not json"}),
    (["a", 1], {"raw_arguments": '["a", 1]'}),
    (None, {}),
])
def test_non_object_arguments_become_objects(args, expected):
    message = AIMessage(content="", tool_calls=[{"name": "bash", "args": {}, "id": "c1"}])
    message.tool_calls[0]["args"] = args  # as a misbehaving provider adapter leaves it
    repaired = repair_messages([message, result("c1")])
    assert repaired is not None
    assert repaired[0].tool_calls[0]["args"] == expected
    assert len(repaired) == 2  # answered: sanitized, nothing inserted


@pytest.mark.parametrize(("name", "expected"), [
    ("bash", "bash"), ("web.search", "web_search"), ("", "unknown"), ("  ", "unknown"),
    (None, "unknown"), ("x" * 100, "x" * 64), ("outil-été", "outil-_t_"),
])
def test_tool_names_are_made_acceptable(name, expected):
    assert sanitize_tool_name(name) == expected


# -- linear cost -------------------------------------------------------------------------------


class CountingList(list):
    """A list that counts element visits, to check the repair's cost without a clock."""

    visits = 0

    def __iter__(self):
        for item in super().__iter__():
            CountingList.visits += 1
            yield item

    def __getitem__(self, index):
        item = super().__getitem__(index)
        CountingList.visits += len(item) if isinstance(index, slice) else 1
        return item


def history(turns: int, dangling_every: int = 3) -> list[BaseMessage]:
    """``turns`` exchanges of four messages; every ``dangling_every``-th call is unanswered."""
    messages: list[BaseMessage] = []
    for turn in range(turns):
        messages += [HumanMessage(f"q{turn}"), ai_calls(("bash", f"c{turn}"))]
        if turn % dangling_every:
            messages.append(result(f"c{turn}"))
        messages.append(AIMessage(f"a{turn}"))
    return messages


@pytest.mark.parametrize("turns", [500, 5_000])
def test_repair_visits_each_message_a_bounded_number_of_times(turns):
    messages = CountingList(history(turns))
    CountingList.visits = 0
    repaired = repair_messages(messages)
    assert repaired is not None
    # A check that stops at the first problem, then one copy that every pass reads.
    assert CountingList.visits <= 2 * len(messages)


def test_repair_handles_a_fifty_thousand_message_history():
    messages = history(14_286, dangling_every=2)
    dangling = (14_286 + 1) // 2
    assert len(messages) > 50_000
    repaired = repair_messages(messages)
    assert repaired is not None
    assert len(repaired) == len(messages) + dangling
    assert sum(isinstance(m, ToolMessage) and m.status == "error" for m in repaired) == dangling
    assert isinstance(repaired[-1], AIMessage)  # placeholders sit inside, not at the end


def test_a_call_and_a_result_both_without_an_id_are_paired():
    call = AIMessage(content="", tool_calls=[
        {"name": "ls", "args": {}, "id": "", "type": "tool_call"},
        {"name": "bash", "args": {}, "id": None, "type": "tool_call"}])
    history_ = [HumanMessage("go"), call, ToolMessage("listing", tool_call_id="", name="ls"),
                HumanMessage("next")]
    repaired = repair_messages(history_)
    assert repaired is not None
    ids = [c["id"] for c in repaired[1].tool_calls]
    assert all(ids) and len(set(ids)) == 2
    assert shape(repaired) == ["h", f"ai({ids[0]},{ids[1]})", f"tool({ids[0]})",
                               f"tool({ids[1]}!)", "h"]
    assert repaired[2].content == "listing"  # the real result answers the first call


def test_a_second_result_for_one_call_is_dropped_and_the_first_kept():
    history_ = [HumanMessage("go"), ai_calls(("ls", "c1")), result("c1", text="first"),
                HumanMessage("again"), result("c1", text="second")]
    repaired = repair_messages(history_)
    assert repaired is not None
    assert shape(repaired) == ["h", "ai(c1)", "tool(c1)", "h"]
    assert repaired[2].content == "first"


def test_a_well_formed_history_is_checked_in_one_pass():
    messages = CountingList([
        m for turn in range(2_000) for m in (HumanMessage(f"q{turn}"),
                                             ai_calls(("bash", f"c{turn}")),
                                             result(f"c{turn}"), AIMessage(f"a{turn}"))])
    CountingList.visits = 0
    assert repair_messages(messages) is None
    assert CountingList.visits == len(messages)


def test_system_messages_and_orphan_results_are_left_alone():
    history_ = [SystemMessage("s"), result("orphan"), HumanMessage("a")]
    assert repair_messages(history_) is None


_CALL_IDS = st.sampled_from(["c1", "c2", "c3", ""])
_NAMES = st.sampled_from(["bash", "ls", "bad name"])
_MESSAGE = st.one_of(
    st.builds(lambda i: HumanMessage("q", id=f"h{i}"), st.integers(0, 3)),
    st.builds(lambda calls, i: AIMessage(content="", id=f"a{i}", tool_calls=[
        {"name": name, "args": {}, "id": call_id, "type": "tool_call"}
        for name, call_id in calls]),
        st.lists(st.tuples(_NAMES, _CALL_IDS), max_size=2), st.integers(0, 3)),
    st.builds(lambda call_id, i: ToolMessage("ok", tool_call_id=call_id, id=f"t{i}"),
              _CALL_IDS, st.integers(0, 3)))


@scaled(80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_MESSAGE, max_size=7), min_size=1, max_size=4))
def test_a_repair_reusing_earlier_work_equals_one_from_scratch(histories):
    """The middleware reuses checks and placeholders across calls; each answer stays the same."""
    middleware = DanglingToolCallMiddleware()
    for messages in [*histories, *histories]:
        request = ModelRequest(model=None, messages=messages, system_message=None, tools=[],
                               state={"messages": messages}, runtime=None)
        sent = middleware.wrap_model_call(request, lambda r: r).messages
        expected = repair_messages(messages)
        assert [m.__dict__ for m in sent] == [m.__dict__ for m in expected or messages]


# -- the one-pass repair of calls left without a result -------------------------------------

def _block(calls: list[tuple[str, str]], answered: list[bool], shuffle: bool) -> list[Any]:
    """An assistant message with `calls`, then the results of the answered ones."""
    results = [result(call_id) for (_, call_id), done in zip(calls, answered[:len(calls)],
                                                             strict=True) if done]
    return [ai_calls(*calls), *(reversed(results) if shuffle else results)]


_BLOCK = st.builds(
    _block,
    st.lists(st.tuples(_NAMES, st.sampled_from(["c1", "c2", "c3", "c4", "c5"])), min_size=1,
             max_size=3),
    st.lists(st.booleans(), min_size=3, max_size=3), st.booleans())
_TURN = st.one_of(_BLOCK, st.builds(lambda: [HumanMessage("q")]),
                  st.builds(lambda: [AIMessage("answer")]), st.lists(_MESSAGE, max_size=2))


@scaled(300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TURN, max_size=6))
def test_the_one_pass_repair_equals_the_general_one(turns):
    """Where only placeholders are missing the repair takes one pass; wherever it does, and
    wherever it hands over, the answer is the general rebuild's."""
    from antler.plugins.dangling_tool_call import middleware as module

    messages = [m for turn in turns for m in turn]
    failed, still_open = module._scan(module.CLEAN, messages)
    expected = module._rebuild(list(messages), module._fixed_calls, module._placeholder) \
        if failed or still_open else None
    got = repair_messages(messages)
    assert [m.__dict__ for m in got or messages] == [m.__dict__ for m in expected or messages]


def test_a_dangling_call_among_answered_ones_takes_the_one_pass_repair(monkeypatch):
    from antler.plugins.dangling_tool_call import middleware as module

    def unused(*args: Any) -> None:
        raise AssertionError("the general rebuild ran")

    monkeypatch.setattr(module, "_rebuild", unused)
    history_ = [HumanMessage("go"), ai_calls(("ls", "c1"), ("bash", "c2")), result("c1"),
                HumanMessage("again"), ai_calls(("ls", "c3")), result("c3"), AIMessage("done")]
    repaired = repair_messages(history_)
    assert repaired is not None
    assert shape(repaired) == ["h", "ai(c1,c2)", "tool(c1)", "tool(c2!)", "h", "ai(c3)",
                               "tool(c3)", "ai()"]
    assert repaired[3].content == INTERRUPTED_PLACEHOLDER and repaired[3].status == "error"


# -- the one-pass repair kept per thread ------------------------------------------------------

class _ThreadRuntime:
    """A runtime whose run context names the thread (what the middleware keys its state by)."""

    def __init__(self, thread_id: str) -> None:
        from antler.plugin_api import RunContext

        self.context = RunContext(thread_id=thread_id)


def _kept_always() -> DanglingToolCallMiddleware:
    """The middleware keeping its one-pass repair for histories of any length (it keeps it
    from `KEPT_FROM` messages on): the short histories below exercise the kept state."""
    middleware = DanglingToolCallMiddleware()
    middleware._placed.short = 0
    return middleware


def _sent(middleware: DanglingToolCallMiddleware, messages: list[Any],
          thread_id: str = "t1") -> list[Any]:
    request = ModelRequest(model=None, messages=messages, system_message=None, tools=[],
                           state={"messages": messages}, runtime=_ThreadRuntime(thread_id))
    return middleware.wrap_model_call(request, lambda r: r).messages


def _same_as_from_scratch(sent: list[Any], messages: list[Any]) -> None:
    expected = repair_messages(messages) or messages
    assert [m.__dict__ for m in sent] == [m.__dict__ for m in expected]


def test_the_kept_repair_continues_with_new_messages_only(monkeypatch):
    from antler.plugins.dangling_tool_call import middleware as module

    folded: list[int] = []
    place = module._place

    def spy(before: Any, history: Any, done: int, *args: Any) -> Any:
        folded.append(done)
        return place(before, history, done, *args)

    monkeypatch.setattr(module, "_place", spy)
    middleware = _kept_always()
    history_ = [HumanMessage("go", id="h1"), ai_calls(("ls", "c1"), msg_id="a1"),
                HumanMessage("there?", id="h2"), ai_calls(("bash", "c2"), msg_id="a2")]
    first = _sent(middleware, history_)
    longer = [*history_, result("c2", text="real"), AIMessage("done", id="a3")]
    second = _sent(middleware, longer)
    assert folded == [0, 4]  # the second call looked at the two new messages only
    # The last block is open at the end of the first history: its call gets a placeholder...
    assert shape(first) == ["h", "ai(c1)", "tool(c1!)", "h", "ai(c2)", "tool(c2!)"]
    # ...but not once its result has arrived: the kept state left the block open.
    assert shape(second) == ["h", "ai(c1)", "tool(c1!)", "h", "ai(c2)", "tool(c2)", "ai()"]
    assert second[5].content == "real"
    _same_as_from_scratch(first, history_)
    _same_as_from_scratch(second, longer)


def test_a_message_replaced_between_kept_ends_is_never_served_again():
    """Same first and last objects, a middle message replaced under its id (a node's update
    in the same run): the kept state holds the old message and its placeholder, so it must
    not be continued."""
    middleware = _kept_always()
    history_ = [HumanMessage("go", id="h1"), ai_calls(("ls", "c1"), msg_id="a1"),
                HumanMessage("there?", id="h2"), AIMessage("ok", id="a2")]
    assert shape(_sent(middleware, history_)) == ["h", "ai(c1)", "tool(c1!)", "h", "ai()"]
    replaced = AIMessage("no calls after all", id="a1")
    edited = [history_[0], replaced, *history_[2:], HumanMessage("and now?", id="h3")]
    sent = _sent(middleware, edited)
    assert sent == edited or sent is edited  # nothing left to repair
    assert sent[1] is replaced
    renamed = ai_calls(("ls", "c9"), msg_id="a1")
    edited = [history_[0], renamed, *history_[2:], HumanMessage("and now?", id="h3")]
    sent = _sent(middleware, edited)
    assert shape(sent) == ["h", "ai(c9)", "tool(c9!)", "h", "ai()", "h"]
    assert sent[1] is renamed
    _same_as_from_scratch(sent, edited)


def test_a_shorter_reloaded_or_other_threads_history_starts_over():
    middleware = _kept_always()
    history_ = [HumanMessage("go", id="h1"), ai_calls(("ls", "c1"), msg_id="a1"),
                HumanMessage("there?", id="h2"), ai_calls(("bash", "c2"), msg_id="a2"),
                result("c2"), AIMessage("ok", id="a3")]
    _sent(middleware, history_)
    shorter = history_[:3]  # summarization or a fork dropped the end
    _same_as_from_scratch(_sent(middleware, shorter), shorter)
    reloaded = [m.model_copy(deep=True) for m in history_]  # a new run's checkpoint load
    _same_as_from_scratch(_sent(middleware, reloaded), reloaded)
    other = [HumanMessage("go", id="h1"), ai_calls(("ls", "x1"), msg_id="a1")]
    _same_as_from_scratch(_sent(middleware, other, "t1"), other)  # same key, other history
    assert shape(_sent(middleware, history_, "t2")) == [
        "h", "ai(c1)", "tool(c1!)", "h", "ai(c2)", "tool(c2)", "ai()"]


_EDIT = st.one_of(
    st.tuples(st.just("append"), st.lists(_MESSAGE, min_size=1, max_size=3)),
    st.tuples(st.just("replace"), st.integers(0, 20), _MESSAGE),
    st.tuples(st.just("cut"), st.integers(0, 20)),
    st.tuples(st.just("reload")))


@scaled(150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_MESSAGE, max_size=6), st.lists(_EDIT, max_size=8))
def test_a_kept_repair_always_equals_one_from_scratch(start, edits):
    """Whatever happens to a thread's history between calls (new messages, one replaced in
    place, the end cut, a reload), each request is the one a repair from scratch gives."""
    middleware = _kept_always()
    messages = list(start)
    for edit in [("append", []), *edits]:
        if edit[0] == "append":
            messages = [*messages, *edit[1]]
        elif edit[0] == "replace" and messages:
            position = edit[1] % len(messages)
            messages = [*messages[:position], edit[2], *messages[position + 1:]]
        elif edit[0] == "cut":
            messages = messages[:edit[1]]
        elif edit[0] == "reload":
            messages = [m.model_copy(deep=True) for m in messages]
        _same_as_from_scratch(_sent(middleware, messages), messages)


@tool
def echo(text: str) -> str:
    """Say `text` back."""
    return f"echo: {text}"


@pytest.mark.parametrize("fuse", [True, False])
def test_every_model_call_of_a_thread_with_an_interrupted_call_gets_its_repair(tmp_path,
                                                                                  fuse,
                                                                                  monkeypatch):
    """On a long thread the repair kept between the calls of a run answers the interrupted
    call each time, leaves the run's own answered call alone, and follows the history
    edited between runs."""
    from antler.plugins.dangling_tool_call import middleware as module

    folded: list[tuple[int, int]] = []
    place = module._place

    def spy(before: Any, history: Any, done: int, *args: Any) -> Any:
        folded.append((done, len(history)))
        return place(before, history, done, *args)

    monkeypatch.setattr(module, "_place", spy)
    earlier = [HumanMessage(f"question {i}", id=f"q{i}") if i % 2 == 0
               else AIMessage(f"answer {i}", id=f"r{i}") for i in range(module.KEPT_FROM)]
    script = [{"content": "", "tool_calls": [{"name": "echo", "args": {"text": "hi"},
                                              "id": "c2"}]}, "Done.", "Again."]
    agent, model = make_agent(tmp_path / "home", script, tools=[echo], fuse=fuse)
    with agent:
        agent.graph.update_state(agent.run_config("t1"), {"messages": [
            *earlier, HumanMessage("list files", id="h1"), ai_calls(("ls", "c1"), msg_id="a1"),
            HumanMessage("are you there?", id="h2")]})
        agent.invoke("continue", thread_id="t1")
        agent.graph.update_state(agent.run_config("t1"), {"messages": [
            ai_calls(("ls", "c9"), msg_id="a1")]})  # the interrupted call, rewritten in place
        agent.invoke("next", thread_id="t1")
    first, second, third = (shape(calls)[len(earlier) + 1:] for calls in model.calls)
    assert first == ["h", "ai(c1)", "tool(c1!)", "h", "h"]
    assert second == [*first, "ai(c2)", "tool(c2)"]
    assert model.calls[1][-1].content == "echo: hi"  # the real result, no placeholder
    assert third == ["h", "ai(c9)", "tool(c9!)", "h", "h", "ai(c2)", "tool(c2)", "ai()", "h"]
    assert not any(m.tool_call_id == "c1" for m in model.calls[2]
                   if isinstance(m, ToolMessage))
    # The run's second call continued the first one's pass (two new messages); the next
    # run (a reloaded, edited history) started over.
    sizes = [len(calls) - 1 for calls in model.calls]  # the history, without the prompt
    assert folded == [(0, sizes[0]), (sizes[0], sizes[1]), (0, sizes[2])]
    assert sizes[1] == sizes[0] + 2
