"""A fused node's writes: a reducer key's several writes folded into one, a plain key's
write of the value it holds left out, the state the same (`antler.contracts.folding`).

The demo's channel writes per run are pinned (through the real `create_agent` graph, the
benchmarks' run of it): a change that brings back writes that change nothing fails here.
"""

from __future__ import annotations

import collections
import contextlib
import random
from collections.abc import Iterator
from typing import Annotated, Any, NotRequired

import pytest
from langchain.agents import create_agent as langchain_create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import add_messages

from antler.compiler import fuse
from antler.compiler.steps import fold_messages
from antler.contracts.folding import fold_of, folds_with
from antler.contracts.writes import fold_writes, merge_writes
from antler.plugins._lib.inputrecord import fold_provenance, merge_provenance
from antler.runtime.models import ScriptedChatModel

DEMO_WRITES = {"fused": 58, "nodes": 88}
"""Channel writes per run of the demo (both turns, the subagent's graph included), in
memory. Before the writes were folded: 74 (fused into the model node) and 96 (nodes)."""


@contextlib.contextmanager
def counted_writes() -> Iterator[collections.Counter[tuple[str, str]]]:
    """Every channel write LangGraph applies meanwhile, by (node, channel)."""
    import langgraph.pregel._loop as loop

    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    apply = loop.apply_writes

    def counting(checkpoint: Any, channels: Any, tasks: Any, *args: Any) -> Any:
        tasks = list(tasks)
        for task in tasks:
            for channel, _ in task.writes:
                counts[(task.name, channel)] += 1
        return apply(checkpoint, channels, tasks, *args)

    loop.apply_writes = counting
    try:
        yield counts
    finally:
        loop.apply_writes = apply


@pytest.mark.parametrize("variant", ["fused", "nodes"])
def test_the_demo_makes_the_pinned_number_of_channel_writes(tmp_path, variant):
    from benchmarks.bench_fusion import AntlerRunner

    runner = AntlerRunner("default", variant, InMemorySaver(), tmp_path / "home", 2)
    try:
        runner.prepare()()  # the first run: a thread's first sandbox and caches
        with counted_writes() as counts:
            runner.prepare()()
    finally:
        runner.close()
    total = sum(counts.values())
    assert total == DEMO_WRITES[variant], sorted(counts.items())


def test_a_fused_input_step_writes_messages_and_the_journal_once(tmp_path):
    from benchmarks.bench_fusion import AntlerRunner

    runner = AntlerRunner("default", "fused", InMemorySaver(), tmp_path / "home", 1)
    writes: list[tuple[str, list[str]]] = []
    import langgraph.pregel._loop as loop

    apply = loop.apply_writes

    def recording(checkpoint: Any, channels: Any, tasks: Any, *args: Any) -> Any:
        tasks = list(tasks)
        writes.extend((task.name, [c for c, _ in task.writes]) for task in tasks)
        return apply(checkpoint, channels, tasks, *args)

    loop.apply_writes = recording
    try:
        runner.prepare()()
    finally:
        loop.apply_writes = apply
        runner.close()
    starts = [channels for name, channels in writes if name == "__start__"]
    assert len(starts) == 3  # the lead's two turns and the subagent's
    for channels in starts:
        # Several hooks rewrite messages and the provenance record, and two mark the
        # journal: one write each reaches the graph (the last mark with the node's writes).
        assert channels.count("messages") == 1, channels
        assert channels.count("input_provenance") <= 1, channels
        assert channels.count("antler_message_writes") == 1, channels


# --- each fold gives what the writes one by one give, from any value before ---------------

def _apply(reducer: Any, current: Any, values: list[Any]) -> Any:
    for value in values:
        current = reducer(current, value)
    return current


def test_fold_of_reads_the_declared_fold():
    def fold(values: list[Any]) -> list[Any]:
        return values[-1:]

    @folds_with(fold)
    def last(current: Any, change: Any) -> Any:
        return change

    assert fold_of(last) is fold
    assert last(1, 2) == 2  # the reducer itself is unchanged
    assert fold_of(lambda a, b: b) is None
    assert fold_of(merge_writes) is fold_writes
    assert fold_of(merge_provenance) is fold_provenance


def _random_provenance_change(rng: random.Random) -> Any:
    ids = [f"m{i}" for i in range(6)]
    if rng.random() < 0.05:
        return None  # not a dict: the reducer's own reading
    change: dict[str, Any] = {}
    if rng.random() < 0.7:
        change["seen"] = {rng.choice(ids): rng.choice("abc") for _ in range(rng.randint(0, 3))}
    if rng.random() < 0.5:
        change["user"] = [rng.choice(ids) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.4:
        change["gone"] = [rng.choice(ids) for _ in range(rng.randint(0, 2))]
    if rng.random() < 0.8:
        change["token"] = rng.choice(["t1", "t2", "t3"])
    return change


def test_folded_provenance_changes_give_the_same_record():
    rng = random.Random(7)
    folded_some = 0
    for _ in range(3000):
        current = (None if rng.random() < 0.2 else
                   merge_provenance(None, _random_provenance_change(rng) or {}))
        changes = [_random_provenance_change(rng) for _ in range(rng.randint(2, 4))]
        folded = fold_provenance(changes)
        folded_some += len(folded) == 1
        expected = _apply(merge_provenance, current, changes)
        got = _apply(merge_provenance, current, folded)
        assert got == expected and list(got["seen"]) == list(expected["seen"]), changes
    assert folded_some > 2000


def test_folded_journal_writes_give_the_same_journal():
    rng = random.Random(3)
    for _ in range(2000):
        current = rng.choice([None, merge_writes(None, {"ids": ["x"], "removed": []}),
                              merge_writes(None, {"base": "b0"})])
        values = [rng.choice([{"base": f"b{rng.randint(1, 3)}"},
                              {"ids": [f"m{rng.randint(0, 4)}"], "removed": []},
                              {"ids": [], "removed": ["m1"], "all": rng.random() < 0.2}])
                  for _ in range(rng.randint(2, 5))]
        assert _apply(merge_writes, current, fold_writes(values)) == \
            _apply(merge_writes, current, values)
    assert fold_writes([{"base": "a"}, {"base": "b"}]) == [{"base": "b"}]


def test_a_mark_with_writes_gives_the_mark_then_the_writes():
    rng = random.Random(11)
    for _ in range(1000):
        current = rng.choice([None, merge_writes(None, {"ids": ["x"], "removed": []}),
                              merge_writes(None, {"base": "b0", "ids": ["y"]})])
        entry: dict[str, Any] = {"ids": [f"m{rng.randint(0, 4)}" for _ in range(3)],
                                 "removed": [f"m{rng.randint(0, 4)}"] * rng.randint(0, 1)}
        if rng.random() < 0.2:
            entry["all"] = True
        mark = {"base": f"b{rng.randint(1, 3)}"}
        assert merge_writes(current, {**mark, **entry}) == \
            merge_writes(merge_writes(current, mark), entry)
    # A mark alone still starts an empty list the graph has not yet written to.
    assert merge_writes({"base": "a", "ids": ["x"], "removed": [], "all": False,
                         "recorded": True}, {"base": "b"}) == {
        "base": "b", "ids": [], "removed": [], "all": False, "recorded": False}


def test_folded_message_writes_give_the_same_messages():
    rng = random.Random(5)
    for _ in range(500):
        current = [HumanMessage(content=f"c{i}", id=f"m{i}") for i in range(rng.randint(0, 4))]
        values = [[AIMessage(content=f"v{j}{k}", id=f"m{rng.randint(0, 6)}")
                   for k in range(rng.randint(0, 3))] for j in range(rng.randint(2, 4))]
        folded = fold_messages(values)
        assert len(folded) == 1
        assert add_messages(current, folded[0]) == _apply(add_messages, current, values)
    # A removal, or a message the reducer gives an id, keeps the writes as they are.
    removal = [[AIMessage(content="a", id="a")], [RemoveMessage(id="a")]]
    assert fold_messages(removal) is removal
    no_id = [[AIMessage(content="a", id="a")], [AIMessage(content="b")]]
    assert fold_messages(no_id) is no_id


# --- through a fused graph ----------------------------------------------------------------

def _noted(current: list[str] | None, change: list[str]) -> list[str]:
    return [*(current or []), *change]


class PlainState(AgentState):
    flag: NotRequired[bool]
    note: NotRequired[dict[str, Any]]
    notes: NotRequired[Annotated[list[str], _noted]]


class Writer(AgentMiddleware):
    """Writes `flag` (whether `notes` has any), `note` (a dict, always equal), `notes`
    and a message."""

    state_schema = PlainState

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def before_model(self, state: Any, runtime: Any) -> Any:
        return {"flag": bool(state.get("notes")), "note": dict(state.get("note") or {"n": 1}),
                "notes": [self._name],
                "messages": [HumanMessage(content=f"from {self._name}", id=f"h-{self._name}")]}


def _run(fused: bool, counts: collections.Counter[tuple[str, str]] | None = None) -> Any:
    middlewares: list[Any] = [Writer("a"), Writer("b")]
    if fused:
        middlewares = fuse(middlewares)
    model = ScriptedChatModel([AIMessage(content="one", id="r1"),
                               AIMessage(content="two", id="r2")])
    graph = langchain_create_agent(model=model, middleware=middlewares,
                                   state_schema=PlainState, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    for turn in ("hi", "again"):
        graph.invoke({"messages": [HumanMessage(turn, id=f"u-{turn}")]}, config)
    return graph.get_state(config).values


def test_a_fused_node_folds_writes_and_leaves_out_unchanged_plain_values():
    with counted_writes() as counts:
        fused = _run(True)
    assert fused == _run(False)
    hooks = {channel: n for (node, channel), n in counts.items() if node.startswith("fused")}
    # Two members wrote messages in each of two turns: one write per turn.
    assert hooks["messages"] == 2
    # `notes`' reducer declares no fold: both members' writes are kept.
    assert hooks["notes"] == 2 * 2
    # `flag` is True after the first member, in both turns: written once (the first turn),
    # the second turn's write of the value the channel holds is left out...
    assert hooks["flag"] == 1
    # ...while the dict `note`, equal each time, is written every turn: a mutable value
    # might have been changed in place, and the saver stores only what is written.
    assert hooks["note"] == 2
