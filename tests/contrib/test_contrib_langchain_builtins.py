"""LangChain's built-in middlewares as contrib plugins, each through a real agent graph."""

from __future__ import annotations

import pytest
import yaml
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

from antler.chain.config import parse_config
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

LS = {"name": "ls", "args": {"path": "/mnt/user-data"}}


@pytest.fixture(scope="module")
def registry():
    return discover()


def agent(registry, tmp_path, config: str, model, fuse: bool, **kwargs):
    return create_agent(parse_config(config, registry), model=model, registry=registry,
                        base_dir=tmp_path, checkpointer="memory", fuse=fuse, **kwargs)


def answer(state) -> str:
    return next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage)).text


def test_every_builtin_has_its_documented_placement(registry):
    from antler.chain import plan_chain
    from antler.plugin_api.context import RuntimeOptions

    config = parse_config("""
model_fallback: {enabled: true, models: [scripted]}
model_retry: {enabled: true}
pii: {enabled: true}
tool_retry: {enabled: true}
context_editing: {enabled: true}
llm_tool_selector: {enabled: true}
model_call_limit: {enabled: true, run_limit: 5}
tool_call_limit: {enabled: true, run_limit: 5}
human_in_the_loop: {enabled: true, interrupt_on: {bash: true}}
""", registry)
    order = plan_chain(config, "lead", RuntimeOptions(), registry=registry).order
    at = order.index
    assert at("llm_error_handling") < at("model_fallback") < at("model_retry")
    assert at("tool_error_handling") < at("tool_retry")
    assert at("loop_detection") < at("model_call_limit") < at("system_message_coalescing")
    assert at("tool_call_limit") < at("system_message_coalescing")
    assert at("safety_finish_reason") > at("human_in_the_loop") < at("clarification")
    assert at("skill_tool_policy") < at("llm_tool_selector")


@pytest.mark.parametrize("fuse", [True, False])
def test_model_fallback_answers_from_the_next_model(registry, tmp_path, fuse):
    backup = tmp_path / "backup.yaml"
    backup.write_text(yaml.safe_dump(["From the backup model."]))
    config = (f"models:\n  named:\n    backup: {{use: 'scripted:{backup}'}}\n"
              "model_fallback: {enabled: true, models: [backup]}\n")
    primary = ScriptedChatModel([{"error": "invalid_request"}])
    with agent(registry, tmp_path, config, primary, fuse) as built:
        state = built.invoke("hello", thread_id="t")
    assert answer(state) == "From the backup model."
    assert primary.position == 1


@pytest.mark.parametrize("fuse", [True, False])
def test_model_retry_retries_inside_llm_error_handling(registry, tmp_path, fuse, caplog):
    model = ScriptedChatModel([{"error": "server"}, "Second try worked."])
    config = "model_retry: {enabled: true, max_retries: 2, initial_delay: 0, jitter: false}\n"
    with caplog.at_level("WARNING"), agent(registry, tmp_path, config, model, fuse) as built:
        state = built.invoke("hello", thread_id="t")
    assert answer(state) == "Second try worked." and model.position == 2
    assert "model call failed" not in caplog.text  # llm_error_handling never saw the error


@pytest.mark.parametrize("fuse", [True, False])
def test_pii_redacts_the_users_email_before_the_model_sees_it(registry, tmp_path, fuse):
    model = ScriptedChatModel(["Noted."])
    config = "pii: {enabled: true, pii_type: email, strategy: redact}\n"
    with agent(registry, tmp_path, config, model, fuse) as built:
        built.invoke("write to jane.doe@example.com today", thread_id="t")
    sent = " ".join(str(m.text) for m in model.requests[0].messages)
    assert "jane.doe@example.com" not in sent and "[REDACTED_EMAIL]" in sent


@pytest.mark.parametrize("fuse", [True, False])
def test_tool_retry_runs_a_failing_tool_again(registry, tmp_path, fuse):
    calls = {"n": 0}

    @tool
    def flaky(text: str) -> str:
        """Fails the first time."""
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("temporary")
        return f"ok {text}"

    model = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "flaky", "args": {"text": "x"}}]}, "done"])
    config = "tool_retry: {enabled: true, max_retries: 2, initial_delay: 0, jitter: false}\n"
    with agent(registry, tmp_path, config, model, fuse, tools=[flaky]) as built:
        state = built.invoke("go", thread_id="t")
    results = [m.content for m in state["messages"] if isinstance(m, ToolMessage)]
    assert results == ["ok x"] and calls["n"] == 2


@pytest.mark.parametrize("fuse", [True, False])
def test_context_editing_clears_old_tool_results_from_the_request(registry, tmp_path, fuse):
    model = ScriptedChatModel([{"content": "", "tool_calls": [LS]},
                               {"content": "", "tool_calls": [LS]}, "done"])
    config = "context_editing: {enabled: true, trigger: 10, keep: 1}\n"
    with agent(registry, tmp_path, config, model, fuse) as built:
        state = built.invoke("list twice", thread_id="t")
    last = [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert last[0].content == "[cleared]" and last[-1].content != "[cleared]"
    kept = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert all(m.content != "[cleared]" for m in kept)  # the request only, never the state


@pytest.mark.parametrize("fuse", [True, False])
def test_llm_tool_selector_offers_only_the_selected_tools(registry, tmp_path, fuse):
    selector = tmp_path / "selector.yaml"
    selector.write_text(yaml.safe_dump([{"content": "", "tool_calls": [
        {"name": "ToolSelectionResponse", "args": {"tools": ["ls"]}}]}]))
    model = ScriptedChatModel(["done"])
    config = f"llm_tool_selector: {{enabled: true, model: 'scripted:{selector}'}}\n"
    with agent(registry, tmp_path, config, model, fuse) as built:
        built.invoke("list files", thread_id="t")
    offered = set(model.requests[0].tool_names)
    assert "ls" in offered and "bash" not in offered and "write_file" not in offered


@pytest.mark.parametrize("fuse", [True, False])
def test_model_call_limit_ends_the_run_at_the_limit(registry, tmp_path, fuse):
    model = ScriptedChatModel([{"content": "", "tool_calls": [LS]}, "never reached"])
    config = "model_call_limit: {enabled: true, run_limit: 1}\n"
    with agent(registry, tmp_path, config, model, fuse) as built:
        state = built.invoke("go", thread_id="t")
    assert model.position == 1
    assert "limit" in answer(state).lower()


@pytest.mark.parametrize("fuse", [True, False])
def test_tool_call_limit_refuses_calls_past_the_limit(registry, tmp_path, fuse):
    model = ScriptedChatModel([{"content": "", "tool_calls": [LS, LS]}, "done"])
    config = "tool_call_limit: {enabled: true, run_limit: 1}\n"
    with agent(registry, tmp_path, config, model, fuse) as built:
        state = built.invoke("go", thread_id="t")
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 2
    assert sum("limit" in str(m.content).lower() for m in results) == 1


@pytest.mark.parametrize("fuse", [True, False])
def test_human_in_the_loop_pauses_and_resumes(registry, tmp_path, fuse):
    write = {"name": "bash", "args": {"command": "echo yes > /mnt/user-data/outputs/h.txt"}}
    model = ScriptedChatModel([{"content": "", "tool_calls": [write]}, "written"])
    config = "human_in_the_loop: {enabled: true, interrupt_on: {bash: true}}\n"
    with agent(registry, tmp_path, config, model, fuse) as built:
        built.invoke("write it", thread_id="t")
        pending = built.graph.get_state(built.run_config("t")).interrupts
        assert pending and pending[0].value["action_requests"][0]["name"] == "bash"
        state = built.invoke(Command(resume={"decisions": [{"type": "approve"}]}),
                             thread_id="t")
    assert answer(state) == "written"
    assert (tmp_path / "users/default/threads/t/user-data/outputs/h.txt").read_text() == "yes\n"


@pytest.mark.parametrize(("section", "message"), [
    ("model_fallback: {enabled: true}", "model_fallback needs `models`"),
    ("model_call_limit: {enabled: true}", "needs `thread_limit` or `run_limit`"),
    ("human_in_the_loop: {enabled: true}", "human_in_the_loop needs `interrupt_on`"),
])
def test_an_incomplete_section_is_a_clear_build_error(registry, tmp_path, section, message):
    from antler.errors import AntlerError

    with pytest.raises(AntlerError, match=message):
        agent(registry, tmp_path, section + "\n", ScriptedChatModel(["x"]), True)
