"""subagent_date_context: a subagent's requests carry today's date.

A delegated task runs in a fresh conversation, so it has no reminder from the
lead. This middleware appends one hidden date `SystemMessage` (the same form
as dynamic_context's, marked so system_message_coalescing keeps only the
newest) to the subagent's conversation.

Hooks: `before_agent` (and `abefore_agent`): appends the reminder unless the
conversation already has one for today. No memory (a subagent works for the
lead, not for the user directly), no ID swap, no midnight logic. The
reminder's text is written once a day; every delegation gets its own copy of
it. The weekday is named without the process's locale (`format_date`), so the
text is the same in every run, parallel ones included, and no run reads or
changes locale state.

Where it sits: subagent chain only, immediately before
system_message_coalescing, which merges the reminder into the one leading
system message of every request.

Configuration: none; the clock is the `clock` service, as for dynamic_context.

Example: on whenever the subagent chain is built; nothing to configure.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import SystemMessage

from antler.plugin_api import BuildContext
from antler.plugins._lib.datereminder import (
    Clock,
    clock_service,
    date_reminder,
    day_of,
    latest_reminder_date,
)

__all__ = ["SOURCE", "SubagentDateContextMiddleware", "build"]

SOURCE = "subagent_date_context"


class SubagentDateContextMiddleware(AgentMiddleware[Any, Any]):
    """Appends a hidden date reminder to a subagent's conversation."""

    def __init__(self, clock: Clock | None = None) -> None:
        super().__init__()
        self.clock: Clock = clock or datetime.now
        self._made: tuple[str, SystemMessage] | None = None
        """The last reminder written, by its day."""

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self._append(state)

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self._append(state)

    def _append(self, state: Any) -> dict[str, Any] | None:
        now = self.clock()
        day = day_of(now)
        if latest_reminder_date(state.get("messages") or []) == day:
            return None
        return {"messages": [self.reminder(now, day)]}

    def reminder(self, now: datetime, day: str) -> SystemMessage:
        """`date_reminder(now, source=SOURCE)`: a copy of the one written for `day`."""
        made = self._made
        if made is None or made[0] != day:
            made = self._made = (day, date_reminder(now, source=SOURCE))
        written = made[1]
        # A message of its own: nothing mutable is shared with the copy kept here.
        kwargs = {name: dict(value) if isinstance(value, dict) else value
                  for name, value in written.additional_kwargs.items()}
        return SystemMessage(content=written.content, id=None, additional_kwargs=kwargs)


def build(ctx: BuildContext) -> SubagentDateContextMiddleware:
    """The middleware on the build's `clock` service (local time when absent)."""
    return SubagentDateContextMiddleware(clock_service(ctx))
