"""The `task` result of a delegation: text and metadata from one source
(docs/chain.md#tool_error_handling).

A failed delegation reads ``Task failed. Error: <error>`` and carries the
``antler_tool_meta`` classified from that same failure, beside
``subagent_status: failed``; a completed one carries the answer and a success stamp.
Through real lead and subagent graphs, fused and unfused.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManager
from langchain_core.messages import ToolMessage

from antler.chain.config import parse_config
from antler.contracts.toolmeta import TOOL_META_KEY
from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

FUSE = pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
DELEGATE = {"content": "", "tool_calls": [{"name": "task",
                                           "args": {"description": "research", "prompt": "p"}}]}


def delegate(tmp_path: Any, sub_script: list[Any], fuse: bool) -> ToolMessage:
    lead = ScriptedChatModel([DELEGATE, "the lead goes on"])
    sub = ScriptedChatModel(sub_script)
    services = {TITLE_MODEL: ScriptedChatModel(["t"] * 5),
                MEMORY_MODEL: ScriptedChatModel(["{}"] * 5)}
    config = "llm_error_handling: {retry_base_delay_ms: 0, retry_cap_delay_ms: 0}\n"
    with create_agent(parse_config(config, discover()), model=lead, subagent_model=sub,
                      base_dir=tmp_path, checkpointer="memory", fuse=fuse, services=services,
                      runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        state = agent.invoke("delegate", thread_id="t")
    assert state["messages"][-1].content == "the lead goes on"
    [result] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    return result


@FUSE
@pytest.mark.parametrize(("failure", "error_type", "recoverable", "action", "says"), [
    ({"error": "auth"}, "auth", False, "stop", "rejected the credentials"),
    ({"error": "quota"}, "rate_limited", False, "summarize", "quota or billing limit"),
    ({"error": "timeout"}, "transient", False, "try_alternative", "kept failing"),
    ({"error": "generic"}, "unknown", True, "try_alternative", "was not retried"),
])
def test_a_failed_delegation_says_task_failed_and_is_classified(
        tmp_path, fuse, failure, error_type, recoverable, action, says):
    result = delegate(tmp_path, [failure] * 3, fuse)
    assert result.status == "error"
    assert result.content.startswith("Task failed. Error: The model ")
    assert says in result.content
    fields = result.additional_kwargs
    assert fields["subagent_status"] == "failed"
    assert fields["subagent_stop_reason"] == "error_fallback"
    assert fields["subagent_result_brief"] == result.content
    assert fields[TOOL_META_KEY] == {
        "status": "error", "error_type": error_type, "recoverable_by_model": recoverable,
        "recommended_next_action": action, "source": "task"}


@FUSE
def test_a_subagent_that_raises_fails_the_task_with_the_exception(tmp_path, fuse):
    """The subagent's scripted model runs out of turns: an error of the program, raised."""
    result = delegate(tmp_path, [DELEGATE], fuse)  # its one turn delegates; then nothing
    assert result.content.startswith("Task failed. Error: ")
    fields = result.additional_kwargs
    assert fields["subagent_status"] == "failed"
    assert fields[TOOL_META_KEY]["status"] == "error"
    assert fields[TOOL_META_KEY]["source"] == "task"
    assert fields["subagent_result_brief"] == result.content


@FUSE
def test_a_completed_delegation_carries_the_answer_and_a_success_stamp(tmp_path, fuse):
    result = delegate(tmp_path, ["Error: none of the files were relevant"], fuse)
    assert result.status == "success"
    assert result.content == "Error: none of the files were relevant"
    fields = result.additional_kwargs
    assert fields["subagent_status"] == "completed"
    # The answer's wording does not turn a completed task into an error.
    assert fields[TOOL_META_KEY] == {
        "status": "success", "error_type": None, "recoverable_by_model": True,
        "recommended_next_action": "continue", "source": "task"}


def test_the_model_sees_the_task_tool_as_declared():
    """Its name, description and two arguments; the injected runtime is not shown."""
    from antler.runtime.delegation import make_task_tool

    task = make_task_tool(lambda: None)
    assert task.name == "task"
    assert task.description == ("Delegate a self-contained task to a subagent and get its "
                                "final answer back.")
    schema = task.tool_call_schema.model_json_schema()
    assert schema["required"] == ["description", "prompt"]
    assert schema["properties"] == {
        "description": {"description": "A short (3-5 word) description of the task.",
                        "title": "Description", "type": "string"},
        "prompt": {"description": "Everything the subagent needs to know to do the task "
                                  "alone.", "title": "Prompt", "type": "string"}}
    assert task.metadata == {"antler": {"sandbox": False, "remote_content": False,
                                        "delegation": True}}


def _echo(messages: list[Any]) -> str:
    """The subagent's answer names the job its prompt asked for."""
    [job] = [word for m in messages for word in str(m.content).split() if word.startswith("job-")]
    return f"finished {job}"


@FUSE
def test_parallel_delegations_each_run_their_own_subagent_run(tmp_path, fuse):
    """Two `task` calls of one reply run at once on the one subagent (and its one run
    config): each answer is its own prompt's."""
    calls = [{"name": "task", "args": {"description": f"job {n}", "prompt": f"Do job-{n}"}}
             for n in (1, 2)]
    lead = ScriptedChatModel([{"content": "", "tool_calls": calls}, "both done"])
    sub = ScriptedChatModel([_echo, _echo])
    services = {TITLE_MODEL: ScriptedChatModel(["t"] * 5),
                MEMORY_MODEL: ScriptedChatModel(["{}"] * 5)}
    with create_agent(parse_config("", discover()), model=lead, subagent_model=sub,
                      base_dir=tmp_path, checkpointer="memory", fuse=fuse, services=services,
                      runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        state = agent.invoke("delegate twice", thread_id="t")
    results = {m.additional_kwargs["task_description"]: m.content
               for m in state["messages"] if isinstance(m, ToolMessage)}
    assert results == {"job 1": "finished job-1", "job 2": "finished job-2"}
    assert len(sub.requests) == 2


class _ToolRuns(BaseCallbackHandler):
    """A tracer's view of a run: each tool run's name, and every run's parent."""

    def __init__(self) -> None:
        self.tools: dict[Any, str] = {}
        self.parents: dict[Any, Any] = {}
        self.models: list[Any] = []

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: Any,
                      parent_run_id: Any = None, **kwargs: Any) -> None:
        self.tools[run_id] = serialized["name"]
        self.parents[run_id] = parent_run_id

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any,
                       parent_run_id: Any = None, **kwargs: Any) -> None:
        self.parents[run_id] = parent_run_id

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any,
                            parent_run_id: Any = None, **kwargs: Any) -> None:
        self.parents[run_id] = parent_run_id
        self.models.append(run_id)

    def ancestors(self, run_id: Any) -> list[Any]:
        found = []
        while (run_id := self.parents.get(run_id)) is not None:
            found.append(run_id)
        return found


def _delegating_agent(tmp_path: Any, fuse: bool, calls: list[dict[str, Any]],
                      sub_script: list[Any]) -> Any:
    lead = ScriptedChatModel([{"content": "", "tool_calls": calls}, "the lead goes on"] * 2)
    services = {TITLE_MODEL: ScriptedChatModel(["t"] * 5),
                MEMORY_MODEL: ScriptedChatModel(["{}"] * 5)}
    return create_agent(parse_config("", discover()), model=lead,
                        subagent_model=ScriptedChatModel(sub_script), base_dir=tmp_path,
                        checkpointer="memory", fuse=fuse, services=services,
                        runtime=RuntimeOptions(subagents_enabled=True))


def _results(state: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(m.status, m.content, m.additional_kwargs.get("subagent_status"))
            for m in state["messages"] if isinstance(m, ToolMessage)]


@FUSE
def test_the_task_call_runs_as_a_tool_run_exactly_when_something_observes_it(
        tmp_path, fuse, monkeypatch):
    """Unobserved, the call skips LangChain's tool run; with a handler, the handler sees
    the `task` tool run with the subagent's model call inside it. The answer is the same."""
    ran = []  # the tool runs LangChain starts, handlers or not
    start = CallbackManager.on_tool_start
    monkeypatch.setattr(CallbackManager, "on_tool_start", lambda self, serialized, *a, **k: (
        ran.append(serialized["name"]), start(self, serialized, *a, **k))[1])
    calls = [{"name": "task", "args": {"description": "research", "prompt": "Do job-1"}}]
    with _delegating_agent(tmp_path, fuse, calls, [_echo, _echo]) as agent:
        quiet = agent.invoke("delegate", thread_id="t1")
        assert "task" not in ran
        tracer = _ToolRuns()
        observed = agent.graph.invoke(
            agent.input("delegate"), context=agent.context("t2"),
            config={**agent.run_config("t2"), "callbacks": [tracer]})
    assert ran.count("task") == 1
    assert _results(quiet) == _results(observed) == [
        ("success", "finished job-1", "completed")]
    [task_run] = [run_id for run_id, name in tracer.tools.items() if name == "task"]
    assert any(task_run in tracer.ancestors(model) for model in tracer.models)


@FUSE
def test_an_invalid_task_call_is_refused_alike_observed_or_not(tmp_path, fuse):
    calls = [{"name": "task", "args": {"description": 7}}]  # no prompt, a number
    with _delegating_agent(tmp_path, fuse, calls, []) as agent:
        quiet = agent.invoke("delegate", thread_id="t1")
        observed = agent.graph.invoke(
            agent.input("delegate"), context=agent.context("t2"),
            config={**agent.run_config("t2"), "callbacks": [_ToolRuns()]})
    [(status, content, _)] = _results(quiet)
    assert status == "error" and "prompt" in content and "description" in content
    assert _results(quiet) == _results(observed)
