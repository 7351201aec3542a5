"""Subagent limit: cap `task` delegations per model response and per run.

Prompts tell the model how many subagents it may start; models do not always
listen. `after_model` is the hard line, applied to the assistant message just
produced, before the tools node dispatches any of its calls:

* **Concurrency.** At most `max_concurrent` `task` calls (config, clamped to
  1-4) survive in one response. The first ones are kept; later `task` calls
  are dropped; calls to other tools are never touched.
* **Total per run.** At most `max_total_per_run` `task` calls (config, default
  6, clamped to 1-50) are dispatched in one run. A run may override the total
  with the run-context attribute `max_total_subagents` (an int, clamped the
  same way; server-owned, like everything in `RunContext`). The calls a run
  dispatched are counted from the ``delegations`` channel that durable_context
  keeps (`antler.contracts.durable`), whose entries carry the id of the run
  that dispatched them, so a run cannot launch legal-sized batch after batch
  forever, while the next user turn (a new run) starts with a fresh budget.
  The record lives outside `messages`, so summarization compacting the history
  cannot reset it; the calls of the message being judged are not counted as
  earlier ones, so re-running the hook on the same message cannot count a
  call twice.

When the total cap refuses calls, a visible note is appended to the message
content so the run can close with what it has rather than end on an empty
tool-call response; if no tool call is left, `finish_reason` becomes "stop",
which is what the message now is. The edited message keeps its id, so the
`messages` reducer replaces it in place. Raw provider payloads of the dropped
calls (`additional_kwargs["tool_calls"]` and tool-use content blocks) are
removed too, so a later request does not replay calls that never ran.

Where it sits: after `view_image` and before `@guards_end`, position 27
(docs/chain.md#subagent_limit). It only has an `after_model` hook, and
those run in reverse chain order: the guards and the tail placed after it
(loop detection, token budget, safety) judge the response as the model wrote
it, and the plugins placed before it (title, memory, durable_context) see the
truncated message that is actually dispatched, so only the calls that run are
recorded as delegations. Nothing it does touches a `before_model` hook.

Configuration (`subagents:`): `max_concurrent` (3), `max_total_per_run` (6).

Example::

    subagents:
      max_concurrent: 2
      max_total_per_run: 4
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage

from antler.plugin_api import (
    BuildContext,
    DurableState,
    StopReasonState,
    record_stop_reason,
    run_context,
    run_delegations,
    run_id_of,
    strip_tool_calls,
)

from .config import MAX_TOTAL_RANGE, SubagentsConfig, clamp

__all__ = [
    "RUN_TOTAL_ATTRIBUTE",
    "TASK_TOOL",
    "SubagentLimitMiddleware",
    "SubagentLimitState",
    "build",
    "limit_note",
]

logger = logging.getLogger(__name__)

TASK_TOOL = "task"
"""The delegation tool whose calls are limited."""

RUN_TOTAL_ATTRIBUTE = "max_total_subagents"
"""`RunContext.attributes` key that overrides `max_total_per_run` for one run."""


class SubagentLimitState(StopReasonState, DurableState):
    """State the subagent limit reads (the delegations) and writes (the stop reason)."""


def limit_note(limit: int, refused: int) -> str:
    """The visible note appended when the per-run cap refuses `refused` task calls."""
    tasks = "task" if limit == 1 else "tasks"
    more = "1 more task was" if refused == 1 else f"{refused} more tasks were"
    return (f"[Delegation limit reached: one request may start at most {limit} subagent "
            f"{tasks}, so {more} not started. Continuing with the results gathered so far.]")


class SubagentLimitMiddleware(AgentMiddleware[SubagentLimitState, Any, Any]):
    """Truncates excess `task` calls per response and caps delegations per run."""

    state_schema = SubagentLimitState

    def __init__(self, max_concurrent: int = 3, max_total_per_run: int = 6,
                 task_tool: str = TASK_TOOL) -> None:
        super().__init__()
        config = SubagentsConfig(max_concurrent=max_concurrent,
                                 max_total_per_run=max_total_per_run)
        self.max_concurrent = config.max_concurrent
        self.max_total_per_run = config.max_total_per_run
        self.task_tool = task_tool

    # The sync and async hooks share one implementation: the work is pure state
    # inspection, with no I/O to await.

    def after_model(self, state: SubagentLimitState, runtime: Any) -> dict[str, Any] | None:
        """Drop the `task` calls of the new response that exceed either limit."""
        return self.limit(state, runtime)

    async def aafter_model(self, state: SubagentLimitState,
                           runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model` (pure state edit, no I/O)."""
        return self.limit(state, runtime)

    def limit(self, state: SubagentLimitState, runtime: Any) -> dict[str, Any] | None:
        """The `after_model` update: the edited message (and the stop reason), if any."""
        messages = state.get("messages") or []
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        message = messages[-1]
        calls = list(message.tool_calls)
        positions = [i for i, call in enumerate(calls) if call.get("name") == self.task_tool]
        if not positions:
            return None

        ids = [_call_id(message, i, calls[i]) for i in positions]
        earlier = [entry for entry in run_delegations(state, run_id_of(runtime))
                   if str(entry.get("id")) not in ids]
        total = self.total_limit(runtime)
        budget = max(total - len(earlier), 0)
        kept = positions[:min(self.max_concurrent, budget)]
        dropped = positions[len(kept):]
        refused_by_cap = budget < min(len(positions), self.max_concurrent)
        if not dropped:
            return None
        logger.info("subagent limit: dropping %d of %d task calls (concurrency %d, run "
                    "total %d/%d)", len(dropped), len(positions), self.max_concurrent,
                    len(earlier), total)
        note = limit_note(total, len(dropped)) if refused_by_cap else None
        update: dict[str, Any] = {"messages": [strip_tool_calls(message, set(dropped), note)]}
        if refused_by_cap:
            update.update(record_stop_reason("subagent_limit_capped", runtime,
                                             detail=f"{total} per run"))
        return update

    def total_limit(self, runtime: Any) -> int:
        """The run's total cap: the run-context override if valid, else the config."""
        override = run_context(runtime).attributes.get(RUN_TOTAL_ATTRIBUTE)
        if isinstance(override, int) and not isinstance(override, bool):
            return clamp(override, MAX_TOTAL_RANGE)
        if override is not None:
            logger.warning("ignoring run attribute %s=%r: not an integer", RUN_TOTAL_ATTRIBUTE,
                           override)
        return self.max_total_per_run


def _call_id(message: AIMessage, position: int, call: Mapping[str, Any]) -> str:
    return str(call.get("id") or f"{message.id}#{position}")


def build(ctx: BuildContext) -> SubagentLimitMiddleware:
    """Factory named in the manifest: limits from the `subagents:` section (clamped)."""
    config = ctx.plugin_config(SubagentsConfig)
    return SubagentLimitMiddleware(config.max_concurrent, config.max_total_per_run)
