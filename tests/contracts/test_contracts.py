"""antler.contracts: the agreements plugins cooperate through, each exercised as plugins use it."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware, after_model
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from antler.contracts.fallback import error_fallback_message, error_fallback_of, is_error_fallback
from antler.contracts.messages import (
    has_tool_call_intent,
    hidden_marker,
    is_hidden,
    latest_user_message,
    message_text,
    strip_tool_calls,
    user_text,
)
from antler.contracts.runstore import (
    PendingQueue,
    RunStore,
    acall_then_commit,
    call_then_commit,
    run_key,
)
from antler.contracts.stop_reason import (
    STOP_REASON_KEY,
    StopReasonState,
    describe_stop_reason,
    record_stop_reason,
    stop_reason_of,
)
from antler.contracts.toolmeta import (
    TOOL_META_KEY,
    ToolMeta,
    classify_error_text,
    is_error_payload,
    refusal,
    tool_meta,
    validate_tool_meta,
    with_tool_meta,
)
from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from tests.plugins.support import RetryOnce

QUIET = {TITLE_MODEL: ScriptedChatModel(["t"] * 5), MEMORY_MODEL: ScriptedChatModel(["{}"] * 5)}


def quiet_services() -> dict[str, Any]:
    return {TITLE_MODEL: ScriptedChatModel(["t"] * 5),
            MEMORY_MODEL: ScriptedChatModel(["{}"] * 5)}


# -- tool-result metadata ------------------------------------------------------------------


def test_a_refusal_is_an_error_the_model_can_route_around():
    meta = validate_tool_meta(refusal("blocked", "sandbox_audit", rule="pipe_to_shell"))
    assert (meta.status, meta.error_type, meta.is_refusal, meta.is_problem) == (
        "error", "blocked", True, True)
    assert meta.recommended_next_action == "use_another_tool"
    assert meta.model_extra == {"rule": "pipe_to_shell"}  # extra keys survive


@pytest.mark.parametrize(("bad", "fragment"), [
    ({"status": "denied"}, "status"),
    ({"status": "error"}, "needs an error_type"),
    ({"status": "success", "error_type": "auth"}, "has no error_type"),
    ({"status": "error", "error_type": "oops"}, "error_type 'oops'"),
    ({"status": "error", "error_type": "auth", "recommended_next_action": "panic"}, "panic"),
    ("error", "must be a mapping"),
])
def test_malformed_metadata_is_refused_with_what_is_wrong(bad, fragment):
    with pytest.raises(ValueError, match=fragment):
        validate_tool_meta(bad)


def test_reading_metadata_tolerates_absent_and_malformed_stamps():
    plain = ToolMessage("ok", tool_call_id="1")
    assert tool_meta(plain) is None
    forged = ToolMessage("ok", tool_call_id="1", additional_kwargs={TOOL_META_KEY: {"x": 1}})
    assert tool_meta(forged) is None
    stamped = with_tool_meta(plain, {"status": "success"})
    assert tool_meta(stamped) == ToolMeta(status="success")
    # an existing stamp is kept unless replaced on purpose
    again = with_tool_meta(stamped, refusal("denied", "authorization"))
    assert tool_meta(again).status == "success"  # type: ignore[union-attr]
    replaced = with_tool_meta(stamped, refusal("denied", "authorization"), replace=True)
    assert tool_meta(replaced).is_refusal  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "expected"), [
    ("HTTP 401 Unauthorized", "auth"),
    ("Error: invalid API key supplied", "auth"),
    ("429 Too Many Requests", "rate_limited"),
    ("connection reset by peer", "transient"),
    ("the service returned 500", "internal"),
    ("took 500ms and returned nothing odd", "unknown"),
    ("No such file or directory: a.txt", "not_found"),
    ("search returned no results", "no_results"),
    ('{"user_id": 401, "error": "not found"}', "not_found"),
    ('{"error": {"code": 429}}', "rate_limited"),
    ("web search is not configured", "config"),
])
def test_errors_are_classified_from_their_text(text, expected):
    assert classify_error_text(text)[0] == expected


@pytest.mark.parametrize(("text", "is_error"), [
    ("Error: boom", True), ("error - it failed", True), ('{"error": "quota"}', True),
    ('{"error": "none"}', False), ('{"error": null}', False), ('{"user_id": 401}', False),
    ("errors found: 0", False), ("all good", False),
])
def test_error_payloads_are_recognised_without_false_alarms(text, is_error):
    assert is_error_payload(text) is is_error


# -- stop reasons, through a real graph ------------------------------------------------------


class Capper(AgentMiddleware):
    """A guard recording a reason on each model call; the second one keeps the first."""

    state_schema = StopReasonState

    def __init__(self, reasons: list[str]) -> None:
        super().__init__()
        self.reasons = list(reasons)

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return record_stop_reason(self.reasons.pop(0), runtime, detail="test") if (
            self.reasons) else None


@pytest.mark.parametrize("fuse", [True, False])
def test_stop_reasons_are_per_run_and_first_writer_wins_where_declared(tmp_path, fuse):
    ls = {"content": "", "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data"}}]}
    model = ScriptedChatModel([ls, "done", "again", "and again"])
    capper = Capper(["loop_capped", "model_length_capped", "model_length_capped"])
    with create_agent(model=model, base_dir=tmp_path, checkpointer="memory", fuse=fuse,
                      services=quiet_services(), custom_middlewares=[capper]) as agent:
        first = agent.invoke("one", thread_id="t", run_id="r1")
        # model_length_capped only fills an empty slot: the run's loop_capped stays
        assert stop_reason_of(first, "r1")["reason"] == "loop_capped"  # type: ignore
        assert "loop guard" in describe_stop_reason(first[STOP_REASON_KEY])
        second = agent.invoke("two", thread_id="t", run_id="r2")
        # a new run: the earlier run's reason does not block the first writer
        assert stop_reason_of(second, "r2")["reason"] == "model_length_capped"  # type: ignore
        third = agent.invoke("three", thread_id="t", run_id="r3")
    assert stop_reason_of(third, "r3") is None  # the value in state is the earlier run's
    assert stop_reason_of(third) is not None


def test_a_caller_cannot_set_the_stop_reason_in_graph_input(tmp_path):
    with create_agent(model=ScriptedChatModel(["hi"]), base_dir=tmp_path, checkpointer="memory",
                      services=quiet_services(),
                      custom_middlewares=[Capper([])]) as agent:
        forged = {"messages": [HumanMessage("hi")],
                  STOP_REASON_KEY: {"reason": "token_capped", "run_id": "r1"}}
        state = agent.graph.invoke(forged, config=agent.run_config("t"),
                                   context=agent.context("t", run_id="r1"))
    assert stop_reason_of(state, "r1") is None


# -- error fallbacks -------------------------------------------------------------------------


def test_an_error_fallback_is_marked_and_recognised():
    reply = error_fallback_message("The model is unavailable.", error_type="transient",
                                   reason="retries exhausted", detail="503")
    assert is_error_fallback(reply) and not is_error_fallback(AIMessage("fine"))
    assert error_fallback_of(reply) == {"error_type": "transient", "reason": "retries exhausted",
                                        "detail": "503"}


def test_memory_and_title_ignore_an_error_fallback_reply(tmp_path):
    @after_model
    def fail_reply(state: Any, runtime: Any) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [error_fallback_message("Sorry, the model failed.", id=last.id,
                                                    error_type="quota", reason="no credit")]}

    title_model = ScriptedChatModel(["A title"])
    with create_agent(model=ScriptedChatModel(["raw"]), base_dir=tmp_path,
                      checkpointer="memory", custom_middlewares=[fail_reply],
                      services={TITLE_MODEL: title_model,
                                MEMORY_MODEL: ScriptedChatModel(["{}"])}) as agent:
        state = agent.invoke("hello", thread_id="t")
    assert is_error_fallback(state["messages"][-1])
    assert not state.get("title") and not title_model.requests  # no exchange to title


# -- run stores and retry-safe injections ----------------------------------------------------


def test_run_store_drops_the_oldest_runs_and_reading_does_not_refresh():
    store: RunStore[int] = RunStore(max_runs=2)
    store.set(("t", "a"), 1)
    store.set(("t", "b"), 2)
    assert store.get(("t", "a")) == 1  # a read is not a write
    store.set(("t", "c"), 3)
    assert ("t", "a") not in store and len(store) == 2
    store.discard_thread("t", keep_run="c")
    assert list(store.keys()) == [("t", "c")]
    with pytest.raises(ValueError, match="at least 1"):
        RunStore(max_runs=0)


def test_pending_queue_commits_only_what_was_delivered():
    queue: PendingQueue[str] = PendingQueue(max_items=2)
    key = ("t", "r")
    queue.add(key, "a")
    queue.add(key, "a")  # identical hints are not repeated
    delivered = queue.peek(key)
    queue.add(key, "b")  # arrives while the model call runs
    with pytest.raises(RuntimeError):
        call_then_commit(_raise, None, lambda: queue.commit(key, delivered))
    assert queue.peek(key) == ("a", "b")  # the failed call delivered nothing
    assert call_then_commit(lambda r: "ok", None, lambda: queue.commit(key, delivered)) == "ok"
    assert queue.peek(key) == ("b",)
    for item in "cde":
        queue.add(key, item)
    assert queue.peek(key) == ("d", "e")  # bounded


def _raise(_request: Any) -> Any:
    raise RuntimeError("provider down")


class Hinter(AgentMiddleware):
    """Injects one pending hint per run, by the rule: peek, call, then commit."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: PendingQueue[str] = PendingQueue()

    def before_agent(self, state: Any, runtime: Any) -> None:
        self.queue.add(run_key(runtime), "HINT: check your work")

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return call_then_commit(handler, *self._inject(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await acall_then_commit(handler, *self._inject(request))

    def _inject(self, request: Any) -> tuple[Any, Any]:
        key = run_key(request.runtime)
        pending = self.queue.peek(key)
        messages = [*request.messages, *(HumanMessage(h, additional_kwargs=hidden_marker("hinter"))
                                        for h in pending)]
        return request.override(messages=messages), lambda: self.queue.commit(key, pending)


class FailFirst(AgentMiddleware):
    """Innermost: the first model call fails, as a provider's transient error would."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("transient")
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("transient")
        return await handler(request)


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("use_async", [False, True])
def test_a_retried_model_call_still_carries_the_hint(tmp_path, fuse, use_async):
    import asyncio

    model = ScriptedChatModel(["answer", "second"])
    chain = [RetryOnce(), Hinter(), FailFirst()]
    with create_agent(model=model, base_dir=tmp_path, checkpointer="memory", fuse=fuse,
                      services=quiet_services(), custom_middlewares=chain) as agent:
        if use_async:
            asyncio.run(agent.graph.ainvoke(agent.input("go"), config=agent.run_config("t"),
                                            context=agent.context("t")))
        else:
            agent.invoke("go", thread_id="t")
        agent.invoke("more", thread_id="t")
    first, second = model.requests
    assert [m.content for m in first.messages][-1] == "HINT: check your work"
    # delivered once per run: the second run gets its own hint, not two
    assert sum(m.content == "HINT: check your work" for m in second.messages) == 1


# -- message helpers ------------------------------------------------------------------------


def test_hidden_messages_are_recognised_by_every_marker():
    assert is_hidden(HumanMessage("x", additional_kwargs=hidden_marker("dynamic_context")))
    assert is_hidden(HumanMessage("x", additional_kwargs={"lc_source": "summarization"}))
    assert is_hidden(HumanMessage("x", additional_kwargs={"hide_from_ui": True}))
    assert not is_hidden(HumanMessage("x"))


def test_every_hidden_marker_is_a_server_owned_key():
    from antler.contracts.messages import _LEGACY_MARKERS, HIDDEN_KEY
    from antler.contracts.serverkeys import server_owned_keys
    from antler.plugin_api.registry import discover

    owned = server_owned_keys(discover().specs.values())
    assert {HIDDEN_KEY, *_LEGACY_MARKERS} <= set(owned)


@pytest.mark.parametrize("name", ["summary", "todo_reminder", "loop_warning"])
def test_a_name_does_not_hide_a_message(name):
    assert not is_hidden(HumanMessage("x", name=name))


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_callers_message_named_like_an_injected_one_is_still_the_callers(tmp_path, fuse):
    # The title plugin titles the first exchange of user words: a message the caller
    # named `summary` is such words, so it is titled (it used to be taken for hidden).
    title_model = ScriptedChatModel(["Weekly Plan"])
    with create_agent(model=ScriptedChatModel(["Here is a plan."]), base_dir=tmp_path,
                      checkpointer="memory", fuse=fuse,
                      services={TITLE_MODEL: title_model,
                                MEMORY_MODEL: ScriptedChatModel(["{}"])}) as agent:
        state = agent.invoke(HumanMessage("plan my week", name="summary"), thread_id="t")
    assert state["title"] == "Weekly Plan"
    (request,) = title_model.requests
    assert "plan my week" in str(request)


def test_the_latest_genuine_user_message_and_its_original_text():
    user = HumanMessage([{"type": "text", "text": "<uploaded_files/>\nhi"}],
                        additional_kwargs={"original_user_content": "hi"})
    messages = [SystemMessage("s"), user, AIMessage("a"),
                HumanMessage("reminder", additional_kwargs=hidden_marker("x"))]
    assert latest_user_message(messages) is user
    assert user_text(user) == "hi"
    assert message_text(user) == "<uploaded_files/>\nhi"
    assert latest_user_message([AIMessage("a")]) is None


def _reply_with_calls() -> AIMessage:
    return AIMessage(
        content=[{"type": "text", "text": "working"},
                 {"type": "tool_use", "id": "a", "name": "ls", "input": {}},
                 {"type": "tool_use", "id": "b", "name": "bash", "input": {}}],
        tool_calls=[{"name": "ls", "args": {}, "id": "a"}, {"name": "bash", "args": {}, "id": "b"}],
        additional_kwargs={"tool_calls": [{"id": "a"}, {"id": "b"}],
                           "function_call": {"name": "ls"}},
        response_metadata={"finish_reason": "tool_calls"}, id="m1")


def test_stripping_every_call_removes_all_its_forms():
    stripped = strip_tool_calls(_reply_with_calls(), note="[FORCED STOP] answer now")
    assert not has_tool_call_intent(stripped)
    assert stripped.id == "m1" and stripped.tool_calls == []
    assert "tool_calls" not in stripped.additional_kwargs
    assert "function_call" not in stripped.additional_kwargs
    assert stripped.content == [{"type": "text", "text": "working"},
                                {"type": "text", "text": "[FORCED STOP] answer now"}]
    assert stripped.response_metadata["finish_reason"] == "stop"


def test_stripping_some_calls_keeps_the_others_and_the_finish_reason():
    stripped = strip_tool_calls(_reply_with_calls(), positions={1})
    assert [c["id"] for c in stripped.tool_calls] == ["a"]
    assert stripped.additional_kwargs["tool_calls"] == [{"id": "a"}]
    assert [b.get("id") for b in stripped.content if isinstance(b, dict)] == [None, "a"]
    assert stripped.response_metadata["finish_reason"] == "tool_calls"
    assert has_tool_call_intent(stripped)


def test_tool_call_intent_in_any_provider_form():
    assert has_tool_call_intent(AIMessage("", additional_kwargs={"function_call": {"n": 1}}))
    assert has_tool_call_intent(AIMessage("", response_metadata={"finish_reason": "tool_calls"}))
    assert not has_tool_call_intent(AIMessage("plain answer"))


# -- the task result contract --------------------------------------------------------------


def test_a_task_result_carries_status_stop_reason_brief_and_usage(tmp_path):
    import hashlib

    lead = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "task",
                                        "args": {"description": "d", "prompt": "p"}}]},
        "done"])
    sub = ScriptedChatModel([{"content": "sub answer", "usage": {"input_tokens": 7,
                                                                 "output_tokens": 3}}])
    with create_agent(model=lead, subagent_model=sub, base_dir=tmp_path, checkpointer="memory",
                      runtime=RuntimeOptions(subagents_enabled=True),
                      services=quiet_services()) as agent:
        state = agent.invoke("delegate", thread_id="t")
    [result] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    fields = result.additional_kwargs
    assert fields["subagent_status"] == "completed" and fields["subagent_stop_reason"] is None
    assert fields["subagent_result_brief"] == "sub answer"
    assert fields["subagent_result_sha256"] == hashlib.sha256(b"sub answer").hexdigest()
    assert fields["subagent_token_usage"] == {"input_tokens": 7, "output_tokens": 3,
                                              "total_tokens": 10}


# -- static system-prompt sections -----------------------------------------------------------


def _section_plugin(name: str, section: str, chains: list[str]) -> Any:
    """An in-process distribution: one plugin that contributes one prompt section."""
    import types

    from antler.plugin_api.hookspecs import hookimpl
    from antler.plugin_api.spec import PluginSpec

    spec = PluginSpec(name=name, factory="tests.fixtures.noop:build", chains=chains, hooks=[])
    module = types.ModuleType(name)
    module.antler_plugin_specs = hookimpl(lambda: [spec])  # type: ignore[attr-defined]
    module.antler_prompt_sections = hookimpl(  # type: ignore[attr-defined]
        lambda context: f"{section} ({context.chain})")
    return module


def test_prompt_sections_of_participating_plugins_reach_the_system_prompt(
        tmp_path, antler_discover):
    registry = antler_discover(extra_plugins=[
        ("skills_index", _section_plugin("skills_index", "<skills>s</skills>", ["lead"])),
        ("sub_only", _section_plugin("sub_only", "<sub>x</sub>", ["subagent"])),
    ])
    model = ScriptedChatModel(["hi"])
    with create_agent(model=model, registry=registry, base_dir=tmp_path,
                      checkpointer="memory", services=quiet_services()) as agent:
        agent.invoke("hello", thread_id="t")
    [request] = model.requests
    system = request.messages[0]
    assert isinstance(system, SystemMessage)
    system = system.content
    assert system.startswith("You are a helpful agent.")
    # The static prompt ends with the section; the per-turn date reminder is merged after it.
    static, _, reminder = system.partition("\n\n<system-reminder>")
    assert static.endswith("\n\n<skills>s</skills> (lead)") and "<current_date>" in reminder
    assert "<sub>" not in system  # its plugin does not take part in the lead chain
