"""Dynamic context: the current date, and the user's memory, next to the run's user message.

A model knows neither today's date nor what it learned about the user in
earlier threads. This middleware tells it, without rewriting the system
prompt (which would break the provider's prompt cache on every new day) and
without touching what the user typed.

Hooks:

* `before_agent` (and `abefore_agent`) decides once per run whether a reminder
  is due and writes it into the conversation, where it stays, so the history
  of a thread is the same on every later request (prefix caching). A reminder
  is due when the thread has none yet (the first turn: the date, plus the
  user's memory facts when configured) or when the date of the newest one is
  not today (the run crossed midnight since: the date only). Otherwise
  nothing happens. The target is the latest genuine user message; when it
  already is a re-added copy, nothing is done.

  The reminder takes the target's place by the *ID swap*: a hidden
  `SystemMessage` reuses the target's id (``<system-reminder><current_date>
  YYYY-MM-DD, Weekday</current_date></system-reminder>``, with the structured
  ``reminder_date`` field), the memory follows as a hidden `HumanMessage`
  ``<id>__memory`` (user-influenceable text stays at user role and never
  carries a date field), and the user's message is re-added unchanged as
  ``<id>__user``. input_sanitization treats that copy as the user's message.
  The swap is the chain's specified behaviour, and it is what puts the date
  and the memory *before* the question in one append-only write (the
  ``messages`` reducer replaces a message in place only by its id; anything
  else is appended). Its cost for a client: after the first turn, the id the
  client gave its message names the reminder, so a client that edits or
  removes its message by id (``update_state``) must use ``<id>__user``.
  The date of the newest reminder is read from the structured field; the
  content is parsed only for marked reminders without it, never for the
  memory message, so a date forged into memory changes nothing.

  The async form reads memory in a worker thread and gives up after
  `timeout_seconds`: a slow store costs the reminder of one turn, never the run.

* `wrap_model_call` (and `awrap_model_call`): when summarization has folded
  the reminder into its summary, the request (only) gets today's date
  reminder again, so every model call knows the date.

Where it sits: lead chain, after uploads (the swapped copy carries the
`<uploaded_files>` block) and the tool gates, before summarization; its
`before_agent` runs before input_provenance, which records the copy as the
server left it. The reminder is a `SystemMessage` inside the history, so the
chain requires `system_message_coalescing`, which moves it into the one
leading system message of each request. Subagents get
`subagent_date_context` instead (see `subagent.py`).

Configuration (`dynamic_context:`): `enabled` (on by default; false also
turns off `subagent_date_context`), `memory` (inject memory facts, on),
`memory_max_chars` (4000; the newest facts are kept), `timeout_seconds` (5).
The clock is the `clock` service (a callable returning the current
`datetime`; local time by default); memory facts come from the
`memory_store` service (an object with ``facts(user_id)``; by default the
user's facts in the shared `store` service).

Example::

    dynamic_context:
      memory: false
"""

from __future__ import annotations

import asyncio
import html
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from antler.plugin_api import (
    BuildContext,
    hidden_marker,
    is_hidden,
    reinserted_from,
    reinserted_id,
    run_context,
)
from antler.plugins._lib.datereminder import (
    DATE_FIELD,
    REMINDER_FLAG,
    WEEKDAYS,
    Clock,
    clock_service,
    date_reminder,
    day_of,
    format_date,
    is_date_reminder,
    latest_reminder_date,
)
from antler.plugins._lib.memory.service import memory_store
from antler.plugins._lib.requestcopy import overridden

from .config import DynamicContextConfig

__all__ = [
    "DATE_FIELD",
    "MEMORY_SUFFIX",
    "REMINDER_FLAG",
    "SOURCE",
    "WEEKDAYS",
    "DynamicContextMiddleware",
    "build",
    "date_reminder",
    "format_date",
    "is_date_reminder",
    "latest_reminder_date",
]

logger = logging.getLogger(__name__)

SOURCE = "dynamic_context"
MEMORY_SUFFIX = "__memory"
def _target(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the latest genuine user message, unless it already is a re-added copy."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, HumanMessage) and not is_hidden(message):
            return None if reinserted_from(message.id) else index
    return None


def memory_text(facts: Sequence[Any], max_chars: int) -> str:
    """The facts as an escaped ``<memory>`` block, newest kept within `max_chars` (or "")."""
    lines: list[str] = []
    used = 0
    for fact in reversed(facts):
        text = " ".join(str(getattr(fact, "content", fact)).split())
        line = f"- {html.escape(text, quote=False)}"
        if not text or used + len(line) + 1 > max_chars:
            continue
        lines.append(line)
        used += len(line) + 1
    if not lines:
        return ""
    body = "\n".join(reversed(lines))
    return f"<memory>\nWhat you know about the user from earlier conversations:\n{body}\n</memory>"


class DynamicContextMiddleware(AgentMiddleware[Any, Any]):
    """Puts a hidden date (and memory) reminder next to the run's user message."""

    def __init__(self, *, clock: Clock | None = None, store: Any = None,
                 max_memory_chars: int = 4000, timeout_seconds: float = 5.0) -> None:
        super().__init__()
        self.clock: Clock = clock or datetime.now
        self.store = store
        self.max_memory_chars = max_memory_chars
        self.timeout_seconds = timeout_seconds

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self._inject(state, runtime)

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(asyncio.to_thread(self._inject, state, runtime),
                                          self.timeout_seconds)
        except TimeoutError:
            logger.warning("dynamic_context: reading the user's memory took longer than %ss; "
                           "no reminder this turn", self.timeout_seconds)
            return None

    # The sync and async hooks share one implementation: the dated request, with no I/O to
    # await (LangChain calls one or the other by how the agent is run).

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        return handler(self._dated(request))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
                               ) -> Any:
        return await handler(self._dated(request))

    def _dated(self, request: ModelRequest) -> ModelRequest:
        if latest_reminder_date(request.messages) is not None:
            return request
        reminder = date_reminder(self.clock(), source=SOURCE)
        return overridden(request, messages=[reminder, *request.messages])

    # Both forms call this helper: a fused node's proxy resets the hook methods
    # it runs itself, so `self.before_agent` may be a no-op there.
    def _inject(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        messages: Sequence[BaseMessage] = state.get("messages") or []
        index = _target(messages)
        if index is None:
            return None
        now = self.clock()
        latest = latest_reminder_date(messages)
        if latest == day_of(now):
            return None
        target = messages[index]
        target_id = target.id or str(uuid.uuid5(uuid.NAMESPACE_OID, repr(target.content)))
        swapped: list[BaseMessage] = [date_reminder(now, message_id=target_id, source=SOURCE)]
        if latest is None:
            memory = self._memory(runtime)
            if memory:
                swapped.append(HumanMessage(content=memory, id=f"{target_id}{MEMORY_SUFFIX}",
                                            additional_kwargs=hidden_marker(SOURCE)))
        swapped.append(target.model_copy(update={"id": reinserted_id(target_id)}))
        if index == len(messages) - 1 and target.id:
            # The reminder replaces the target by id; the rest is appended after it.
            return {"messages": swapped}
        rebuilt = [*messages[:index], *swapped, *messages[index + 1:]]
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *rebuilt]}

    def _memory(self, runtime: Any) -> str:
        if self.store is None:
            return ""
        user_id = run_context(runtime).user_id
        try:
            facts = self.store.facts(user_id)
        except Exception as exc:  # a broken store costs the memory, never the run
            logger.warning("dynamic_context: could not read the memory of user %r: %s",
                           user_id, exc)
            return ""
        return memory_text(facts, self.max_memory_chars)


def build(ctx: BuildContext) -> DynamicContextMiddleware:
    """The middleware on the `clock` and `memory_store` services (store created if absent)."""
    config = ctx.plugin_config(DynamicContextConfig)
    store = None
    if config.memory:
        store = memory_store(ctx.services.items)
    return DynamicContextMiddleware(clock=clock_service(ctx), store=store,
                                    max_memory_chars=config.memory_max_chars,
                                    timeout_seconds=config.timeout_seconds)
