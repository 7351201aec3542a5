"""Reducer channels that copy without working their type out again (`lean_channels`).

LangGraph makes a new channel object for every state key on every run (from
the checkpoint), and again for every conditional edge it evaluates (a
``fresh`` read copies every channel of the graph to apply the node's writes).
A `BinaryOperatorAggregate` (a key declared with a reducer) does all of its
constructor's work each time: it strips ``Annotated``/``NotRequired`` from the
declared type, compares the result with four abstract collection types and
calls it for the empty value. The result never changes for a channel, so
`LeanAggregate` works it out once, when the compiled graph is built, and
then copies by setting its slots.

Nothing else differs: the same operator, the same empty value (a new one per
copy, as before), the same checkpointed value and the same reading of one
(a value it does not recognise goes through LangGraph's own
`from_checkpoint`), so a thread written before the switch reads the same, and
one written after it reads the same without it. A reducer channel whose empty
value is not a plain ``list``, ``dict`` or ``set`` keeps LangGraph's class.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["EMPTY_TYPES", "lean_aggregate_class", "lean_channels"]

EMPTY_TYPES = (list, dict, set)
"""The empty values `LeanAggregate` makes itself (the declared type stripped to one of these,
or a TypedDict, whose instance is a dict)."""


@functools.cache
def lean_aggregate_class() -> type[Any]:
    """The `LeanAggregate` class (LangGraph is imported on first use, not with Antler)."""
    from langgraph.channels import BinaryOperatorAggregate

    class LeanAggregate(BinaryOperatorAggregate):
        """A `BinaryOperatorAggregate` whose empty value's type is known once."""

        __slots__ = ("empty",)

        empty: type[Any] | None
        """The type of the empty value (`EMPTY_TYPES`), None where LangGraph leaves the
        channel empty (a type it cannot call)."""

        @classmethod
        def of(cls, channel: Any) -> Any:
            """A lean channel equal to `channel`, or None when its empty value is not one
            `LeanAggregate` makes (`EMPTY_TYPES`) nor none at all."""
            probe = BinaryOperatorAggregate(channel.typ, channel.operator)
            if probe.is_available():
                empty: type[Any] | None = type(probe.value)
                if empty not in EMPTY_TYPES or probe.value:
                    return None
            else:
                empty = None
            lean = object.__new__(cls)
            lean.typ, lean.key, lean.operator, lean.empty = (
                channel.typ, channel.key, channel.operator, empty)
            lean.value = channel.value
            return lean

        def _with(self, value: Any) -> Any:
            made = object.__new__(type(self))
            made.typ, made.key, made.operator, made.empty, made.value = (
                self.typ, self.key, self.operator, self.empty, value)
            return made

        def copy(self) -> Any:
            return self._with(self.value)

        def from_checkpoint(self, checkpoint: Any) -> Any:
            kind = type(checkpoint)
            if kind in EMPTY_TYPES:
                return self._with(checkpoint)
            if checkpoint is _missing():
                empty = self.empty
                return self._with(empty() if empty is not None else checkpoint)
            # Anything else (a snapshot of a delta channel, another type): LangGraph's way.
            return self._with(super().from_checkpoint(checkpoint).value)

    return LeanAggregate


@functools.cache
def _missing() -> Any:
    """LangGraph's marker of a channel with no value."""
    from antler.compat import langgraph_private

    return langgraph_private("langgraph._internal._typing", "MISSING")


def lean_channels(graph: Any) -> list[str]:
    """Make every plain `BinaryOperatorAggregate` channel of compiled `graph` a
    `LeanAggregate`; returns the names switched (subclasses, such as delta channels, and
    channels whose empty value is not a plain list, dict or set are left as they are)."""
    from langgraph.channels import BinaryOperatorAggregate

    lean = lean_aggregate_class()
    switched = []
    for name, channel in list(graph.channels.items()):
        if type(channel) is not BinaryOperatorAggregate:
            continue
        replacement = lean.of(channel)
        if replacement is not None:
            graph.channels[name] = replacement
            switched.append(name)
    return switched
