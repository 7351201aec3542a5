"""Lean reducer channels behave as LangGraph's own, through every channel operation and a run.

`LeanAggregate` (`antler.compiler.leanchannels.lean_aggregate_class`) replaces LangGraph's
`BinaryOperatorAggregate` in the graphs `antler.agent.create_agent` builds: it
copies without working the declared type out again. Checked: for each shape of
reducer key the built-in plugins declare (a list, a dict, a TypedDict, an
optional record, an abstract sequence), every operation (new, copy, reading a
checkpoint, updates with and without `Overwrite`, checkpointing) gives what the
plain channel gives, and each copy gets its own empty value; channels it cannot
reproduce keep LangGraph's class; the default chain's graph carries lean
channels; and one thread run alternately on a lean and a plain graph over one
saver reads the same state as a thread run on the plain graph alone.
"""

from __future__ import annotations

import collections.abc
import copy
import operator
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import pytest
from langchain.agents.middleware import AgentState
from langgraph.channels import BinaryOperatorAggregate, DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.errors import EmptyChannelError, InvalidUpdateError
from langgraph.graph import StateGraph
from langgraph.types import Overwrite

from antler.chain.config import parse_config
from antler.compat import langgraph_private
from antler.compiler.leanchannels import lean_aggregate_class, lean_channels
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

MISSING = langgraph_private("langgraph._internal._typing", "MISSING")


class Record(TypedDict):
    base: str | None
    ids: list[str]


class NotEmpty:
    """A declared type whose instance is not an empty container."""

    def __init__(self) -> None:
        self.items = [1]


def _latest(current: Any, new: Any) -> Any:
    return new


def _merge(current: Any, new: Any) -> Any:
    return {**(current or {}), **(new or {})}


class Shapes(AgentState):
    listed: NotRequired[Annotated[list[dict[str, Any]], operator.add]]
    mapped: NotRequired[Annotated[dict[str, Any], _merge]]
    record: NotRequired[Annotated[Record, _merge]]
    optional: NotRequired[Annotated[Record | None, _latest]]
    sequence: NotRequired[Annotated[collections.abc.Sequence[str], operator.add]]
    custom: NotRequired[Annotated[NotEmpty, _latest]]


def plain_channels() -> dict[str, Any]:
    channels = StateGraph(Shapes).channels
    for key, channel in channels.items():
        channel.key = key
    return {key: channel for key, channel in channels.items()
            if type(channel) is BinaryOperatorAggregate}


PLAIN = plain_channels()
LEAN_SHAPES = ["messages", "listed", "mapped", "record", "optional", "sequence"]


def observed(channel: Any) -> tuple[Any, ...]:
    """What LangGraph can see of a channel."""
    try:
        value = channel.get()
    except EmptyChannelError:
        value = "<empty>"
    return (channel.key, channel.typ, channel.operator, channel.is_available(), value,
            channel.checkpoint() is MISSING)


def updates(key: str) -> list[list[Any]]:
    """Update sequences for `key`: adds, an `Overwrite` first, last and alone, nothing."""
    value: Any = {
        "messages": [{"role": "user", "content": "hi", "id": "m-1"}],
        "listed": [{"n": 1}], "mapped": {"a": 1}, "record": {"base": "t", "ids": ["x"]},
        "optional": {"base": None, "ids": []}, "sequence": ["s"],
    }[key]
    return [[], [value], [value, value], [Overwrite(value), value], [value, Overwrite(value)],
            [Overwrite(value)]]


@pytest.mark.parametrize("key", LEAN_SHAPES)
def test_every_operation_matches_the_plain_channel(key: str) -> None:
    plain = PLAIN[key]
    lean = lean_aggregate_class().of(plain)
    assert lean is not None and isinstance(lean, BinaryOperatorAggregate)
    assert observed(lean) == observed(plain)
    assert lean == plain and plain == lean
    for checkpoint in (MISSING, plain.checkpoint(), copy.deepcopy(plain.checkpoint())):
        assert observed(lean.from_checkpoint(checkpoint)) == \
            observed(plain.from_checkpoint(checkpoint))
    for values in updates(key):
        expected, got = plain.copy(), lean.copy()
        assert got.update(values) == expected.update(values)
        assert observed(got) == observed(expected)
        again_expected, again = expected.copy(), got.copy()
        assert observed(again) == observed(again_expected)
        restored = lean.from_checkpoint(got.checkpoint())
        assert observed(restored) == observed(plain.from_checkpoint(expected.checkpoint()))
        assert type(restored) is type(lean)
    # LangGraph's own refusal of two Overwrites in one step, where it refuses them.
    value = updates(key)[1][0]
    twice = [value, Overwrite(value), Overwrite(value)]
    assert refused(lean.copy(), twice) == refused(plain.copy(), twice) == "InvalidUpdateError"


def refused(channel: Any, values: list[Any]) -> str:
    try:
        channel.update(values)
    except InvalidUpdateError as error:
        return type(error).__name__
    return ""


@pytest.mark.parametrize("key", ["listed", "mapped", "record", "sequence"])
def test_each_copy_gets_its_own_empty_value(key: str) -> None:
    lean = lean_aggregate_class().of(PLAIN[key])
    first, second = lean.from_checkpoint(MISSING), lean.from_checkpoint(MISSING)
    assert first.get() == second.get() == PLAIN[key].get()
    assert first.get() is not second.get()
    assert lean.copy().get() is lean.get()  # a copy shares the value, as LangGraph's does


def test_a_delta_snapshot_is_read_the_plain_way() -> None:
    plain, lean = PLAIN["listed"], lean_aggregate_class().of(PLAIN["listed"])
    snapshot = _DeltaSnapshot([{"n": 1}])
    assert observed(lean.from_checkpoint(snapshot)) == observed(plain.from_checkpoint(snapshot))
    assert type(lean.from_checkpoint(snapshot)) is type(lean)


def test_channels_it_cannot_reproduce_keep_langgraphs_class() -> None:
    class Graph:
        channels: dict[str, Any] = {}

    graph = Graph()
    graph.channels = dict(StateGraph(Shapes).channels)
    delta = DeltaChannel(operator.add, list)
    graph.channels["delta"] = delta
    switched = lean_channels(graph)
    assert sorted(switched) == sorted(LEAN_SHAPES)
    assert type(graph.channels["custom"]) is BinaryOperatorAggregate  # NotEmpty() is no container
    assert graph.channels["delta"] is delta
    lean = lean_aggregate_class()
    assert all(type(graph.channels[key]) is lean for key in LEAN_SHAPES)
    assert lean_channels(graph) == []  # already lean


QUIET = "title: {enabled: false}\nmemory: {enabled: false}\n"
SCRIPT = [
    {"content": "", "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data"},
                                    "id": "call-ls"}]},
    "first answer",
    "second answer",
]


@pytest.fixture(scope="module")
def registry() -> Any:
    return discover()


def build(home: Path, registry: Any, saver: Any, *, plain: bool = False,
          script: list[Any] = SCRIPT) -> Any:
    agent = create_agent(parse_config(QUIET, registry), model=ScriptedChatModel(list(script)),
                         registry=registry, base_dir=home, checkpointer=saver)
    if plain:
        for key, channel in agent.graph.channels.items():
            if isinstance(channel, BinaryOperatorAggregate) and not isinstance(channel,
                                                                               DeltaChannel):
                original = BinaryOperatorAggregate(channel.typ, channel.operator)
                original.key = key
                agent.graph.channels[key] = original
    return agent


def comparable(values: dict[str, Any]) -> dict[str, Any]:
    """A thread's state without what differs between two runs of one script (message ids,
    run ids, times)."""
    out = dict(values)
    out["messages"] = [(m.type, m.content, [c["name"] for c in getattr(m, "tool_calls", [])])
                       for m in values["messages"]]
    for key in ("antler_message_writes", "input_provenance", "antler_input_arrivals",
                "durable_context_cursor", "antler_stop_reason", "thread_data", "sandbox",
                "loop_detection", "antler_token_usage"):
        out[key] = sorted(values[key]) if isinstance(values.get(key), dict) else \
            type(values.get(key)).__name__
    return out


def test_the_default_chain_runs_on_lean_channels_and_reads_plain_checkpoints(
        tmp_path: Path, registry: Any) -> None:
    lean_class = lean_aggregate_class()
    saver = InMemorySaver()
    lean = build(tmp_path / "lean", registry, saver)
    reducers = [key for key, channel in lean.graph.channels.items()
                if isinstance(channel, BinaryOperatorAggregate)]
    assert {"messages", "antler_message_writes", "input_provenance"} <= set(reducers)
    assert all(type(lean.graph.channels[key]) is lean_class for key in reducers)

    # One thread, its turns alternating between the lean graph and a plain one on one saver,
    # against a thread run on a plain graph alone.
    plain = build(tmp_path / "lean", registry, saver, plain=True, script=SCRIPT[2:])
    assert not any(type(channel) is lean_class for channel in plain.graph.channels.values())
    lean.invoke("list the files", thread_id="mixed")
    plain.invoke("and again", thread_id="mixed")
    mixed_on_lean = lean.graph.get_state({"configurable": {"thread_id": "mixed"}}).values
    mixed_on_plain = plain.graph.get_state({"configurable": {"thread_id": "mixed"}}).values

    alone = build(tmp_path / "alone", registry, InMemorySaver(), plain=True)
    alone.invoke("list the files", thread_id="alone")
    alone.invoke("and again", thread_id="alone")
    reference = alone.graph.get_state({"configurable": {"thread_id": "alone"}}).values

    assert set(mixed_on_lean) == set(reference)
    assert comparable(mixed_on_lean) == comparable(mixed_on_plain) == comparable(reference)
    assert [m.content for m in mixed_on_lean["messages"]][-1] == "second answer"
