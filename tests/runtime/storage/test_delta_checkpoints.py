"""`storage.messages_channel: delta` against `full`: the same thread, the same answers.

Each scenario runs twice on a SQLite saver, once per channel mode, through the
real `create_agent` graph (fused and unfused), and the two runs must agree on
the final state and on every model request. The scenario covers what delta
mode must survive: tool calls, a delegated task (a subagent), summarization
removing messages, `update_state`, and a resume by a new agent that only has
the database (so the thread is rebuilt from snapshots and replayed writes).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from antler.chain.config import parse_config
from antler.errors import BuildError
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.runtime.agent import CHECKPOINT_FILENAME, create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage.deltas import folding, use_delta_channels

QUIET = ("title: {enabled: false}\nmemory: {enabled: false}\n"
         # The script places the summary call by message count; the date reminder is one more.
         "dynamic_context: {enabled: false}\n")
SUMMARIZE = ("summarization:\n  enabled: true\n  trigger: [{type: messages, value: 12}]\n"
             "  keep: {type: messages, value: 4}\n")

LEAD = [
    {"content": "", "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data"}}]},
    "Nothing uploaded yet.",
    {"content": "", "tool_calls": [{"name": "task", "args": {
        "description": "count", "prompt": "Count to three."}}]},
    "The subagent counted.",
    "Third answer.",
    "Fourth answer.",
    "EARLIER: files, a count, and two questions.",  # the summary call
    "Fifth answer.",
    "After the resume.",
]
SUB = ["one, two, three"]


@pytest.fixture(scope="module")
def registry() -> Any:
    return discover()


def _storage(mode: str) -> str:
    return f"storage: {{messages_channel: {mode}, snapshot_every: 3}}\n"


def play(home: Path, registry: Any, mode: str, fuse: bool) -> dict[str, Any]:
    """The scenario on a fresh SQLite thread; what it asked the model and where it ended."""
    config = parse_config(QUIET + SUMMARIZE + _storage(mode), registry)
    lead, sub = ScriptedChatModel(LEAD), ScriptedChatModel(SUB)
    options = RuntimeOptions(subagents_enabled=True)

    def agent() -> Any:
        return create_agent(config, model=lead, subagent_model=sub, registry=registry,
                            base_dir=home, checkpointer="sqlite", runtime=options, fuse=fuse)

    with agent() as first:
        for text in ("What is there?", "Count, please.", "Third?", "Fourth?", "Fifth?"):
            first.invoke(text, thread_id="t")
        first.graph.update_state(first.run_config("t"), {"messages": [
            AIMessage("A note added by an operator.", id="operator-note")]})
    with agent() as resumed:  # only the database carries the thread over
        before = resumed.state("t")
        final = resumed.invoke("Still there?", thread_id="t")
    return {"requests": [_shape(call) for call in lead.calls],
            "sub_requests": [_shape(call) for call in sub.calls],
            "before": _shape(before["messages"]), "final": _shape(final["messages"]),
            "channels": sorted(k for k in final if k != "messages")}


def _shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    # Ids a run generates differ between runs; what each message is must not.
    return [(type(m).__name__, m.text, m.name,
             tuple(c["name"] for c in getattr(m, "tool_calls", None) or ()))
            for m in messages]


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_delta_mode_gives_the_same_thread_and_requests_as_full_mode(tmp_path, registry, fuse):
    full = play(tmp_path / "full", registry, "full", fuse)
    delta = play(tmp_path / "delta", registry, "delta", fuse)
    assert delta == full
    # The scenario reached what it is meant to exercise.
    assert any(kind == "HumanMessage" and "EARLIER" in text
               for kind, text, *_ in full["final"])
    assert ("AIMessage", "A note added by an operator.", None, ()) in full["before"]
    assert full["sub_requests"], "the task tool ran a subagent"
    assert full["final"][-1][1] == "After the resume."


def _stored_bytes(home: Path) -> int:
    with sqlite3.connect(home / CHECKPOINT_FILENAME) as db:
        checkpoints = db.execute("select sum(length(checkpoint)) from checkpoints").fetchone()[0]
        writes = db.execute("select sum(length(value)) from writes").fetchone()[0]
    return int(checkpoints) + int(writes or 0)


def test_delta_mode_stores_the_history_once_not_per_checkpoint(tmp_path, registry):
    sizes = {}
    for mode in ("full", "delta"):
        config = parse_config(QUIET + _storage(mode).replace("3", "100"), registry)
        model = ScriptedChatModel([f"answer {i} " + "x" * 400 for i in range(12)])
        with create_agent(config, model=model, registry=registry, base_dir=tmp_path / mode,
                          checkpointer="sqlite") as agent:
            for i in range(12):
                agent.invoke(f"question {i} " + "y" * 400, thread_id="t")
        sizes[mode] = _stored_bytes(tmp_path / mode)
    assert sizes["delta"] * 3 < sizes["full"], sizes


def test_the_delta_channel_folds_writes_as_the_full_channel_reduces_them():
    from langgraph.graph.message import add_messages

    reduce = folding(add_messages)
    first = [HumanMessage("a", id="1")]
    second = [AIMessage("b", id="2"), HumanMessage("a2", id="1")]
    assert reduce([], [first, second]) == add_messages(add_messages([], first), second)
    assert reduce(reduce([], [first]), [second]) == reduce([], [first, second])


def test_only_reducer_channels_can_be_stored_as_deltas(tmp_path, registry):
    config = parse_config(QUIET, registry)
    with create_agent(config, model=ScriptedChatModel(["ok"]), registry=registry,
                      base_dir=tmp_path, checkpointer="memory") as agent:
        with pytest.raises(BuildError, match=r"'jump_to'.*reducer channels"):
            use_delta_channels(agent.graph, ["jump_to"], 10)
        with pytest.raises(BuildError, match=r"'nope' as deltas \(no such channel\)"):
            use_delta_channels(agent.graph, ["nope"], 10)
        assert use_delta_channels(agent.graph, ["messages"], 10) == ["messages"]


@pytest.mark.parametrize("section, where", [
    ("storage: {messages_channel: partial}", "messages_channel"),
    ("storage: {snapshot_every: 0}", "snapshot_every"),
])
def test_a_bad_storage_setting_is_a_config_error_naming_the_key(registry, section, where):
    from antler.errors import ConfigError

    with pytest.raises(ConfigError, match=where):
        parse_config(section, registry)


def _switching(home: Path, registry: Any, first: str, then: str) -> list[Any]:
    """Three turns in mode `first`, three more by a new agent in mode `then`, read back in
    `first`: what the model was asked and what each agent found in the thread."""
    lead, sub = ScriptedChatModel(LEAD), ScriptedChatModel(SUB)

    def agent(mode: str) -> Any:
        config = parse_config(QUIET + SUMMARIZE + _storage(mode), registry)
        return create_agent(config, model=lead, subagent_model=sub, registry=registry,
                            base_dir=home, checkpointer="sqlite",
                            runtime=RuntimeOptions(subagents_enabled=True))

    with agent(first) as one:
        for text in ("What is there?", "Count, please.", "Third?"):
            one.invoke(text, thread_id="t")
    with agent(then) as two:
        found = two.state("t")
        for text in ("Fourth?", "Fifth?", "Still there?"):
            two.invoke(text, thread_id="t")
    with agent(first) as three:
        back = three.state("t")
    return [[_shape(call) for call in lead.calls], _shape(found["messages"]),
            _shape(back["messages"])]


def test_a_thread_carries_on_when_the_channel_mode_changes(tmp_path, registry):
    """Changing `storage.messages_channel` keeps existing threads readable, either way."""
    same = _switching(tmp_path / "full", registry, "full", "full")
    assert _switching(tmp_path / "to-delta", registry, "full", "delta") == same
    assert _switching(tmp_path / "to-full", registry, "delta", "full") == same
    assert same[2][-1][1] == "After the resume."  # every scripted turn was played
