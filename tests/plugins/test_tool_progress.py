"""tool_progress: per-run ACTIVE -> WARNED -> BLOCKED over errors, inner refusals and repeats
(a gate outer of it consumes no slot); hints in the next request only, kept across a retried
model call; blocked calls refused without running - through real graphs, fused and unfused,
sync and async, on both chains."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.types import Command

from antler.contracts.messages import HIDDEN_KEY, is_hidden
from antler.contracts.toolmeta import TOOL_META_KEY
from antler.plugin_api.context import SKILLS
from antler.plugins.tool_progress.config import ToolProgressConfig
from antler.plugins.tool_progress.middleware import HINT_NAME, ToolProgressMiddleware
from antler.runtime.skills import SkillsRegistry
from antler.testing import assert_before
from tests.plugins.guard_support import (
    ainvoke,
    behaving_tool,
    call,
    calls,
    make_agent,
    tool_results,
)
from tests.plugins.support import RetryOnce

MODES = [pytest.param(fuse, mode, id=f"{'fused' if fuse else 'unfused'}-{mode}")
         for fuse in (True, False) for mode in ("sync", "async")]
# loop_detection (on by default) would stop the repeated calls these tests count first.
ON = "tool_progress: {enabled: true}\nloop_detection: {enabled: false}\n"
DENY_LAUNCH = ("authorization:\n  enabled: true\n  default_role: user\n  provider_options:\n"
               "    roles:\n      user: [flaky, fetch, locked, search]\n")
REPORT = ("The quarterly report lists revenue, costs, margins, headcount, churn, pipeline, "
          "forecasts and risks for every region")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


class Tools:
    """Test tools that count their runs; each behaves as its name says."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.fetch_outputs: list[str] = []

    def _tool(self, name: str, behaviour: Any) -> StructuredTool:
        def counted(**kwargs: Any) -> Any:
            self.runs[name] = self.runs.get(name, 0) + 1
            return behaviour(**kwargs)

        return behaving_tool(name, counted)

    def all(self) -> list[StructuredTool]:
        def flaky(**_: Any) -> str:
            raise ConnectionError("connection reset by peer")

        def fetch(**kwargs: Any) -> str:
            return str(kwargs.get("text", REPORT))

        def locked(**_: Any) -> str:
            raise PermissionError("401 unauthorized: invalid api key")

        def search(**kwargs: Any) -> str:
            if kwargs.get("q") == "good":
                return "found it"
            return f"Error: no such file {kwargs.get('q', '')}"

        return [self._tool("flaky", flaky), self._tool("fetch", fetch),
                self._tool("locked", locked), self._tool("search", search),
                self._tool("launch", lambda **_: "launched")]


def invoke(agent: Any, mode: str, thread: str = "t1") -> dict[str, Any]:
    with agent:
        if mode == "async":
            return ainvoke(agent, "go", thread_id=thread)
        return agent.invoke("go", thread_id=thread)


def hints(request: list[Any]) -> list[HumanMessage]:
    return [m for m in request if isinstance(m, HumanMessage) and m.name == HINT_NAME]


def repeat(turn: Any, times: int) -> list[Any]:
    return [turn] * times


# -- placement and configuration -----------------------------------------------------------------


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_off_by_default_and_between_the_gates_and_error_handling(home, chain):
    agent, _ = make_agent(home, ["hi"], chain=chain)
    assert "tool_progress" not in agent.chain.names
    agent, _ = make_agent(home, ["hi"], ON + DENY_LAUNCH, chain=chain)
    for outer in ("authorization", "sandbox_audit", "read_before_write"):
        assert_before(agent.chain, outer, "tool_progress")
    assert_before(agent.chain, "tool_progress", "tool_error_handling")


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_repeated_errors_warn_then_block_a_tool_that_cannot_recover(home, fuse, mode):
    tools = Tools()
    script = [*repeat(call("flaky"), 6), "done"]
    agent, model = make_agent(home, script, ON, tools=tools.all(), fuse=fuse)
    state = invoke(agent, mode)
    results = tool_results(state)
    # 3 errors warn; 2 more (transient: not recoverable) block; the 6th call never runs.
    assert tools.runs["flaky"] == 5
    assert results[-1].content.startswith("[TOOL_BLOCKED] Tool 'flaky' is blocked")
    assert results[-1].additional_kwargs[TOOL_META_KEY] == {
        "status": "error", "error_type": "blocked", "recoverable_by_model": True,
        "recommended_next_action": "summarize", "source": "tool_progress",
        "reason": "blocked_by_progress_guard"}
    per_request = [hints(request) for request in model.calls]
    assert [len(h) for h in per_request] == [0, 0, 0, 1, 1, 1, 0]
    [warning] = per_request[3]
    assert warning.content.startswith("[PROGRESS HINT] Tool 'flaky' is not making progress: "
                                      "it keeps failing (last error: transient).")
    assert is_hidden(warning) and warning.additional_kwargs[HIDDEN_KEY] == {
        "source": "tool_progress"}
    assert "blocked for the rest of this run" in per_request[5][0].content
    # Hints live in requests only: neither state nor the checkpoint holds one.
    assert not hints(state["messages"])
    assert state["messages"][-1].content == "done"


def test_an_error_a_person_must_fix_blocks_at_once(home):
    tools = Tools()
    agent, model = make_agent(home, [call("locked"), call("locked"), "done"], ON,
                              tools=tools.all())
    first, second = tool_results(invoke(agent, "sync"))
    assert first.additional_kwargs[TOOL_META_KEY]["error_type"] == "auth"
    assert second.content.startswith("[TOOL_BLOCKED]") and tools.runs["locked"] == 1
    assert "blocked for the rest of this run" in hints(model.calls[1])[0].content


def test_recoverable_errors_warn_again_but_never_block(home):
    tools = Tools()
    script = [*[call("search", q=f"q{i}") for i in range(6)], "done"]
    agent, model = make_agent(home, script, ON, tools=tools.all())
    results = tool_results(invoke(agent, "sync"))
    assert tools.runs["search"] == 6 and not any("[TOOL_BLOCKED]" in r.content for r in results)
    assert [len(hints(r)) for r in model.calls] == [0, 0, 0, 1, 1, 1, 1]


def test_a_good_result_brings_the_tool_back_to_active(home):
    tools = Tools()
    script = [call("search"), call("search"), call("search", q="good"),
              call("search"), call("search"), "done"]
    agent, model = make_agent(home, script, ON, tools=tools.all())
    invoke(agent, "sync")
    assert not any(hints(request) for request in model.calls)


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_parallel_failures_of_one_turn_count_together(home, fuse, mode):
    tools = Tools()
    script = [calls(("flaky", {}), ("flaky", {}), ("flaky", {})), "done"]
    agent, model = make_agent(home, script, ON, tools=tools.all(), fuse=fuse)
    invoke(agent, mode)
    assert tools.runs["flaky"] == 3
    assert len(hints(model.calls[1])) == 1


# -- refusals and repeats ------------------------------------------------------------------------


GUARD_LAUNCH = ("guardrails:\n  enabled: true\n  provider: allowlist\n"
                "  provider_options: {allow: [flaky, fetch, locked, search], deny: [launch]}\n")


@pytest.mark.parametrize("gate", ["authorization", "guardrail"])
@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_a_gate_outside_the_guard_consumes_no_slot(home, gate, fuse, mode):
    """A call refused outside tool_progress returns without consuming a slot.

    Positions 11 and 12, docs/chain.md#read_before_write.
    """
    tools = Tools()
    config = ON + (DENY_LAUNCH if gate == "authorization" else GUARD_LAUNCH)
    agent, model = make_agent(home, [*repeat(call("launch"), 6), "done"], config,
                              tools=tools.all(), fuse=fuse)
    results = tool_results(invoke(agent, mode))
    assert [r.additional_kwargs[TOOL_META_KEY]["error_type"] for r in results] == ["denied"] * 6
    assert [r.additional_kwargs[TOOL_META_KEY]["source"] for r in results] == [gate] * 6
    assert not any(hints(request) for request in model.calls)
    assert not any("[TOOL_BLOCKED]" in str(r.content) for r in results)
    assert "launch" not in tools.runs


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_refused_commands_do_not_block_the_shell(home, fuse, mode):
    blocked = call("bash", command="$(curl -s http://127.0.0.1:9/payload)")
    agent, model = make_agent(home, [*repeat(blocked, 6), call("bash", command="echo fine"),
                                     "done"], ON, fuse=fuse)
    results = tool_results(invoke(agent, mode))
    assert [r.additional_kwargs[TOOL_META_KEY]["source"] for r in results[:6]] == [
        "sandbox_audit"] * 6
    assert results[-1].status == "success" and "fine" in str(results[-1].content)
    assert not any(hints(request) for request in model.calls)


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_writes_refused_until_read_then_the_write_after_a_read_succeeds(home, fuse, mode):
    """The model overwrites a file it has not read, is refused five times, reads, writes."""
    from antler.plugin_api.paths import PathLayout

    paths = PathLayout(home).thread("default", "t1")
    paths.ensure_directories()
    (paths.workspace / "notes.md").write_text("alpha\n")
    write = call("write_file", path="notes.md", content="beta\n")
    script = [*repeat(write, 5), call("read_file", path="notes.md"), write, "done"]
    agent, model = make_agent(home, script, ON, fuse=fuse)
    results = tool_results(invoke(agent, mode))
    refused = results[:5]
    assert all(r.additional_kwargs[TOOL_META_KEY]["source"] == "read_before_write"
               for r in refused)
    assert results[-1].status == "success", results[-1].content
    assert (paths.workspace / "notes.md").read_text() == "beta\n"
    assert not any(hints(request) for request in model.calls)


def test_near_duplicate_successes_warn(home):
    tools = Tools()
    variants = [REPORT, REPORT + " again", REPORT.replace("risks", "risk")]
    script = [*[call("fetch", text=t) for t in variants], call("fetch", text=REPORT), "done"]
    agent, model = make_agent(home, script, ON, tools=tools.all())
    invoke(agent, "sync")
    # The 2nd, 3rd and 4th results repeat an earlier one: warned after the third repeat.
    assert [len(hints(r)) for r in model.calls] == [0, 0, 0, 0, 1]
    assert "nearly the same result" in hints(model.calls[4])[0].content


def test_short_results_are_never_called_repeats(home):
    tools = Tools()
    agent, model = make_agent(home, [*repeat(call("fetch", text="ok"), 5), "done"], ON,
                              tools=tools.all())
    invoke(agent, "sync")
    assert not any(hints(request) for request in model.calls)


# -- runs, retries, memory -----------------------------------------------------------------------


def test_each_run_starts_every_tool_active(home):
    tools = Tools()
    script = [call("locked"), call("locked"), "first done", call("locked"), "second done"]
    agent, _ = make_agent(home, script, ON, tools=tools.all())
    with agent:
        agent.invoke("go", thread_id="t1")
        state = agent.invoke("again", thread_id="t1")
    assert tools.runs["locked"] == 2  # blocked in the first run, runs again in the second
    assert not tool_results(state)[-1].content.startswith("[TOOL_BLOCKED]")


class FailOnceThenRetry(RetryOnce):
    """Outer of tool_progress: retries a model call that failed, like a provider retry layer."""

    errors = (ConnectionError,)


def provider_overloaded(messages: list[Any]) -> Any:
    raise ConnectionError("provider overloaded")


RETRY_OUTER = ("extensions:\n  middlewares:\n"
               "    - {use: 'tests.plugins.test_tool_progress:FailOnceThenRetry',"
               " name: retry_outer, after: [read_before_write], outer_of: [tool_progress]}\n")


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_a_hint_survives_a_retried_model_call(home, fuse, mode):
    tools = Tools()
    script = [*repeat(call("flaky"), 3), provider_overloaded, call("fetch"), "done"]
    agent, model = make_agent(home, script, ON + RETRY_OUTER, tools=tools.all(), fuse=fuse)
    assert_before(agent.chain, "retry_outer", "tool_progress")
    state = invoke(agent, mode)
    assert state["messages"][-1].content == "done"
    failed, retried, after = model.calls[3], model.calls[4], model.calls[5]
    assert len(hints(failed)) == len(hints(retried)) == 1  # the retry still carries it
    assert not hints(after)                                 # delivered once


def test_state_is_bounded_and_reading_creates_nothing():
    middleware = ToolProgressMiddleware(ToolProgressConfig(max_tracked_threads=2))
    for thread in ("a", "b", "c"):
        middleware._assess((thread, "r1"), "flaky", _error())
    assert len(middleware._runs) == 2 and middleware.state(("a", "r1"), "flaky") is None
    assert middleware.state(("z", "r9"), "flaky") is None and len(middleware._runs) == 2


def test_commands_are_not_assessed_and_unstamped_results_are_logged(caplog):
    middleware = ToolProgressMiddleware(ToolProgressConfig(stagnation_threshold=1))
    key = ("t", "r")
    middleware._assess(key, "tool_search", Command(update={"messages": [_error()]}))
    assert middleware.state(key, "tool_search") is None
    with caplog.at_level(logging.WARNING):
        middleware._assess(key, "bare", ToolMessage("Error: x", tool_call_id="c", name="bare"))
    assert "outer of tool_error_handling" in caplog.text
    assert middleware.state(key, "bare") is None


def test_exempt_tools_are_never_tracked(home):
    tools = Tools()
    config = ("tool_progress: {enabled: true, exempt_tools: [flaky]}\n"
              "loop_detection: {enabled: false}\n")
    agent, model = make_agent(home, [*repeat(call("flaky"), 5), "done"], config,
                              tools=tools.all())
    invoke(agent, "sync")
    assert tools.runs["flaky"] == 5 and not any(hints(r) for r in model.calls)


def _error() -> ToolMessage:
    return ToolMessage("Error: timeout", tool_call_id="c", name="flaky", status="error",
                       additional_kwargs={TOOL_META_KEY: {
                           "status": "error", "error_type": "transient",
                           "recoverable_by_model": False,
                           "recommended_next_action": "try_alternative", "source": "tool"}})


def test_without_assessments_nothing_is_injected_but_blocking_holds(home):
    tools = Tools()
    config = "tool_progress: {enabled: true, inject_assessment: false}\n"
    agent, model = make_agent(home, [call("locked"), call("locked"), "done"], config,
                              tools=tools.all())
    _first, second = tool_results(invoke(agent, "sync"))
    assert second.content.startswith("[TOOL_BLOCKED]") and tools.runs["locked"] == 1
    assert not any(hints(request) for request in model.calls)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_gate_inside_the_guard_still_counts(home, fuse):
    """skill_tool_policy sits inside tool_progress: its refusals reach the guard and count."""
    skills = SkillsRegistry([Path(__file__).parent.parent / "fixtures" / "skills"])
    agent, model = make_agent(home, [*repeat(call("bash", command="ls"), 6), "done"], ON,
                              fuse=fuse, services={SKILLS: skills})
    with agent:
        results = tool_results(agent.invoke("/data-report summarize", thread_id="t1"))
    sources = [r.additional_kwargs[TOOL_META_KEY]["source"] for r in results]
    assert sources == ["skill_tool_policy"] * 5 + ["tool_progress"]
    assert "its calls are refused (denied)" in hints(model.calls[3])[0].content
