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
  same way; server-owned, like everything in `RunContext`). Dispatched calls
  are recorded in the `subagent_dispatches` state channel, tagged with the run
  id, so a run cannot launch legal-sized batch after batch forever, while the
  next user turn (a new run) starts with a fresh budget. The ledger lives
  outside `messages`, so summarization compacting the history cannot reset it;
  it records call ids, so re-running the hook on the same message cannot count
  a call twice.

When the total cap refuses calls, a visible note is appended to the message
content so the run can close with what it has rather than end on an empty
tool-call response; if no tool call is left, `finish_reason` becomes "stop",
which is what the message now is. The edited message keeps its id, so the
`messages` reducer replaces it in place. Raw provider payloads of the dropped
calls (`additional_kwargs["tool_calls"]` and tool-use content blocks) are
removed too, so a later request does not replay calls that never ran.

Where it sits: after `view_image` and before `@guards_end`, as seed 003's
layer 10 and seed 000's position 27. It only has an `after_model` hook, and
those run in reverse chain order: the guards and the tail placed after it
(loop detection, token budget, safety) judge the response as the model wrote
it, and the plugins placed before it (title, memory) see the truncated message
that is actually dispatched. Nothing it does touches a `before_model` hook.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

from antler.contracts.messages import strip_tool_calls
from antler.contracts.stop_reason import StopReasonState, record_stop_reason
from antler.plugin_api.context import BuildContext
from antler.runtime.runcontext import run_context, run_id_of

from .config import MAX_TOTAL_RANGE, SubagentsConfig, clamp

__all__ = [
    "LEDGER_KEY",
    "RUN_TOTAL_ATTRIBUTE",
    "TASK_TOOL",
    "SubagentLedger",
    "SubagentLimitMiddleware",
    "SubagentLimitState",
    "build",
    "limit_note",
]

logger = logging.getLogger(__name__)

TASK_TOOL = "task"
"""The delegation tool whose calls are limited."""

LEDGER_KEY = "subagent_dispatches"
"""State channel holding the current run's dispatched `task` call ids."""

RUN_TOTAL_ATTRIBUTE = "max_total_subagents"
"""`RunContext.attributes` key that overrides `max_total_per_run` for one run."""


class SubagentLedger(TypedDict):
    """The `task` calls one run has dispatched."""

    run: str
    task_call_ids: list[str]


class SubagentLimitState(StopReasonState):
    """State added by the subagent limit: the per-run ledger, private to the graph."""

    subagent_dispatches: NotRequired[Annotated[SubagentLedger | None, PrivateStateAttr]]


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
        """The `after_model` update: the edited message and the run's ledger, if changed."""
        messages = state.get("messages") or []
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        message = messages[-1]
        calls = list(message.tool_calls)
        positions = [i for i, call in enumerate(calls) if call.get("name") == self.task_tool]
        if not positions:
            return None

        run = self.run_key(messages, runtime)
        ledger = state.get(LEDGER_KEY)
        recorded: list[str] = []
        if isinstance(ledger, Mapping) and ledger.get("run") == run:
            recorded = [str(i) for i in ledger.get("task_call_ids") or ()]
        ids = [_call_id(message, i, calls[i]) for i in positions]
        earlier = [call_id for call_id in recorded if call_id not in ids]
        total = self.total_limit(runtime)
        budget = max(total - len(earlier), 0)
        kept = positions[:min(self.max_concurrent, budget)]
        dropped = positions[len(kept):]
        refused_by_cap = budget < min(len(positions), self.max_concurrent)

        new_ledger: SubagentLedger = {
            "run": run, "task_call_ids": earlier + [_call_id(message, i, calls[i]) for i in kept]}
        update: dict[str, Any] = {}
        if new_ledger != ledger:
            update[LEDGER_KEY] = new_ledger
        if dropped:
            logger.info("subagent limit: dropping %d of %d task calls (concurrency %d, run "
                        "total %d/%d)", len(dropped), len(positions), self.max_concurrent,
                        len(earlier), total)
            note = limit_note(total, len(dropped)) if refused_by_cap else None
            update["messages"] = [strip_tool_calls(message, set(dropped), note)]
            if refused_by_cap:
                update.update(record_stop_reason("subagent_limit_capped", runtime,
                                                 detail=f"{total} per run"))
        return update or None

    def total_limit(self, runtime: Any) -> int:
        """The run's total cap: the run-context override if valid, else the config."""
        override = run_context(runtime).attributes.get(RUN_TOTAL_ATTRIBUTE)
        if isinstance(override, int) and not isinstance(override, bool):
            return clamp(override, MAX_TOTAL_RANGE)
        if override is not None:
            logger.warning("ignoring run attribute %s=%r: not an integer", RUN_TOTAL_ATTRIBUTE,
                           override)
        return self.max_total_per_run

    @staticmethod
    def run_key(messages: Sequence[AnyMessage], runtime: Any) -> str:
        """What the ledger is tagged with: the run id.

        Antler's agents always run with a run id. A bare graph invoked without one
        falls back to the latest human message, i.e. "since the user last spoke".
        """
        run_id = run_id_of(runtime)
        if run_id:
            return f"run:{run_id}"
        human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        return f"message:{human.id}" if human is not None and human.id else "unknown"


def _call_id(message: AIMessage, position: int, call: Mapping[str, Any]) -> str:
    return str(call.get("id") or f"{message.id}#{position}")


def build(ctx: BuildContext) -> SubagentLimitMiddleware:
    """Factory named in the manifest: limits from the `subagents:` section (clamped)."""
    config = ctx.config if isinstance(ctx.config, SubagentsConfig) else SubagentsConfig()
    return SubagentLimitMiddleware(config.max_concurrent, config.max_total_per_run)
