"""The scripted model: its own turns for title and memory, and streaming like a provider."""

from __future__ import annotations

import logging

import pytest
import yaml
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage

from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel, ScriptError


@pytest.fixture(scope="module")
def registry():
    return discover()


def script_file(tmp_path, data):
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("fuse", [True, False])
def test_title_and_memory_answer_from_their_own_scripts(registry, tmp_path, caplog, fuse):
    path = script_file(tmp_path, {
        "turns": [{"content": "", "tool_calls": [{"name": "ls",
                                                  "args": {"path": "/mnt/user-data"}}]},
                  "Listed it."],
        "title": ["Listing The Folder"],
        "memory": ['[{"fact": "The user keeps files in the workspace", "category": "context"}]'],
    })
    model = ScriptedChatModel.from_yaml(path)
    with caplog.at_level(logging.WARNING), create_agent(
            model=model, registry=registry, base_dir=tmp_path / "home", checkpointer="memory",
            fuse=fuse) as agent:
        agent.invoke("list my files", thread_id="t")
        state = agent.state("t")
        agent.services.items["memory_queue"].flush()
    assert state["title"] == "Listing The Folder"
    assert model.position == 2 and model.remaining == 0  # only the agent's own calls
    assert "ran out of script" not in caplog.text
    assert "title generation failed" not in caplog.text


def test_without_side_scripts_titles_fall_back_quietly(registry, tmp_path, caplog):
    model = ScriptedChatModel(["Hello!"])
    with caplog.at_level(logging.WARNING), create_agent(
            model=model, registry=registry, base_dir=tmp_path, checkpointer="memory") as agent:
        agent.invoke("greet the team please", thread_id="t")
        state = agent.state("t")
        agent.services.items["memory_queue"].flush()
    assert state["title"] == "greet the team please"  # the user's words
    assert "ran out of script" not in caplog.text and model.remaining == 0


def test_a_bad_side_script_is_a_clear_error(tmp_path):
    path = script_file(tmp_path, {"turns": ["x"], "title": "not a list"})
    with pytest.raises(ScriptError, match=r"script\.yaml.*must be a list of turns"):
        ScriptedChatModel.from_yaml(path)
    path = script_file(tmp_path, {"turns": ["x"], "summary": ["y"]})
    with pytest.raises(ScriptError, match="'title', 'memory' and 'tool_selector'"):
        ScriptedChatModel.from_yaml(path)


@pytest.mark.parametrize("fuse", [True, False])
def test_the_agent_streams_scripted_tokens_with_tool_calls_intact(registry, tmp_path, fuse):
    model = ScriptedChatModel([
        {"content": "Let me look first.",
         "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data"}}]},
        "Three words here.",
    ])
    with create_agent(model=model, registry=registry, base_dir=tmp_path,
                      checkpointer="memory", fuse=fuse) as agent:
        chunks = [chunk for chunk, meta in agent.stream("look", thread_id="t",
                                                        stream_mode="messages")
                  if isinstance(chunk, AIMessageChunk) and meta.get("langgraph_node") == "model"]
        state = agent.state("t")
    texts = [c.content for c in chunks if c.content]
    assert texts[:4] == ["Let ", "me ", "look ", "first."] and "Three " in texts
    replies = [m for m in state["messages"] if isinstance(m, AIMessage)]
    assert replies[0].content == "Let me look first."
    assert replies[0].tool_calls[0]["name"] == "ls"
    assert replies[0].tool_calls[0]["args"] == {"path": "/mnt/user-data"}
    assert any(isinstance(m, ToolMessage) and m.name == "ls" for m in state["messages"])
    assert replies[-1].content == "Three words here."
    assert replies[-1].usage_metadata and replies[-1].response_metadata["finish_reason"] == "stop"


def test_streamed_and_invoked_replies_are_the_same_message():
    turn = {"content": "A  spaced\nreply ", "tool_calls": [{"name": "f", "args": {"a": [1, 2]},
                                                            "id": "c1"}],
            "finish_reason": "length", "usage": {"input_tokens": 3, "output_tokens": 4}}
    invoked = ScriptedChatModel([turn]).invoke("q")
    chunks = list(ScriptedChatModel([turn]).stream("q"))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    assert merged.content == invoked.content
    assert merged.tool_calls == invoked.tool_calls
    assert merged.usage_metadata == invoked.usage_metadata
    assert merged.response_metadata["finish_reason"] == "length"
