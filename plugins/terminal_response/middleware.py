"""Terminal response: an empty final answer after tool work gets one retry, then an error.

Some providers sometimes end a turn with an empty assistant message right after
the tools ran: no text, no tool call. Shown as is, the user gets nothing and the
run looks like a success. This middleware asks the model once more and, if the
answer is still empty, ends the run with a visible error reply.

Hooks:

* `after_model` looks at the reply just produced. It acts when the reply has
  no visible text and no tool-call intent (structured, invalid or raw calls,
  tool-use blocks, a `tool_calls` finish reason), and a tool result follows
  the latest genuine user message (a run with no user message, or whose
  user message got no tool work, is left alone). The first time in a run it
  removes the empty reply and jumps back to the model with a hidden recovery
  prompt queued; any later time it replaces the reply (same id) with a
  visible error text carrying the error-fallback marker
  (`antler.contracts.fallback`) and records the stop reason
  `error_fallback`. The retry is spent even if the retried answer calls
  another tool. Judging the same reply again (a node re-run after a failure)
  decides the same way.
* `wrap_model_call` appends the queued recovery prompt, a hidden
  `HumanMessage` with a `<system_reminder>` block, to the retried request. It
  is dropped from the queue only after the model answered, so an outer
  wrapper's retry of a failed call still carries it; it is never written to
  the conversation.
* `before_agent` gives the run a fresh budget (a resumed invocation of the
  same run too) and drops what other runs of the thread left behind;
  `after_agent` drops the run's own.

Where it sits: in the tail, after `@tail_start` (after the custom and
extension middlewares) and before `input_provenance` and `clarification`, as
position 32 (docs/chain.md#terminal_response). `after_model` hooks run in reverse chain order, so it
judges the reply after `safety_finish_reason` (which fills in an empty reply
the provider stopped for safety: such a reply is not retried) and after
`model_length_finish_reason`. Its jump back to the model is declared
(`can_jump_to: [model]`), so it works in LangChain's graph, node-fused and
inside the model node.

Configuration: none; the plugin is always on (lead chain).

Example: a model answers a `read_file` result with `""`. The request is sent
again with the recovery prompt; the model answers "The file says ...", which
is the run's final answer. Had it answered `""` again, the final answer would
be the error text, and `antler run` would report the run as failed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage

from antler.plugin_api import (
    BuildContext,
    PendingQueue,
    RunStore,
    StopReasonState,
    error_fallback_message,
    has_tool_call_intent,
    is_error_fallback,
    latest_user_message,
    message_text,
    record_stop_reason,
    run_key_of,
)

__all__ = [
    "FALLBACK_TEXT",
    "RECOVERY_NAME",
    "RECOVERY_PROMPT",
    "TerminalResponseMiddleware",
    "build",
    "is_empty_terminal_reply",
]

logger = logging.getLogger(__name__)

SOURCE = "terminal_response"

RECOVERY_NAME = "terminal_recovery"
"""`name` of the hidden recovery prompt added to the retried request."""

RECOVERY_PROMPT = (
    "<system_reminder>\n"
    "Your previous reply was empty. The tool results above are available: write your final "
    "answer to the user now, as text, based on them. Do not mention this reminder.\n"
    "</system_reminder>"
)

FALLBACK_TEXT = (
    "The model returned an empty answer twice after using its tools, so this turn has no "
    "answer. Please try again or rephrase the request."
)


def is_empty_terminal_reply(message: Any) -> bool:
    """Whether `message` is an assistant reply with no visible text and no tool-call intent."""
    return (isinstance(message, AIMessage) and not message_text(message).strip()
            and not has_tool_call_intent(message) and not is_error_fallback(message))


def _tool_work_this_turn(messages: Sequence[Any]) -> bool:
    """Whether a tool result follows the latest genuine user message."""
    user = latest_user_message(messages)
    if user is None:
        return False
    start = max(i for i, message in enumerate(messages) if message is user)
    return any(isinstance(message, ToolMessage) for message in messages[start + 1:])


class TerminalResponseMiddleware(AgentMiddleware[StopReasonState, Any, Any]):
    """Retries an empty final reply once with a hidden prompt, then ends with an error reply."""

    state_schema = StopReasonState

    def __init__(self) -> None:
        super().__init__()
        self.retried: RunStore[str] = RunStore()
        """Per run, the id of the empty reply that spent the run's retry."""
        self.pending: PendingQueue[str] = PendingQueue(max_items=1)

    # -- run bookkeeping

    def before_agent(self, state: Any, runtime: Any) -> None:
        """A fresh retry budget for this run; drop other runs' leftovers."""
        self._reset(runtime, others=True)

    async def abefore_agent(self, state: Any, runtime: Any) -> None:
        """Async form of `before_agent` (in-memory bookkeeping only)."""
        self._reset(runtime, others=True)

    def after_agent(self, state: Any, runtime: Any) -> None:
        """Forget this run."""
        self._reset(runtime)

    async def aafter_agent(self, state: Any, runtime: Any) -> None:
        """Async form of `after_agent` (in-memory bookkeeping only)."""
        self._reset(runtime)

    def _reset(self, runtime: Any, *, others: bool = False) -> None:
        if not self.retried and not self.pending:
            return  # no run retried anything (the usual case): nothing to forget
        key = run_key_of(runtime)
        self.retried.pop(key)
        self.pending.clear(key)
        if others:
            self.retried.discard_thread(key[0], keep_run=key[1])
            self.pending.discard_thread(key[0], keep_run=key[1])

    # -- the decision

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: StopReasonState, runtime: Any) -> dict[str, Any] | None:
        """Retry an empty final reply once; replace a second one by an error reply."""
        return self.judge(state, runtime)

    @hook_config(can_jump_to=["model"])
    async def aafter_model(self, state: StopReasonState, runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model` (pure state inspection, no I/O)."""
        return self.judge(state, runtime)

    def judge(self, state: Mapping[str, Any], runtime: Any) -> dict[str, Any] | None:
        """The `after_model` update for the reply just produced, if it needs one."""
        messages = state.get("messages") or []
        if not messages or not is_empty_terminal_reply(messages[-1]):
            return None
        if not _tool_work_this_turn(messages):
            return None
        reply = messages[-1]
        key = run_key_of(runtime)
        spent_on = self.retried.get(key)
        if reply.id is not None and spent_on in (None, reply.id):
            self.retried.set(key, reply.id)
            self.pending.add(key, RECOVERY_PROMPT)
            logger.info("terminal response: empty final reply after tool results; retrying once")
            return {"messages": [RemoveMessage(id=reply.id)], "jump_to": "model"}
        logger.warning("terminal response: the model answered with nothing again; ending the "
                       "turn with an error reply")
        fallback = error_fallback_message(
            FALLBACK_TEXT, error_type="empty_response", id=reply.id,
            reason="the model returned an empty final answer after its retry",
            detail="an empty reply after tool results, twice in one run")
        return {"messages": [fallback],
                **record_stop_reason("error_fallback", runtime, detail="empty final answer")}

    # -- the recovery prompt in the retried request

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Add the queued recovery prompt; drop it from the queue once the model answered."""
        return self.pending.deliver(request, handler, name=RECOVERY_NAME, source=SOURCE)

    async def awrap_model_call(self, request: Any,
                               handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """Async form of `wrap_model_call`."""
        return await self.pending.adeliver(request, handler, name=RECOVERY_NAME, source=SOURCE)


def build(ctx: BuildContext) -> TerminalResponseMiddleware:
    """Factory named in the manifest (the plugin has no configuration)."""
    return TerminalResponseMiddleware()
