"""The scenario the battery runs: the user's message, the model's turns, the lookup tool.

`Script` is the model's side: the turn is chosen by how far the conversation
got, so one model serves any number of runs, and a run resumed in another
process picks up at the right turn. The history check runs the same scenario
on threads with `HISTORY_LENGTHS` earlier messages (`earlier_turns`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from .rules import ConformanceCrash, ConformanceTransientError

__all__ = ["DEFAULT_MESSAGE", "DEFAULT_MODE", "DEFAULT_SCENARIO", "HISTORY_LENGTHS",
           "HISTORY_NOISE_MS", "HISTORY_RATIO", "HISTORY_TURNS", "LOOKUP_TOOL", "MODES",
           "Script", "earlier_turns", "lookup_tool"]

LOOKUP_TOOL = "conformance_lookup"
DEFAULT_MESSAGE = "Look up the word 'antler' for me, please."
DEFAULT_SCENARIO: tuple[Any, ...] = (
    {"content": "", "tool_calls": [{"name": LOOKUP_TOOL, "args": {"query": "antler"}}]},
    "An antler is a bone that deer grow and shed every year.",
)
MODES: dict[str, dict[str, bool]] = {
    "unfused": {"fuse": False, "fuse_into_model": False},
    "fused": {"fuse": True, "fuse_into_model": False},
    "model_node": {"fuse": True, "fuse_into_model": True},
}
"""The three ways the chain compiler can wire a chain (`docs/compiler.md`)."""
DEFAULT_MODE = "model_node"
HISTORY_LENGTHS = (50, 2000)
"""The thread lengths (earlier messages) the history check times a turn at."""
HISTORY_TURNS = 3
"""Timed turns per length; each hook's figure is its median per turn."""
HISTORY_RATIO = 4.0
HISTORY_NOISE_MS = 0.3


def lookup_tool() -> Any:
    from langchain_core.tools import StructuredTool

    def lookup(query: str) -> str:
        return f"{query}: a branched bone on the head of a deer"

    async def alookup(query: str) -> str:
        return lookup(query)

    return StructuredTool.from_function(
        func=lookup, coroutine=alookup, name=LOOKUP_TOOL,
        description="Look a word up in the conformance battery's dictionary.")


class Script:
    """The model's side of the scenario: the turn is chosen by how far the conversation got.

    So one model (and one built agent) serves any number of runs, each on its own
    thread, and a run resumed in another process picks up at the right turn.
    `retry` fails every call once first (`ConformanceTransientError`); `crash_at`
    stops the run at that model call (`ConformanceCrash`).
    """

    def __init__(self, turns: Sequence[Any], *, retry: bool = False,
                 crash_at: int | None = None, since_user: bool = False) -> None:
        self.turns = list(turns)
        self.retry = retry
        self.crash_at = crash_at
        self.since_user = since_user
        """Count the turn from the latest user message (a thread with earlier turns)."""
        self.failed: set[Any] = set()
        self.lock = threading.Lock()

    def __call__(self, messages: Sequence[Any]) -> Any:
        from langchain_core.messages import AIMessage

        from antler.runtime.models import ScriptExhaustedError

        if self.since_user:
            messages = messages[_latest_user(messages) + 1:]
        index = sum(isinstance(message, AIMessage) for message in messages)
        if index == self.crash_at:
            raise ConformanceCrash("the conformance battery stopped the run here, as a crash "
                                   "would")
        if self.retry:
            # The thread's first message id tells the runs apart; a retry repeats the index.
            key = (index, next((m.id for m in messages if getattr(m, "id", None)), None))
            with self.lock:
                first = key not in self.failed
                self.failed.add(key)
            if first:
                raise ConformanceTransientError("a transient failure the conformance battery "
                                                "injected")
        if index >= len(self.turns):
            raise ScriptExhaustedError(
                f"the conformance scenario has {len(self.turns)} model turns and the agent "
                f"asked for turn {index + 1}; add turns to the class's `scenario`")
        turn = self.turns[index]
        turn = turn(messages) if callable(turn) else turn
        if isinstance(turn, Mapping) and turn.get("tool_calls"):
            # Ids fixed by position: the model serves many runs, which must look alike.
            calls = [{"id": f"call_{index}_{number}", **call}
                     for number, call in enumerate(turn["tool_calls"])]
            turn = {**turn, "tool_calls": calls}
        return turn

    def model(self) -> Any:
        from antler.runtime.models import ScriptedChatModel

        return ScriptedChatModel([self] * 1000)


def _latest_user(messages: Sequence[Any]) -> int:
    from langchain_core.messages import HumanMessage

    from antler.contracts.messages import is_hidden

    return max((i for i, m in enumerate(messages)
                if isinstance(m, HumanMessage) and not is_hidden(m)), default=-1)


def earlier_turns(size: int) -> list[Any]:
    """About `size` messages of earlier turns: a question, a lookup call, its result, an answer."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    messages: list[Any] = []
    for turn in range(max(1, size // 4)):
        call = {"name": LOOKUP_TOOL, "args": {"query": f"word {turn}"}, "id": f"earlier-{turn}"}
        messages += [
            HumanMessage(f"Question {turn}: what does word {turn} mean?", id=f"q-{turn}"),
            AIMessage("", tool_calls=[call], id=f"c-{turn}"),
            ToolMessage(f"word {turn}: a word of the battery", tool_call_id=call["id"],
                        name=LOOKUP_TOOL, id=f"r-{turn}"),
            AIMessage(f"Word {turn} is a word of the battery.", id=f"a-{turn}")]
    return messages
