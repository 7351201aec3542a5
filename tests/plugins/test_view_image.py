"""view_image: confined image reads, one hidden image message per call, and no payload kept."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.types import Command

from antler.chain.config import parse_config
from antler.contracts.messages import HIDDEN_KEY, is_hidden
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.paths import PathLayout
from antler.plugin_api.registry import discover
from antler.plugins.view_image.config import ViewImageConfig
from antler.plugins.view_image.middleware import (
    INJECTED_ID_PREFIX,
    INJECTED_MARKER,
    ViewImageMiddleware,
    build,
    image_message,
    is_injected,
    merge_viewed_images,
)
from antler.plugins.view_image.tool import (
    STATE_KEY,
    TOOL_METADATA,
    TOOL_NAME,
    ImageRefused,
    load_image,
    make_tool,
    mapper_from_thread_data,
    sniff_mime_type,
)
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

QUIET = "title: {enabled: false}\nmemory: {enabled: false}\n"

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 20
GIF = b"GIF89a\x01\x00\x01\x00\x80\x00\x00" + b"\x00" * 10
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8 " + b"\x00" * 14


# -- reading images ------------------------------------------------------------------------


@pytest.mark.parametrize("data, mime_type", [
    (PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (b"GIF87a" + b"\0" * 8,
                                                                   "image/gif"),
    (WEBP, "image/webp"), (b"RIFF\0\0\0\0WAVEfmt ", None), (b"hello, world", None),
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", None), (b"", None),
])
def test_mime_type_comes_from_magic_bytes(data, mime_type):
    assert sniff_mime_type(data) == mime_type


@pytest.fixture
def thread(tmp_path):
    paths = PathLayout(tmp_path / "home").thread("default", "t1")
    paths.ensure_directories()
    return paths


@pytest.fixture
def mapper(thread):
    return mapper_from_thread_data(thread.as_state())


def test_images_are_read_through_the_thread_paths(thread, mapper):
    (thread.uploads / "photo.png").write_bytes(PNG)
    (thread.workspace / "chart.gif").write_bytes(GIF)
    virtual, image = load_image(mapper, "/mnt/user-data/uploads/photo.png")
    assert virtual == "/mnt/user-data/uploads/photo.png"
    assert image == {"base64": base64.b64encode(PNG).decode(), "mime_type": "image/png"}
    # Relative paths are relative to the workspace, like every file tool.
    assert load_image(mapper, "chart.gif")[0] == "/mnt/user-data/workspace/chart.gif"


@pytest.mark.parametrize("path", [
    "/mnt/user-data/../../../etc/passwd", "/mnt/user-data/uploads/../../secret.png",
    "../../outside.png", "/etc/passwd", "/mnt/user-data/uploads/\x00.png",
])
def test_paths_leaving_the_thread_are_refused(mapper, path):
    with pytest.raises(ImageRefused, match="Refusing"):
        load_image(mapper, path)


def test_symlinks_pointing_outside_are_refused(tmp_path, thread, mapper):
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)
    os.symlink(secret, thread.uploads / "link.png")
    with pytest.raises(ImageRefused, match="symlink"):
        load_image(mapper, "/mnt/user-data/uploads/link.png")


def test_missing_files_directories_and_non_images_are_refused(thread, mapper):
    (thread.uploads / "notes.png").write_text("not really a png")
    cases = {"/mnt/user-data/uploads/none.png": "No file",
             "/mnt/user-data/uploads": "not a file",
             "/mnt/user-data/uploads/notes.png": "not a PNG, JPEG, GIF or WebP",
             "": "Pass image_path", None: "Pass image_path"}
    for path, message in cases.items():
        with pytest.raises(ImageRefused, match=message):
            load_image(mapper, path)


def test_files_over_the_cap_are_refused(thread, mapper):
    (thread.uploads / "big.png").write_bytes(PNG + b"\0" * 100)
    with pytest.raises(ImageRefused, match="larger than the 64 bytes limit"):
        load_image(mapper, "/mnt/user-data/uploads/big.png", max_bytes=64)
    assert load_image(mapper, "/mnt/user-data/uploads/big.png", max_bytes=len(PNG) + 100)


@pytest.mark.parametrize("thread_data", [
    None, {}, {"workspace_path": "/a/workspace"},
    {"workspace_path": "/a/workspace", "uploads_path": "/b/uploads",
     "outputs_path": "/a/outputs"},
    {"workspace_path": "rel/workspace", "uploads_path": "rel/uploads",
     "outputs_path": "rel/outputs"},
])
def test_thread_paths_must_be_present_and_consistent(thread_data):
    with pytest.raises(ImageRefused, match="thread"):
        mapper_from_thread_data(thread_data)


def test_the_tool_answers_with_a_command_or_an_error_message(thread):
    (thread.uploads / "a.png").write_bytes(PNG)
    view = make_tool(SimpleNamespace(config=ViewImageConfig(max_image_bytes=len(PNG))))
    runtime = SimpleNamespace(state={"thread_data": thread.as_state()}, tool_call_id="c1")
    result = view.func(image_path="/mnt/user-data/uploads/a.png", runtime=runtime)
    assert isinstance(result, Command)
    assert result.update[STATE_KEY] == {"/mnt/user-data/uploads/a.png": {
        "base64": base64.b64encode(PNG).decode(), "mime_type": "image/png"}}
    [message] = result.update["messages"]
    assert message.tool_call_id == "c1" and message.status == "success"

    tight = make_tool(SimpleNamespace(config=ViewImageConfig(max_image_bytes=10)))
    refused = tight.func(image_path="/mnt/user-data/uploads/a.png", runtime=runtime)
    assert isinstance(refused, ToolMessage) and refused.status == "error"
    assert "limit" in refused.content
    no_paths = view.func(image_path="a.png", runtime=SimpleNamespace(state={},
                                                                     tool_call_id="c2"))
    assert no_paths.status == "error" and "not available" in no_paths.content


def test_the_tool_is_tagged_as_sandbox_local_content():
    view = make_tool()
    assert view.name == TOOL_NAME
    assert view.metadata == {"antler": {"sandbox": True, "remote_content": False}}
    assert view.metadata is not TOOL_METADATA
    assert list(view.args) == ["image_path"]  # the runtime is injected, not model-visible


def test_the_size_cap_is_validated():
    assert ViewImageConfig().max_image_bytes == 5 * 1024 * 1024
    with pytest.raises(ValueError):
        ViewImageConfig(max_image_bytes=0)


# -- the middleware on its own -------------------------------------------------------------


def image(mime_type: str = "image/png") -> dict[str, str]:
    return {"base64": "AAAA", "mime_type": mime_type}


def test_viewed_images_merge_and_an_empty_update_clears():
    assert merge_viewed_images(None, {"a": image()}) == {"a": image()}
    assert merge_viewed_images({"a": image()}, {"b": image()}) == {"a": image(), "b": image()}
    assert merge_viewed_images({"a": image()}, {}) == {}
    assert merge_viewed_images({"a": image()}, None) == {"a": image()}


def view_call(call_id: str, path: str = "/mnt/user-data/uploads/a.png") -> dict[str, Any]:
    return {"name": TOOL_NAME, "args": {"image_path": path}, "id": call_id, "type": "tool_call"}


def test_injects_once_every_view_image_call_has_its_result():
    middleware = build(None)  # type: ignore[arg-type]
    ai = AIMessage("", id="ai-1", tool_calls=[view_call("v1"), view_call("v2"),
                                              {"name": "ls", "args": {}, "id": "l1"}])
    first = ToolMessage("ok", tool_call_id="v1", id="t1")
    images = {"/mnt/user-data/uploads/a.png": image(), "/mnt/user-data/uploads/b.gif":
              image("image/gif")}
    pending = {"messages": [HumanMessage("hi"), ai, first], STATE_KEY: images}
    assert middleware.before_model(pending, None) is None

    ready = {**pending, "messages": [*pending["messages"],
                                     ToolMessage("ok", tool_call_id="v2", id="t2")]}
    [injected] = middleware.before_model(ready, None)["messages"]
    assert injected.id == INJECTED_ID_PREFIX + "ai-1"
    assert injected.additional_kwargs[INJECTED_MARKER] == {
        "for_message": "ai-1", "paths": list(images)}
    urls = [b["image_url"]["url"] for b in injected.content if b["type"] == "image_url"]
    assert urls == ["data:image/png;base64,AAAA", "data:image/gif;base64,AAAA"]
    assert asyncio.run(middleware.abefore_model(ready, None))["messages"][0].id == injected.id

    # Already injected for this assistant message: never a second time.
    again = {**ready, "messages": [*ready["messages"], injected]}
    assert middleware.before_model(again, None) is None


def test_nothing_is_injected_without_images_or_view_image_calls():
    middleware = ViewImageMiddleware()
    ai = AIMessage("", id="ai-1", tool_calls=[view_call("v1")])
    failed = ToolMessage("No file", tool_call_id="v1", status="error")
    assert middleware.before_model({"messages": [ai, failed]}, None) is None
    other = AIMessage("", id="ai-2", tool_calls=[{"name": "ls", "args": {}, "id": "l1"}])
    state = {"messages": [other, ToolMessage("x", tool_call_id="l1")], STATE_KEY: {"a": image()}}
    assert middleware.before_model(state, None) is None
    assert middleware.before_model({"messages": []}, None) is None


def test_after_model_removes_injected_messages_and_clears_the_payload():
    middleware = ViewImageMiddleware()
    ai = AIMessage("", id="ai-1", tool_calls=[view_call("v1")])
    injected = image_message(ai, {"a": image()})
    lookalike = HumanMessage("mine", id=INJECTED_ID_PREFIX + "user-chosen")
    state = {"messages": [lookalike, ai, ToolMessage("ok", tool_call_id="v1"), injected,
                          AIMessage("I see", id="ai-2")], STATE_KEY: {"a": image()}}
    update = middleware.after_model(state, None)
    assert update == {"messages": [RemoveMessage(id=injected.id)], STATE_KEY: {}}
    assert asyncio.run(middleware.aafter_model(state, None)) == update
    assert not is_injected(lookalike)
    assert middleware.after_model({"messages": [ai]}, None) is None


def test_the_injected_image_message_carries_the_hidden_marker_clients_read():
    # A served client tells hidden messages by `antler_hidden` alone (README, served API).
    injected = image_message(AIMessage("", id="ai-1", tool_calls=[view_call("v1")]),
                             {"a": image()})
    assert injected.additional_kwargs[HIDDEN_KEY] == {"source": "view_image"}
    assert is_hidden(injected)


def test_a_leftover_from_an_interrupted_call_is_dropped_before_the_next_call():
    middleware = ViewImageMiddleware()
    old = AIMessage("", id="ai-1", tool_calls=[view_call("v1")])
    leftover = image_message(old, {"a": image()})
    state = {"messages": [old, ToolMessage("ok", tool_call_id="v1"), leftover,
                          AIMessage("later", id="ai-2"), HumanMessage("next")]}
    assert middleware.before_model(state, None) == {"messages": [RemoveMessage(id=leftover.id)]}


# -- in a real graph -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry():
    return discover()


def make_agent(home: Path, registry, script, vision: bool = True):
    model = ScriptedChatModel(script)
    agent = create_agent(parse_config(QUIET, registry), model=model, checkpointer="memory",
                         base_dir=home, runtime=RuntimeOptions(supports_vision=vision),
                         registry=registry)
    return agent, model


def image_blocks(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    return [block for m in messages if isinstance(m.content, list) for block in m.content
            if isinstance(block, dict) and block.get("type") == "image_url"]


def holds_payload(values: dict[str, Any]) -> bool:
    return bool(values.get(STATE_KEY)) or any(
        m.id and m.id.startswith(INJECTED_ID_PREFIX) for m in values.get("messages", []))


def look_at(*paths: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": TOOL_NAME, "args": {"image_path": p}} for p in paths]}


def test_the_model_sees_the_image_once_and_no_later_checkpoint_keeps_it(tmp_path, registry):
    home = tmp_path / "home"
    uploads = PathLayout(home).thread("default", "t1").uploads
    uploads.mkdir(parents=True)
    (uploads / "photo.png").write_bytes(PNG)
    agent, model = make_agent(home, registry, [
        look_at("/mnt/user-data/uploads/photo.png"), "A single red pixel.", "You're welcome.",
    ])
    with agent:
        assert "view_image" in agent.chain.names
        assert TOOL_NAME in [t.name for t in agent.chain.tools]
        state = agent.invoke("What is in my photo?", thread_id="t1")
        history = sorted(agent.graph.get_state_history(agent.run_config("t1")),
                         key=lambda snapshot: snapshot.metadata["step"])
        agent.invoke("Thanks", thread_id="t1")
        final = agent.state("t1")

    expected_url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert image_blocks(model.calls[0]) == []
    assert [b["image_url"]["url"] for b in image_blocks(model.calls[1])] == [expected_url]
    injected = [m for m in model.calls[1] if m.id and m.id.startswith(INJECTED_ID_PREFIX)]
    assert len(injected) == 1 and isinstance(injected[0], HumanMessage)
    assert model.calls[1][-1].id == injected[0].id  # appended right before the call
    assert image_blocks(model.calls[2]) == []  # the next turn does not see it again

    for values in (state, final):
        assert not holds_payload(values)
        assert image_blocks(values["messages"]) == []
    reply = state["messages"][-1]
    assert reply.content == "A single red pixel."
    # The payload passed through state (injection is a state write)...
    assert any(holds_payload(snapshot.values) for snapshot in history)
    # ...and is gone from every checkpoint from the one the reply first appears in
    # (written by the model node after its after_model hooks ran).
    first_with_reply = next(i for i, snapshot in enumerate(history)
                            if any(m.id == reply.id for m in snapshot.values["messages"]))
    assert not any(holds_payload(s.values) for s in history[first_with_reply:])


def test_parallel_calls_share_one_hidden_message(tmp_path, registry):
    home = tmp_path / "home"
    paths = PathLayout(home).thread("default", "t1")
    paths.ensure_directories()
    (paths.uploads / "a.png").write_bytes(PNG)
    (paths.outputs / "b.webp").write_bytes(WEBP)
    agent, model = make_agent(home, registry, [
        look_at("/mnt/user-data/uploads/a.png", "/mnt/user-data/outputs/b.webp"), "Two images.",
    ])
    with agent:
        agent.invoke("Compare them", thread_id="t1")
    injected = [m for m in model.calls[1] if m.id and m.id.startswith(INJECTED_ID_PREFIX)]
    assert len(injected) == 1
    assert sorted(b["image_url"]["url"].split(";")[0] for b in image_blocks(injected)) == [
        "data:image/png", "data:image/webp"]


def test_a_refused_read_shows_the_model_an_error_and_no_image(tmp_path, registry):
    agent, model = make_agent(tmp_path / "home", registry, [
        look_at("/mnt/user-data/uploads/../../../../etc/passwd"), "I cannot open that.",
    ])
    with agent:
        state = agent.invoke("Show me", thread_id="t1")
    [result] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert result.status == "error" and "Refusing" in result.content
    assert image_blocks(model.calls[1]) == []
    assert not holds_payload(state)


def test_async_runs_inject_and_remove_the_same_way(tmp_path, registry):
    home = tmp_path / "home"
    uploads = PathLayout(home).thread("default", "t1").uploads
    uploads.mkdir(parents=True)
    (uploads / "a.jpg").write_bytes(JPEG)
    agent, model = make_agent(home, registry, [look_at("/mnt/user-data/uploads/a.jpg"), "Seen."])

    async def run() -> dict[str, Any]:
        return await agent.graph.ainvoke(
            agent.input("Look"), config=agent.run_config("t1"), context=agent.context("t1"))

    with agent:
        state = asyncio.run(run())
    assert len(image_blocks(model.calls[1])) == 1
    assert not holds_payload(state)


def test_models_without_vision_get_neither_the_plugin_nor_the_tool(tmp_path, registry):
    agent, _ = make_agent(tmp_path, registry, ["hi"], vision=False)
    with agent:
        assert "view_image" not in agent.chain.names
        assert TOOL_NAME not in [t.name for t in agent.chain.tools]


@pytest.mark.parametrize("into_model", [True, False])
def test_the_hidden_image_message_reaches_a_checkpoint_only_in_a_before_model_node(
        tmp_path, registry, into_model):
    """Compiled into the model node, injection and removal happen in one step.

    With view_image's hooks in nodes of their own, the checkpoints of the
    before_model and model steps hold the hidden message with the image; inside
    the model node, no checkpoint ever does.
    """
    home = tmp_path / "home"
    uploads = PathLayout(home).thread("default", "t1").uploads
    uploads.mkdir(parents=True)
    (uploads / "photo.png").write_bytes(PNG)
    model = ScriptedChatModel([look_at("/mnt/user-data/uploads/photo.png"), "A red pixel."])
    agent = create_agent(parse_config(QUIET, registry), model=model, checkpointer="memory",
                         base_dir=home, runtime=RuntimeOptions(supports_vision=True),
                         registry=registry, fuse_into_model=into_model)
    with agent:
        agent.invoke("What is in my photo?", thread_id="t1")
        history = list(agent.graph.get_state_history(agent.run_config("t1")))
    assert image_blocks(model.calls[1])  # the model saw the image either way
    hidden = [s for s in history if any(m.id and m.id.startswith(INJECTED_ID_PREFIX)
                                        for m in s.values.get("messages", []))]
    assert bool(hidden) is not into_model
