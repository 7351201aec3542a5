"""Every run of a scoped graph has a `RunScope` of its own, ended however the run ends.

What a run holds (a thread's sandbox) is let go at the scope's end, so the end must be
seen when the run finishes, fails, has its stream closed early or its task cancelled,
and code inside one run must never see another run's scope (two runs streamed in
turns from one thread, a run started inside another run's tool).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from antler.compiler.runscope import RunScope, current_run, scope_runs


class State(TypedDict, total=False):
    step: int
    fail: bool
    wait: bool


class Seen:
    """The scopes the graph's node saw, and which of them ended."""

    def __init__(self) -> None:
        self.scopes: list[RunScope | None] = []
        self.ended: list[RunScope] = []
        self.started = threading.Event()
        self.inner: Any = None

    def node(self, state: State) -> State:
        scope = current_run()
        self.scopes.append(scope)
        if scope is not None:
            scope.on_end("seen", lambda: self.ended.append(scope))
        if state.get("fail"):
            raise RuntimeError("the node failed")
        if self.inner is not None and state.get("step", 0) == 0:
            inner, self.inner = self.inner, None
            inner.invoke({"step": 5})
            assert current_run() is scope  # the inner run's scope stays its own
        return {"step": state.get("step", 0) + 1}

    async def anode(self, state: State) -> State:
        update = self.node(state)
        if state.get("wait"):
            self.started.set()
            await asyncio.sleep(30)
        return update


def scoped_graph(seen: Seen, *, asynchronous: bool = False) -> Any:
    builder = StateGraph(State)
    builder.add_node("one", seen.anode if asynchronous else seen.node)
    builder.add_node("two", seen.anode if asynchronous else seen.node)
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    return scope_runs(builder.compile())


def test_each_run_has_its_own_scope_ended_when_it_ends() -> None:
    seen = Seen()
    graph = scoped_graph(seen)
    assert graph.invoke({"step": 0}) == {"step": 2}
    assert graph.with_config(recursion_limit=10).invoke({"step": 0}) == {"step": 2}
    first, second = seen.scopes[0], seen.scopes[2]
    assert first is not None and second is not None and first is not second
    assert seen.scopes == [first, first, second, second]
    assert seen.ended == [first, second] and first.ended and second.ended
    assert current_run() is None  # outside any run


def test_a_failed_run_and_a_closed_stream_end_their_scopes() -> None:
    seen = Seen()
    graph = scoped_graph(seen)
    with pytest.raises(RuntimeError, match="the node failed"):
        graph.invoke({"fail": True})
    chunks = graph.stream({"step": 0})
    next(chunks)  # the first node's update; the run is still open
    open_scope = seen.scopes[-1]
    assert open_scope is not None and not open_scope.ended
    chunks.close()
    assert len(seen.ended) == 2 and seen.ended[-1] is open_scope


def test_two_runs_streamed_in_turns_and_a_run_inside_a_run_keep_their_own_scopes() -> None:
    seen = Seen()
    graph = scoped_graph(seen)
    one, two = graph.stream({"step": 0}), graph.stream({"step": 10})
    for _ in range(2):  # one's step, then two's, from one thread
        next(one)
        next(two)
    one.close()
    two.close()
    a, b, c, d = seen.scopes
    assert a is c and b is d and a is not b  # one, two, one, two
    # A run started inside another's node (a delegated task) has its own scope.
    inner_seen = Seen()
    seen.inner = scoped_graph(inner_seen)
    seen.scopes.clear()
    graph.invoke({"step": 0})
    assert inner_seen.scopes[0] is not None and inner_seen.scopes[0] is not seen.scopes[0]
    assert inner_seen.ended == [inner_seen.scopes[0]]


def test_a_cancelled_async_run_ends_its_scope() -> None:
    seen = Seen()
    graph = scoped_graph(seen, asynchronous=True)

    async def cancelled() -> None:
        run = asyncio.create_task(graph.ainvoke({"step": 0, "wait": True}))
        await asyncio.to_thread(seen.started.wait, 10)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(cancelled())
    scope = seen.scopes[0]
    assert scope is not None and seen.ended == [scope]


def test_a_scope_calls_each_callback_once_and_late_ones_at_once() -> None:
    scope, calls = RunScope(), []
    scope.on_end("a", lambda: calls.append("a"))
    scope.on_end("a", lambda: calls.append("a again"))  # one per key
    scope.on_end("b", lambda: calls.append("b"))
    scope.forget("b")
    scope.on_end("c", lambda: 1 / 0)  # a failing callback does not stop the others
    scope.on_end("d", lambda: calls.append("d"))
    scope.end()
    scope.end()
    scope.on_end("e", lambda: calls.append("e"))  # after the end: called now
    assert calls == ["a", "d", "e"]
