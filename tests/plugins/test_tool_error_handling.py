"""tool_error_handling: a raising tool answers the model instead of ending the run; every
result carries `antler_tool_meta`; interrupts and cancellation pass untouched - through real
graphs, fused and unfused, sync and async, on both chains."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.errors import GraphInterrupt
from langgraph.types import Command, Interrupt, interrupt

from antler.contracts.toolmeta import TOOL_META_KEY, result_meta, tool_meta
from antler.errors import PluginHookError
from antler.plugins.tool_error_handling.middleware import (
    MAX_DETAIL_CHARS,
    ToolErrorHandlingMiddleware,
)
from antler.testing import assert_before
from tests.plugins.guard_support import ainvoke, call, calls, make_agent, tool_results
from tests.plugins.guard_support import behaving_tool as tool

MODES = [pytest.param(fuse, mode, id=f"{'fused' if fuse else 'unfused'}-{mode}")
         for fuse in (True, False) for mode in ("sync", "async")]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def raising(exc: BaseException) -> Any:
    def behaviour(*args: Any, **kwargs: Any) -> Any:
        raise exc
    return behaviour


def invoke(agent: Any, mode: str, thread: str = "t1") -> dict[str, Any]:
    with agent:
        if mode == "async":
            return ainvoke(agent, "go", thread_id=thread)
        return agent.invoke("go", thread_id=thread)


def meta(message: ToolMessage) -> dict[str, Any]:
    return dict(message.additional_kwargs[TOOL_META_KEY])


# -- placement -----------------------------------------------------------------------------------


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_always_on_innermost_of_the_base_tool_wrappers(home, chain):
    agent, _ = make_agent(home, ["hi"], "tool_progress: {enabled: true}\n", chain=chain)
    for outer in ("sandbox_audit", "read_before_write", "tool_progress"):
        assert_before(agent.chain, outer, "tool_error_handling")


# -- exceptions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_a_raising_tool_becomes_an_error_result_and_the_run_goes_on(home, fuse, mode):
    flaky = tool("flaky", raising(TimeoutError("upstream timed out")))
    agent, model = make_agent(home, [call("flaky"), "done"], tools=[flaky], fuse=fuse)
    state = invoke(agent, mode)
    [result] = tool_results(state)
    assert result.status == "error"
    assert result.content == ("Error: Tool 'flaky' failed with TimeoutError: upstream timed out. "
                              "Continue with available context, or choose an alternative tool.")
    assert meta(result) == {"status": "error", "error_type": "transient",
                            "recoverable_by_model": False,
                            "recommended_next_action": "try_alternative",
                            "source": "exception", "exception": "TimeoutError"}
    assert state["messages"][-1].content == "done"
    assert result in model.calls[-1]  # the model saw the error and answered


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_parallel_calls_each_get_their_own_answer(home, fuse, mode):
    tools = [tool("flaky", raising(PermissionError("permission denied for /etc"))),
             tool("fine", lambda **_: "all good")]
    script = [calls(("flaky", {}), ("fine", {}), ("flaky", {})), "done"]
    agent, _ = make_agent(home, script, tools=tools, fuse=fuse)
    state = invoke(agent, mode)
    results = tool_results(state)
    assert [(m.name, m.status) for m in results] == [
        ("flaky", "error"), ("fine", "success"), ("flaky", "error")]
    assert [meta(m)["error_type"] for m in results] == ["permission", None, "permission"]
    assert len({m.tool_call_id for m in results}) == 3


def test_a_long_exception_message_is_cut_and_a_missing_call_id_is_named():
    middleware = ToolErrorHandlingMiddleware()
    request = type("Request", (), {"tool_call": {"name": "big", "args": {}}})()
    result = middleware.wrap_tool_call(request, raising(ValueError("x" * 5000)))
    detail = result.content.split("ValueError: ", 1)[1].split(". Continue")[0]
    assert len(detail) == MAX_DETAIL_CHARS and detail.endswith("...")
    assert result.tool_call_id == "missing_tool_call_id"


def test_the_exception_text_is_classified_and_replaces_any_earlier_stamp(home):
    errors = {"auth": RuntimeError("401 Unauthorized"),
              "config": RuntimeError("search is not configured: no API key"),
              "not_found": FileNotFoundError("no such file: report.md"),
              "unknown": RuntimeError("took 500ms and then gave up")}
    tools = [tool(name, raising(exc)) for name, exc in errors.items()]
    agent, _ = make_agent(home, [calls(*[(name, {}) for name in errors]), "done"], tools=tools)
    state = invoke(agent, "sync")
    assert [meta(m)["error_type"] for m in tool_results(state)] == list(errors)
    assert [meta(m)["recommended_next_action"] for m in tool_results(state)] == [
        "stop", "stop", "rewrite_query", "try_alternative"]


@pytest.mark.parametrize("fuse", [True, False])
def test_an_interrupt_inside_a_tool_propagates_untouched(home, fuse):
    asked = tool("ask", lambda **_: interrupt("which file?"))
    agent, _ = make_agent(home, [call("ask"), "done"], tools=[asked], fuse=fuse)
    with agent:
        out = agent.graph.invoke(agent.input("go"), config=agent.run_config("t1"),
                                 context=agent.context("t1"))
        assert [i.value for i in out["__interrupt__"]] == ["which file?"]
        assert not tool_results(out)
        resumed = agent.graph.invoke(Command(resume="notes.md"), config=agent.run_config("t1"),
                                     context=agent.context("t1"))
    [result] = tool_results(resumed)
    assert result.content == "notes.md" and meta(result)["status"] == "success"


def test_graph_bubble_ups_and_cancellation_are_never_turned_into_results():
    middleware = ToolErrorHandlingMiddleware()
    request = type("Request", (), {"tool_call": {"name": "t", "id": "c1", "args": {}}})()
    with pytest.raises(GraphInterrupt):
        middleware.wrap_tool_call(request, raising(GraphInterrupt((Interrupt("x"),))))
    with pytest.raises(KeyboardInterrupt):
        middleware.wrap_tool_call(request, raising(KeyboardInterrupt()))

    async def cancelled(_request: Any) -> Any:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(middleware.awrap_tool_call(request, cancelled))


def test_an_inner_plugins_failure_under_on_error_fail_stops_the_run():
    """A gate inside it whose policy is `fail` stops the run, as docs/plugins.md says."""
    middleware = ToolErrorHandlingMiddleware()
    request = type("Request", (), {"tool_call": {"name": "t", "id": "c1", "args": {}}})()
    failure = PluginHookError("plugin 'gate' failed in wrap_tool_call: ValueError: bad",
                              plugin="gate", hook="wrap_tool_call")
    with pytest.raises(PluginHookError) as raised:
        middleware.wrap_tool_call(request, raising(failure))
    assert raised.value is failure

    async def failing(_request: Any) -> Any:
        raise failure

    with pytest.raises(PluginHookError):
        asyncio.run(middleware.awrap_tool_call(request, failing))


# -- stamping results ------------------------------------------------------------------------------


@pytest.mark.parametrize(("output", "expected"), [
    ("42 rows", ("success", None, "continue")),
    ("Error: 404 page not found", ("error", "not_found", "rewrite_query")),
    ('{"error": "rate limit exceeded, slow down"}', ("error", "rate_limited", "summarize")),
    ('{"error": null, "rows": 3}', ("success", None, "continue")),
    ('{"error": "ok"}', ("success", None, "continue")),
    ('{"error": 404}', ("error", "not_found", "rewrite_query")),
    ('{"user_id": 401}', ("success", None, "continue")),
    ("No results found for 'zzz'", ("partial_success", "no_results", "rewrite_query")),
    ("a\nb\n[output truncated: 10 more bytes not shown]", ("partial_success", None, "continue")),
])
def test_every_result_is_stamped_from_its_text(home, output, expected):
    agent, _ = make_agent(home, [call("probe"), "done"], tools=[tool("probe", lambda **_: output)])
    [result] = tool_results(invoke(agent, "sync"))
    stamped = meta(result)
    assert (stamped["status"], stamped["error_type"], stamped["recommended_next_action"]) \
        == expected
    assert stamped["source"] == "tool"


def test_an_error_status_without_an_error_text_is_still_an_error():
    assert result_meta("the server said no", errored=True).status == "error"
    assert result_meta("the server said no").status == "success"


def test_a_gates_refusal_keeps_its_stamp(home):
    config = ("authorization:\n  enabled: true\n  default_role: user\n  provider_options:\n"
              "    roles:\n      user: [probe]\n")
    tools = [tool("probe", lambda **_: "ok"), tool("launch", lambda **_: "launched")]
    agent, _ = make_agent(home, [calls(("launch", {}), ("probe", {})), "done"], config,
                          tools=tools)
    denied, ok = tool_results(invoke(agent, "sync"))
    assert meta(denied)["source"] == "authorization" and meta(denied)["error_type"] == "denied"
    assert tool_meta(ok) is not None and tool_meta(ok).status == "success"  # type: ignore[union-attr]


def test_invalid_arguments_reported_by_the_tool_node_are_stamped(home):
    def typed(count: int) -> str:
        """Needs a number."""
        return str(count)

    strict = StructuredTool.from_function(typed, name="typed")
    agent, _ = make_agent(home, [call("typed", count="many"), "done"], tools=[strict])
    [result] = tool_results(invoke(agent, "sync"))
    assert result.status == "error" and meta(result)["status"] == "error"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_command_passes_with_its_tool_message_stamped(home, mode):
    # The first sandbox call of a thread records the sandbox through a Command.
    agent, _ = make_agent(home, [call("bash", command="echo hi"), "done"])
    state = invoke(agent, mode)
    assert state["sandbox"]["sandbox_id"]
    [result] = tool_results(state)
    assert result.content == "hi" and meta(result)["status"] == "success"


# -- fetched error pages -------------------------------------------------------------------------


@pytest.mark.parametrize(("fuse", "mode"), MODES)
@pytest.mark.parametrize(("page", "expected"), [
    ("# 404 Not Found\n\nThe requested URL was not found on this server.",
     ("error", "not_found", "rewrite_query")),
    ("Title: 503 Service Unavailable\n\nURL Source: https://example.com/\n\nTry later.",
     ("error", "transient", "try_alternative")),
    ("\n\nHTTP/1.1 403 Forbidden\n\nnginx", ("error", "auth", "stop")),
    ("# 404 errors explained\n\nA 404 means the page is gone.", ("success", None, "continue")),
    ("# 200 OK\n\nfine", ("success", None, "continue")),
])
def test_a_fetched_page_titled_with_an_http_error_status_is_an_error(home, fuse, mode, page,
                                                                       expected):
    fetch = tool("web_fetch", lambda **_: page)
    agent, _ = make_agent(home, [call("web_fetch", url="https://example.com/"), "done"],
                          tools=[fetch], fuse=fuse)
    [result] = tool_results(invoke(agent, mode))
    stamped = meta(result)
    assert (stamped["status"], stamped["error_type"], stamped["recommended_next_action"]) \
        == expected
    assert result.content == page  # the page itself reaches the model unchanged


def test_only_a_page_fetch_is_judged_by_its_title(home):
    agent, _ = make_agent(home, [call("probe"), "done"],
                          tools=[tool("probe", lambda **_: "# 404 Not Found")])
    [result] = tool_results(invoke(agent, "sync"))
    assert meta(result)["status"] == "success"
