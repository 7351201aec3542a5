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
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from antler.plugin_api import (
    CLOCK,
    BuildContext,
    hidden_marker,
    is_hidden,
    reinserted_from,
    reinserted_id,
    run_context,
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
REMINDER_FLAG = "dynamic_context_reminder"
"""`additional_kwargs` flag of a date reminder (system_message_coalescing keeps the newest)."""
DATE_FIELD = "reminder_date"
"""`additional_kwargs` field holding a reminder's date as ``YYYY-MM-DD``."""
MEMORY_SUFFIX = "__memory"

_LEGACY_DATE = re.compile(r"<current_date>\s*(\d{4}-\d{2}-\d{2})")

Clock = Callable[[], datetime]


def day_of(now: datetime) -> str:
    """``2026-12-01``: `now` as ``%Y-%m-%d`` writes it, without strftime's cost."""
    if now.year < 1000:  # strftime does not pad such a year on every platform
        return f"{now:%Y-%m-%d}"
    return f"{now.year}-{now.month:02d}-{now.day:02d}"


WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
"""The weekday names the reminder uses, by `datetime.weekday()`: English whatever the process's
LC_TIME locale (`%A` would read that process-global setting, which another thread may change)."""


def format_date(now: datetime) -> str:
    """The date as the reminder states it: ``2026-12-01, Tuesday`` (in any locale)."""
    return f"{day_of(now)}, {WEEKDAYS[now.weekday()]}"


def date_reminder(now: datetime, *, message_id: str | None = None,
                  source: str = SOURCE) -> SystemMessage:
    """The hidden date reminder for `now`."""
    content = f"<system-reminder><current_date>{format_date(now)}</current_date></system-reminder>"
    kwargs = {**hidden_marker(source), REMINDER_FLAG: True, DATE_FIELD: day_of(now)}
    return SystemMessage(content=content, id=message_id, additional_kwargs=kwargs)


def is_date_reminder(message: Any) -> bool:
    """Whether `message` is a date reminder this plugin (or its subagent sibling) wrote."""
    kwargs = getattr(message, "additional_kwargs", None) or {}
    return isinstance(message, SystemMessage) and bool(kwargs.get(REMINDER_FLAG))


def _reminder_date(message: Any) -> str | None:
    if not is_date_reminder(message):
        return None
    value = message.additional_kwargs.get(DATE_FIELD)
    if isinstance(value, str):
        return value
    # An older reminder without the structured field: read its own text, which
    # the server wrote. Memory and user text are never parsed for a date.
    match = _LEGACY_DATE.search(message.text if hasattr(message, "text") else "")
    return match.group(1) if match else None


def latest_reminder_date(messages: Sequence[Any]) -> str | None:
    """The date of the newest date reminder in `messages` (None: there is none)."""
    for message in reversed(messages):
        date = _reminder_date(message)
        if date is not None:
            return date
    return None


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
        return overridden(request, messages=[date_reminder(self.clock()), *request.messages])

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
        swapped: list[BaseMessage] = [date_reminder(now, message_id=target_id)]
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


def clock_service(ctx: BuildContext) -> Clock | None:
    """The build's `clock` service, when the application (or a test) provides one."""
    clock = ctx.services.items.get(CLOCK)
    return clock if callable(clock) else None


def build(ctx: BuildContext) -> DynamicContextMiddleware:
    """The middleware on the `clock` and `memory_store` services (store created if absent)."""
    config = ctx.plugin_config(DynamicContextConfig)
    store = None
    if config.memory:
        store = memory_store(ctx.services.items)
    return DynamicContextMiddleware(clock=clock_service(ctx), store=store,
                                    max_memory_chars=config.memory_max_chars,
                                    timeout_seconds=config.timeout_seconds)
