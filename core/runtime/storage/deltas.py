"""Delta checkpoints: storing a growing channel as its writes, not its whole value.

A LangGraph checkpoint stores every channel's full value. The `messages`
channel grows by a few messages per step, so on a thread of H messages each
checkpoint writes all H again, and a turn of N steps writes N * H messages.
LangGraph's `DeltaChannel` stores only the step's own writes and, every
`snapshot_every` updates, the full value; reading a checkpoint replays the
writes since the last snapshot through the channel's reducer.

`storage.messages_channel: delta` puts `messages` in that mode, together with
every channel a middleware names in its `antler_delta_channels` attribute (a
reducer channel that grows the way `messages` does). The reducer is the one
the state schema declares (`add_messages` for `messages`), applied to each
write in turn, so the reconstructed value is the one the full channel holds,
removals (`RemoveMessage`, a summarization's reset) included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from antler.errors import BuildError

__all__ = ["DELTA_ATTRIBUTE", "delta_channel_names", "folding", "use_delta_channels"]

DELTA_ATTRIBUTE = "antler_delta_channels"
"""A middleware's class attribute: names of its growing reducer channels to store as deltas."""


def folding(operator: Callable[[Any, Any], Any]) -> Callable[[Any, Sequence[Any]], Any]:
    """`operator(value, write)` as `DeltaChannel`'s batch reducer: the writes one by one.

    Folding write by write is what a full reducer channel does within a step, so
    any batch of writes gives the value the full channel would hold.
    """

    def reduce(value: Any, writes: Sequence[Any]) -> Any:
        for write in writes:
            value = operator(value, write)
        return value

    reduce.__name__ = f"folding_{getattr(operator, '__name__', 'reducer')}"
    return reduce


def delta_channel_names(middlewares: Iterable[Any]) -> list[str]:
    """`messages` and the channels the middlewares declare, in first-seen order."""
    names = ["messages"]
    for middleware in middlewares:
        for name in getattr(middleware, DELTA_ATTRIBUTE, ()) or ():
            if name not in names:
                names.append(name)
    return names


def use_delta_channels(graph: Any, names: Sequence[str], snapshot_every: int) -> list[str]:
    """Store `names` of compiled `graph` as delta channels; returns the names switched.

    Only reducer channels can be stored as deltas (a last-value channel has
    nothing to replay); a name the graph does not have, or that is not a reducer
    channel, raises `BuildError` naming it and the channel kind found.
    """
    from langgraph.channels import BinaryOperatorAggregate, DeltaChannel

    switched = []
    for name in names:
        channel = graph.channels.get(name)
        if isinstance(channel, DeltaChannel):
            continue
        if not isinstance(channel, BinaryOperatorAggregate):
            found = "no such channel" if channel is None else type(channel).__name__
            raise BuildError(
                f"storage.messages_channel: delta cannot store channel {name!r} as deltas "
                f"({found}); declare only reducer channels (Annotated[list, reducer]) in "
                f"{DELTA_ATTRIBUTE}, or set storage.messages_channel: full")
        delta = DeltaChannel(folding(channel.operator), channel.typ,
                             snapshot_frequency=snapshot_every)
        delta.key = name
        graph.channels[name] = delta
        switched.append(name)
    return switched
