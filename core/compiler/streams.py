"""Streams of a compiled graph, shown as the unfused graph would show them.

A fused node's `updates` chunk becomes one chunk per member hook, named as the
unfused graph names its nodes, from what the node reported on LangGraph's
`custom` stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .plan import FUSED_EVENT, FusionPlan

if TYPE_CHECKING:
    pass


def expand_fused_updates(chunks: Iterable[Any], plan: FusionPlan, stream_mode: Any,
                         ) -> Iterator[Any]:
    """Turn each fused node's `updates` chunk back into one chunk per member hook.

    `chunks` must come from a stream that includes the `custom` mode (see
    `stream_modes_for`); `stream_mode` is what the caller asked for, so the
    output has the shape the caller expects. Custom events of this plan's fused
    nodes are dropped unless the caller asked for `custom`.
    """
    fused = plan.streamed_nodes
    single = isinstance(stream_mode, str)
    wanted = {stream_mode} if single else set(stream_mode)
    pending: dict[str, list[dict[str, Any]]] = {}
    for chunk in chunks:
        mode, payload = chunk if isinstance(chunk, tuple) and len(chunk) == 2 else (None, chunk)
        if mode == "custom" and isinstance(payload, dict) and \
                payload.get("token") == plan.token and payload.get(FUSED_EVENT) in fused:
            pending[payload[FUSED_EVENT]] = payload["hooks"]
            if "custom" not in wanted:
                continue
        elif mode == "updates" and isinstance(payload, dict) and len(payload) == 1:
            (node, _update), = payload.items()
            if node in pending:
                for event in pending.pop(node):
                    expanded = {event["node"]: event["update"]}
                    yield expanded if single else ("updates", expanded)
                continue
        if mode is None:
            yield payload
        elif mode in wanted:
            yield payload if single else (mode, payload)


def stream_modes_for(stream_mode: Any) -> Any:
    """The modes to ask LangGraph for so that `expand_fused_updates` can work."""
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    return modes if "custom" in modes else [*modes, "custom"]


def wants_expansion(plan: FusionPlan | None, stream_mode: Any) -> bool:
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    return plan is not None and bool(plan.streamed_nodes) and "updates" in modes
