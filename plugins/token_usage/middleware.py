"""Token usage: what each model call and the whole run cost, subagents included.

After every model call, the provider's usage of the reply
(``usage_metadata``) is logged and recorded in the run's usage record, the
state key ``antler_token_usage`` (`antler.contracts.usage`): per model call,
keyed by the reply's id, and as run totals, which `antler run` prints. The
record starts afresh with each run.

A subagent's model calls are not the lead's, but the run paid for them: the
`task` tool puts the subagent's usage in its result
(``subagent_token_usage``). When the lead's next reply arrives, the `task`
results just before it are merged into the reply that dispatched them
(its ``usage_metadata`` grows by theirs, several results of one batch in one
update), and each merged result is marked ``subagent_token_usage_attributed``
in the same update. Re-running the hook (a checkpoint replay, a retried node)
finds the mark and adds nothing; a result with missing or malformed usage, or
with no dispatching reply right before it, stays unmarked. Only the results
right before the new reply are looked at, so a tool call id reused by an
earlier run cannot pull in that run's usage.

Hooks: `after_model` / `aafter_model`.

Where it sits: the lead chain, after summarization and todo and before
title, memory, view_image and subagent_limit. `after_model` hooks run in
reverse list order, so subagent_limit has already dropped the calls it
refuses, and token_budget (placed after it) judges each reply before this
records it: the budget sees a subagent's merged usage one model call later.

Configuration (`token_usage:`): `enabled` (on by default).

Example::

    token_usage:
      enabled: false      # no usage record, no totals from `antler run`
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import OmitFromInput
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage

from antler.plugin_api import (
    ATTRIBUTED_KEY,
    SUBAGENT_USAGE_KEY,
    USAGE_KEY,
    BuildContext,
    add_usage,
    normalize_usage,
    run_id_of,
    usage_of,
)

__all__ = ["SubagentMerge", "TokenUsageMiddleware", "TokenUsageState", "build",
           "merge_subagent_usage"]

logger = logging.getLogger(__name__)


class TokenUsageState(AgentState[Any]):
    """The run's usage record: server-written, never taken from graph input."""

    antler_token_usage: Annotated[NotRequired[dict[str, Any]], OmitFromInput]


class TokenUsageMiddleware(AgentMiddleware[TokenUsageState, Any, Any]):
    """Records usage per model call and per run; merges subagents' usage exactly once."""

    state_schema = TokenUsageState

    # The sync and async hooks share one implementation: pure state work, no I/O.

    def after_model(self, state: TokenUsageState, runtime: Any) -> dict[str, Any] | None:
        """Record the new reply's usage and merge the `task` results just before it."""
        return self.record(state, runtime)

    async def aafter_model(self, state: TokenUsageState,
                           runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model` (pure state edit, no I/O)."""
        return self.record(state, runtime)

    def record(self, state: Mapping[str, Any], runtime: Any) -> dict[str, Any] | None:
        """The update: the run's usage record, and the merged messages if any."""
        messages = state.get("messages") or []
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        run_id = run_id_of(runtime)
        previous = state.get(USAGE_KEY)
        if (type(previous) is not dict and not isinstance(previous, Mapping)) \
                or previous.get("run_id") != run_id:
            previous = {}
        calls = dict(previous.get("calls") or {})
        subagents = dict(previous.get("subagents") or {})

        reply = messages[-1]
        usage = usage_of(reply)
        if usage is not None:
            calls[reply.id or f"#{len(messages) - 1}"] = usage
            logger.info("model call used %d tokens (%d in, %d out)", usage["total_tokens"],
                        usage["input_tokens"], usage["output_tokens"])
        merged = merge_subagent_usage(messages)
        for call_id, sub_usage in merged.usage_by_call.items():
            subagents[call_id] = sub_usage

        record = {"run_id": run_id, "calls": calls, "subagents": subagents,
                  **add_usage(*calls.values(), *subagents.values())}
        update: dict[str, Any] = {}
        if record != previous:
            update[USAGE_KEY] = record
        if merged.messages:
            update["messages"] = merged.messages
        return update or None


@dataclass
class SubagentMerge:
    """What merging found: the edited messages and each merged result's usage."""

    messages: list[AnyMessage] = field(default_factory=list)
    usage_by_call: dict[str, dict[str, int]] = field(default_factory=dict)


def merge_subagent_usage(messages: Sequence[AnyMessage]) -> SubagentMerge:
    """The dispatching reply with the subagents' usage added, and the results marked.

    Looks only at the `ToolMessage`s right before the newest reply and at the
    reply right before them, which must have made the calls.
    """
    result = SubagentMerge()
    if len(messages) < 2 or not isinstance(messages[-2], ToolMessage):
        return result  # no tool results right before the reply (most replies): nothing to merge
    start = len(messages) - 1
    while start > 0 and isinstance(messages[start - 1], ToolMessage):
        start -= 1
    dispatch = messages[start - 1] if start > 0 else None
    if not isinstance(dispatch, AIMessage):
        return result
    dispatched = {call.get("id") for call in dispatch.tool_calls}
    marked: list[AnyMessage] = []
    for message in messages[start:len(messages) - 1]:
        assert isinstance(message, ToolMessage)
        kwargs = message.additional_kwargs
        if kwargs.get(ATTRIBUTED_KEY) or message.tool_call_id not in dispatched:
            continue
        usage = normalize_usage(kwargs.get(SUBAGENT_USAGE_KEY))
        if usage is None:
            if SUBAGENT_USAGE_KEY in kwargs:
                logger.warning("task result %s has malformed usage %r; not counted",
                               message.tool_call_id, kwargs[SUBAGENT_USAGE_KEY])
            continue
        result.usage_by_call[message.tool_call_id] = usage
        marked.append(message.model_copy(
            update={"additional_kwargs": {**kwargs, ATTRIBUTED_KEY: True}}))
    if not marked:
        return result
    added = add_usage(*result.usage_by_call.values())
    logger.info("merged %d subagent result(s) into reply %s: +%d tokens", len(marked),
                dispatch.id, added["total_tokens"])
    # Provider detail fields (cache reads, reasoning) stay; the three counts grow.
    grown: dict[str, Any] = dict(dispatch.usage_metadata or {})
    grown.update(add_usage(usage_of(dispatch), added))
    result.messages = [dispatch.model_copy(update={"usage_metadata": grown}), *marked]
    return result


def build(ctx: BuildContext) -> TokenUsageMiddleware:
    """Factory named in the manifest (no settings besides `enabled`)."""
    return TokenUsageMiddleware()
