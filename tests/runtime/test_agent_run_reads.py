"""`AntlerAgent`'s runs read the thread's checkpoint once before the graph reads it itself.

Settling a stopped run and giving a repeated message id a fresh one both need
the thread's last checkpoint; a run reads it once, under the thread's lock,
and both use that read. Counted against the same run on `agent.graph` directly,
through every way of running (`invoke`, `stream`, `ainvoke`, `astream`), on the
in-memory and the SQLite saver, with the real default chain.
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from antler.chain.config import parse_config
from antler.plugin_api.registry import discover
from antler.runtime.agent import AntlerAgent, create_agent
from antler.runtime.models import ScriptedChatModel

QUIET = "title: {enabled: false}\nmemory: {enabled: false}\n"
ROUTES = ["invoke", "stream", "ainvoke", "astream"]
_READING: contextvars.ContextVar[bool] = contextvars.ContextVar("reading", default=False)


@pytest.fixture(scope="module")
def registry() -> Any:
    return discover()


def make_agent(home: Path, registry: Any, checkpointer: str) -> AntlerAgent:
    return create_agent(parse_config(QUIET, registry),
                        model=ScriptedChatModel(["one", "two", "three"]), registry=registry,
                        base_dir=home, checkpointer=checkpointer)


def count_reads(saver: Any) -> list[int]:
    """A counter of the checkpoint reads of `saver` (an async read that reads through
    the sync method counts once)."""
    reads = [0]
    get_tuple, aget_tuple = saver.get_tuple, saver.aget_tuple

    def counted(config: Any) -> Any:
        if not _READING.get():
            reads[0] += 1
        token = _READING.set(True)
        try:
            return get_tuple(config)
        finally:
            _READING.reset(token)

    async def acounted(config: Any) -> Any:
        reads[0] += 1
        token = _READING.set(True)
        try:
            return await aget_tuple(config)
        finally:
            _READING.reset(token)

    saver.get_tuple, saver.aget_tuple = counted, acounted
    return reads


def run_agent(agent: AntlerAgent, route: str, message: Any, thread: str) -> None:
    if route == "invoke":
        agent.invoke(message, thread_id=thread)
    elif route == "stream":
        list(agent.stream(message, thread_id=thread))
    else:
        async def run() -> None:
            if route == "ainvoke":
                await agent.ainvoke(message, thread_id=thread)
            else:
                async for _ in agent.astream(message, thread_id=thread):
                    pass
        asyncio.run(run())


def run_graph(agent: AntlerAgent, route: str, message: Any, thread: str) -> None:
    config, context = agent.run_config(thread), agent.context(thread)
    payload = {"messages": [message]}
    if route in ("invoke", "stream"):
        agent.graph.invoke(payload, config=config, context=context)
    else:
        asyncio.run(agent.graph.ainvoke(payload, config=config, context=context))


@pytest.mark.parametrize("checkpointer", ["memory", "sqlite"])
@pytest.mark.parametrize("route", ROUTES)
def test_a_run_with_a_repeated_id_reads_the_checkpoint_once(tmp_path, registry, checkpointer,
                                                            route):
    with make_agent(tmp_path, registry, checkpointer) as agent:
        agent.invoke(HumanMessage("first", id="m1"), thread_id="t1")
        kept = {m.id: m.content for m in agent.state("t1")["messages"]}
        taken = next(iter(kept))  # an id the thread has
        reads = count_reads(agent.checkpointer)
        run_graph(agent, route, HumanMessage("direct", id=str(uuid.uuid4())), "t1")
        graph_reads, reads[0] = reads[0], 0
        run_agent(agent, route, HumanMessage("again", id=taken), "t1")
        agent_reads = reads[0]
        messages = agent.state("t1")["messages"]
    # The settling read, also the one the repeated id is checked against: not two.
    assert agent_reads - graph_reads == 1, (agent_reads, graph_reads)
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    assert [m.content for m in humans] == ["first", "direct", "again"]
    # "again" got a fresh id: every message the thread had is still there, unchanged.
    assert {m.id: m.content for m in messages if m.id in kept} == kept
    assert humans[-1].id not in kept


@pytest.mark.parametrize("route", ROUTES)
def test_a_message_without_an_id_needs_no_second_read(tmp_path, registry, route):
    with make_agent(tmp_path, registry, "memory") as agent:
        agent.invoke("first", thread_id="t1")
        reads = count_reads(agent.checkpointer)
        run_graph(agent, route, HumanMessage("direct"), "t1")
        graph_reads, reads[0] = reads[0], 0
        run_agent(agent, route, "again", "t1")
        assert reads[0] - graph_reads == 1
        humans = [m.content for m in agent.state("t1")["messages"]
                  if isinstance(m, HumanMessage)]
    assert humans == ["first", "direct", "again"]
