"""antler.runtime.agent.create_agent: delegation through the subagent chain, tracing, checkpoints.

These tests use a registry with only the platform's points and slots plus the
plugins each test declares, so they check the factory itself; the built-in
plugins have their own tests under tests/plugins.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain.tools import tool
from langchain_core.messages import HumanMessage

from antler.chain.config import parse_config
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.manifest import Manifest, builtin_manifest
from antler.plugin_api.registry import PluginRegistry
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.tracing import Tracer


def platform_only() -> PluginRegistry:
    manifest = builtin_manifest()
    return PluginRegistry.from_manifests([Manifest(
        source="platform", points=manifest.points, slots=manifest.slots,
        default_slot=manifest.default_slot)])


class Recorder(AgentMiddleware):
    """Records the chain it was built for on every model call."""

    seen: list[str] = []

    def __init__(self, label: str = "lead") -> None:
        super().__init__()
        self.label = label

    def before_model(self, state: Any, runtime: Any) -> None:
        Recorder.seen.append(self.label)
        return None


@tool
def echo(text: str) -> str:
    """Echo the text back."""
    return text


def test_task_tool_delegates_to_a_subagent_built_from_the_subagent_chain(tmp_path):
    Recorder.seen = []
    registry = platform_only()
    config = parse_config(
        "extensions:\n  middlewares:\n"
        "    - {use: 'tests.runtime.test_agent_factory:Recorder', name: lead_recorder,"
        " chains: [lead], config: {label: lead}}\n"
        "    - {use: 'tests.runtime.test_agent_factory:Recorder', name: sub_recorder,"
        " chains: [subagent], config: {label: subagent}}\n",
        registry,
    )
    lead = ScriptedChatModel([
        {"content": "", "tool_calls": [
            {"name": "task", "args": {"description": "d", "prompt": "find the answer"}}]},
        "the lead's final answer",
    ])
    sub = ScriptedChatModel(["forty-two"])
    with create_agent(config, registry=registry, model=lead, subagent_model=sub,
                      checkpointer="memory", base_dir=tmp_path,
                      runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        state = agent.invoke("go", thread_id="t1")
    result = [m for m in state["messages"] if getattr(m, "name", None) == "task"]
    assert result and result[0].content == "forty-two"
    assert result[0].additional_kwargs["subagent_token_usage"]["output_tokens"] > 0
    # The subagent saw the prompt as its own user message, not the lead's history.
    assert [m.content for m in sub.calls[0] if m.type == "human"] == ["find the answer"]
    # Each chain ran its own recorder: lead twice (two model calls), subagent once.
    assert Recorder.seen == ["lead", "subagent", "lead"]


def test_task_tool_is_bound_only_when_subagents_are_enabled(tmp_path):
    for enabled in (False, True):
        model = ScriptedChatModel(["hi"])
        with create_agent(registry=platform_only(), model=model, tools=[echo],
                          checkpointer=None, base_dir=tmp_path,
                          runtime=RuntimeOptions(subagents_enabled=enabled)) as agent:
            agent.invoke("hello", thread_id="t1")
        expected = {"echo", "task"} if enabled else {"echo"}
        assert set(model.requests[0].tool_names) == expected


def test_tracer_records_hooks_model_calls_and_tools_in_order(tmp_path):
    registry = platform_only()
    config = parse_config(
        "extensions: {middlewares: ['tests.runtime.test_agent_factory:Recorder']}", registry)
    tracer = Tracer()
    model = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "echo", "args": {"text": "hi"}}]}, "done"])
    with create_agent(config, registry=registry, model=model, tools=[echo],
                      checkpointer=None, base_dir=tmp_path, tracer=tracer) as agent:
        agent.invoke("hello", thread_id="t1")
    labels = [(e.plugin, e.hook) for e in tracer.events]
    assert labels == [
        ("recorder", "before_model"), ("trace_probe", "model"),
        ("trace_probe", "tool echo"),
        ("recorder", "before_model"), ("trace_probe", "model"),
    ]
    rendered = tracer.render()
    assert "AIMessage calling echo" in rendered and "success: 'hi'" in rendered


def test_sqlite_checkpoint_resumes_a_thread_in_a_new_agent(tmp_path):
    registry = platform_only()
    with create_agent(registry=registry, model=ScriptedChatModel(["first reply"]),
                      base_dir=tmp_path) as agent:
        agent.invoke("first", thread_id="t1")
    assert (tmp_path / "checkpoints.sqlite").exists()
    model = ScriptedChatModel(["second reply"])
    with create_agent(registry=registry, model=model, base_dir=tmp_path) as agent:
        state = agent.invoke("second", thread_id="t1")
    assert [m.content for m in state["messages"]] == [
        "first", "first reply", "second", "second reply"]
    # The second process's model saw the first exchange: the thread resumed.
    assert [m.content for m in model.calls[0] if m.type != "system"][:2] == [
        "first", "first reply"]


def test_unknown_checkpointer_kind_is_treated_as_a_path(tmp_path):
    target = tmp_path / "custom.sqlite"
    with create_agent(registry=platform_only(), model=ScriptedChatModel(["ok"]),
                      checkpointer=target, base_dir=tmp_path) as agent:
        agent.invoke("x", thread_id="t1")
    assert target.exists()


@pytest.mark.parametrize("bad", ["../escape", "a/b", ""])
def test_hostile_thread_ids_are_refused_before_anything_is_written(tmp_path, bad):
    from antler.plugin_api.paths import PathLayout

    with pytest.raises(ValueError):
        PathLayout(tmp_path).thread("default", bad)
    assert not any(tmp_path.iterdir())


class IdentityProbe(AgentMiddleware):
    """Records the run identity each model call of its chain sees."""

    seen: list[tuple[bool, tuple[str, ...]]] = []

    def before_model(self, state: Any, runtime: Any) -> None:
        from antler.contracts.runcontext import run_context

        context = run_context(runtime)
        IdentityProbe.seen.append((context.is_internal, context.roles))
        return None


def test_a_subagent_inherits_the_callers_identity_and_cannot_widen_it(tmp_path):
    IdentityProbe.seen = []
    registry = platform_only()
    config = parse_config(
        "extensions: {middlewares: ['tests.runtime.test_agent_factory:IdentityProbe']}", registry)
    lead = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "task", "args": {"description": "d",
                                                                  "prompt": "p"}}]},
        "done"])
    with create_agent(config, registry=registry, model=lead,
                      subagent_model=ScriptedChatModel(["sub"]), checkpointer=None,
                      base_dir=tmp_path, runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        agent.invoke("go", thread_id="t1", roles=["viewer"], is_internal=False)
    # lead, subagent, lead: the subagent is not promoted to an internal caller.
    assert IdentityProbe.seen == [(False, ("viewer",))] * 3


def test_roles_given_as_one_string_are_refused():
    from antler.contracts.runcontext import RunContext

    with pytest.raises(TypeError, match=r"roles=\['admin'\]"):
        RunContext(roles="admin")  # type: ignore[arg-type]


def test_a_delegated_task_writes_no_checkpoints_into_the_lead_thread(tmp_path):
    lead = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "task", "args": {"description": "d",
                                                                  "prompt": "p"}}]},
        "done"])
    with create_agent(registry=platform_only(), model=lead,
                      subagent_model=ScriptedChatModel(["sub"]), checkpointer="memory",
                      base_dir=tmp_path, runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        agent.invoke("go", thread_id="t1")
        namespaces = {c.config["configurable"].get("checkpoint_ns", "")
                      for c in agent.checkpointer.list(None)}
    assert namespaces == {""}  # only the lead graph's own checkpoints


def test_the_config_supplies_model_storage_and_capability_defaults(tmp_path):
    registry = platform_only()
    script = tmp_path / "script.yaml"
    script.write_text("- configured reply\n", encoding="utf-8")
    config = parse_config(
        f"models: {{default: 'scripted:{script}', supports_vision: true}}\n"
        f"storage: {{base_dir: '{tmp_path / 'home'}', checkpointer: memory}}\n", registry)
    with create_agent(config, registry=registry) as agent:
        state = agent.invoke("hi", thread_id="t1")
    assert state["messages"][-1].content == "configured reply"
    assert agent.base_dir == tmp_path / "home"
    assert type(agent.checkpointer).__name__ == "InMemorySaver"
    assert agent.chain.plan.runtime.supports_vision is True


@pytest.mark.parametrize("files", [[{"filename": ".secret"}], [{"filename": "a/b.txt"}],
                                   "notes.txt"])
def test_a_refused_upload_fails_before_anything_is_saved_to_the_thread(tmp_path, files):
    from antler.plugin_api.uploads import UploadError

    with create_agent(model=ScriptedChatModel(["never"]), base_dir=tmp_path,
                      checkpointer="memory") as agent:
        message = HumanMessage("read it", additional_kwargs={"files": files})
        with pytest.raises(UploadError, match=r"additional_kwargs\['files'\]"):
            agent.invoke(message, thread_id="t1")
        assert agent.state("t1") == {}  # the question was not saved without an answer


class DeclaresNoSuchDeltaChannel(AgentMiddleware):
    """Names a channel the graph does not have: delta mode refuses it after compiling."""

    antler_delta_channels = ("no_such_channel",)


def _open_descriptors(path: Any) -> int:
    """How many of this process's file descriptors are open on `path`."""
    import os

    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            continue
    return count


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_build_that_fails_after_the_storage_opened_closes_it(tmp_path, fuse):
    """The graph step fails (a delta channel that is no reducer channel) after the
    checkpoint database was opened: the database is closed again, not left open."""
    from antler.errors import BuildError

    config = parse_config("storage: {messages_channel: delta}\n", platform_only())
    with pytest.raises(BuildError, match="no_such_channel") as failed:
        create_agent(config, model=ScriptedChatModel(["ok"]), registry=platform_only(),
                     base_dir=tmp_path, checkpointer="sqlite", fuse=fuse,
                     custom_middlewares=[DeclaresNoSuchDeltaChannel()])
    # `failed` holds the traceback, and with it every frame of the build: what was
    # left open would still be open here.
    assert failed.traceback
    assert _open_descriptors(tmp_path / "checkpoints.sqlite") == 0
