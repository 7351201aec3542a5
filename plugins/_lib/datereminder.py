"""The hidden date reminder dynamic_context and subagent_date_context write, and the clock.

A reminder is a hidden `SystemMessage` (``<system-reminder><current_date>
YYYY-MM-DD, Weekday</current_date></system-reminder>``) whose
``additional_kwargs`` carry a flag (system_message_coalescing keeps the
newest) and the date as ``YYYY-MM-DD``. Both plugins write it from here, so
neither imports the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from langchain_core.messages import SystemMessage

from antler.plugin_api import CLOCK, BuildContext, hidden_marker

__all__ = [
    "DATE_FIELD",
    "REMINDER_FLAG",
    "WEEKDAYS",
    "Clock",
    "clock_service",
    "date_reminder",
    "day_of",
    "format_date",
    "is_date_reminder",
    "latest_reminder_date",
]

REMINDER_FLAG = "dynamic_context_reminder"
"""`additional_kwargs` flag of a date reminder (system_message_coalescing keeps the newest)."""
DATE_FIELD = "reminder_date"
"""`additional_kwargs` field holding a reminder's date as ``YYYY-MM-DD``."""

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
                  source: str) -> SystemMessage:
    """The hidden date reminder for `now`."""
    content = f"<system-reminder><current_date>{format_date(now)}</current_date></system-reminder>"
    kwargs = {**hidden_marker(source), REMINDER_FLAG: True, DATE_FIELD: day_of(now)}
    return SystemMessage(content=content, id=message_id, additional_kwargs=kwargs)


def is_date_reminder(message: Any) -> bool:
    """Whether `message` is a date reminder `date_reminder` wrote."""
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


def clock_service(ctx: BuildContext) -> Clock | None:
    """The build's `clock` service, when the application (or a test) provides one."""
    clock = ctx.services.items.get(CLOCK)
    return clock if callable(clock) else None
