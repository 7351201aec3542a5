"""Streams of a compiled graph, shown as the unfused graph would show them.

A fused node's `updates` chunk becomes one chunk per member hook, named as the
unfused graph names its nodes, from what the node reported on LangGraph's
`custom` stream. A fused node reports there only to a run that asks with its
plan's token (`asking_for_hook_events`), so the reports reach the in-process
caller that expands them and never a LangGraph Server client.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from .fusionplan import FUSED_EVENT, HOOK_EVENTS_KEY, START_NODE, FusionPlan


def expand_fused_updates(chunks: Iterable[Any], plan: FusionPlan, stream_mode: Any,
                         ) -> Iterator[Any]:
    """Turn each fused node's `updates` chunk back into one chunk per member hook.

    `chunks` must come from a stream that includes the `custom` mode (see
    `stream_modes_for`); `stream_mode` is what the caller asked for, so the
    output has the shape the caller expects. Custom events of this plan's fused
    nodes are dropped unless the caller asked for `custom`.
    """
    expand = _Expander(plan, stream_mode)
    for chunk in chunks:
        yield from expand(chunk)


async def aexpand_fused_updates(chunks: AsyncIterable[Any], plan: FusionPlan,
                                stream_mode: Any) -> AsyncIterator[Any]:
    """`expand_fused_updates` over an async stream (`graph.astream`)."""
    expand = _Expander(plan, stream_mode)
    async for chunk in chunks:
        for item in expand(chunk):
            yield item


class _Expander:
    """One stream's expansion: chunk in, the chunks the caller sees out."""

    def __init__(self, plan: FusionPlan, stream_mode: Any) -> None:
        self.plan = plan
        self.single = isinstance(stream_mode, str)
        self.wanted = {stream_mode} if self.single else set(stream_mode)
        # A fused node's hook events arrive on `custom` before its `updates` chunk.
        self.pending: dict[str, list[dict[str, Any]]] = {}

    def __call__(self, chunk: Any) -> list[Any]:
        plan, single, wanted, pending = self.plan, self.single, self.wanted, self.pending
        mode, payload = chunk if isinstance(chunk, tuple) and len(chunk) == 2 else (None, chunk)
        if mode == "custom" and isinstance(payload, dict) and \
                payload.get("token") == plan.token and payload.get(FUSED_EVENT) in \
                plan.streamed_nodes:
            node = payload[FUSED_EVENT]
            shown = [] if "custom" not in wanted else [payload if single else (mode, payload)]
            if node == START_NODE:
                # LangGraph streams no `updates` chunk for its input step: its hooks'
                # updates are shown now, in the order they ran.
                return [*shown, *self._updates(payload["hooks"])]
            pending[node] = payload["hooks"]
            return shown
        elif mode == "updates" and isinstance(payload, dict) and len(payload) == 1:
            (node, _update), = payload.items()
            if node in pending:
                return self._updates(pending.pop(node))
        if mode is None:
            return [payload]
        if mode in wanted:
            return [payload if single else (mode, payload)]
        return []

    def _updates(self, events: list[dict[str, Any]]) -> list[Any]:
        if "updates" not in self.wanted:
            return []
        return [{event["node"]: event["update"]} if self.single
                else ("updates", {event["node"]: event["update"]}) for event in events]


def asking_for_hook_events(config: Any, plan: FusionPlan) -> dict[str, Any]:
    """`config` (a run's config) with the request for `plan`'s fused nodes' hook events."""
    config = dict(config or {})
    config["configurable"] = {**(config.get("configurable") or {}), HOOK_EVENTS_KEY: plan.token}
    return config


def stream_modes_for(stream_mode: Any) -> Any:
    """The modes to ask LangGraph for so that `expand_fused_updates` can work."""
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    return modes if "custom" in modes else [*modes, "custom"]


def wants_expansion(plan: FusionPlan | None, stream_mode: Any) -> bool:
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    return plan is not None and bool(plan.streamed_nodes) and "updates" in modes
