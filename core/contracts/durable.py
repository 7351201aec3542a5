"""The durable record of a thread: the `task` delegations and the skills it read.

Summarization folds old messages into a summary, and with them the `task`
calls and `read_file` results that said what was delegated and which skills
were loaded. The durable_context plugin keeps that record in two state
channels instead, outside `messages`, and other plugins read it from there:

``delegations``
    One entry per `task` call: ``id`` (the call id), ``description``,
    ``status`` (`IN_PROGRESS` until the result arrives, then one of
    `TERMINAL_STATUSES`), ``created_at``, ``run_id`` (the run that dispatched
    it) and, once finished, ``stop_reason``, ``result_brief``,
    ``result_sha256`` and ``message_id`` (the result's). The reducer merges
    by id keeping first-seen order and the first ``created_at``/``run_id``;
    a terminal status is never replaced by a non-terminal one; only the
    newest `MAX_DELEGATIONS` entries are kept.
``skill_context``
    One entry per skill whose `SKILL.md` the agent read: ``path`` (where the
    sandbox shows it), ``name``, ``description`` (at most
    `MAX_DESCRIPTION_CHARS`; never the body). Deduplicated by path, a re-read
    moves the entry to the end, at most `MAX_SKILLS` are kept.

Both channels are private to the server: a caller cannot set them in graph
input. A writer declares `DurableState` (or a subclass) as its state schema
and returns lists of new or changed entries; the reducers merge them.
`run_delegations` gives a run's own entries (subagent_limit counts its
per-run cap from them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentState
from langchain.agents.middleware.types import PrivateStateAttr

__all__ = [
    "DELEGATIONS_KEY",
    "IN_PROGRESS",
    "MAX_DELEGATIONS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_SKILLS",
    "SKILL_CONTEXT_KEY",
    "TERMINAL_STATUSES",
    "DurableState",
    "merge_delegations",
    "merge_skill_context",
    "run_delegations",
]

DELEGATIONS_KEY = "delegations"
SKILL_CONTEXT_KEY = "skill_context"
IN_PROGRESS = "in_progress"
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "timed_out"})
MAX_DELEGATIONS = 50
MAX_SKILLS = 8
MAX_DESCRIPTION_CHARS = 500

_FIRST_SEEN = ("created_at", "run_id")
"""Fields an entry keeps from the first time its id was recorded."""


def _entries(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list | tuple):
        return []
    # A dict (every entry a reducer writes) needs no `Mapping` ABC check.
    return [entry for entry in value if type(entry) is dict or isinstance(entry, Mapping)]


def _merge_entry(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    if old.get("status") in TERMINAL_STATUSES and new.get("status") not in TERMINAL_STATUSES:
        return dict(old)
    merged = {**old, **new}
    for key in _FIRST_SEEN:
        if old.get(key) is not None:
            merged[key] = old[key]
    return merged


def merge_delegations(current: Any, new: Any) -> list[dict[str, Any]]:
    """The `delegations` reducer: merge by id in first-seen order, capped to the newest."""
    merged: dict[str, dict[str, Any]] = {}
    for entry in _entries(current):
        merged[str(entry.get("id"))] = dict(entry)
    for entry in _entries(new):
        key = str(entry.get("id"))
        merged[key] = _merge_entry(merged[key], entry) if key in merged else dict(entry)
    return list(merged.values())[-MAX_DELEGATIONS:]


def merge_skill_context(current: Any, new: Any) -> list[dict[str, Any]]:
    """The `skill_context` reducer: one entry per path, a re-read refreshes it, newest kept."""
    merged: dict[str, dict[str, Any]] = {}
    for entry in [*_entries(current), *_entries(new)]:
        key = str(entry.get("path"))
        merged.pop(key, None)
        description = str(entry.get("description") or "")[:MAX_DESCRIPTION_CHARS]
        merged[key] = {**entry, "description": description}
    return list(merged.values())[-MAX_SKILLS:]


class DurableState(AgentState[Any]):
    """State schema of a plugin that writes or reads the durable record."""

    # LangGraph takes the reducer from the last annotation.
    delegations: NotRequired[Annotated[list[dict[str, Any]], PrivateStateAttr,
                                       merge_delegations]]
    skill_context: NotRequired[Annotated[list[dict[str, Any]], PrivateStateAttr,
                                         merge_skill_context]]


def run_delegations(state: Mapping[str, Any], run_id: str | None,
                    ) -> list[Mapping[str, Any]]:
    """The `delegations` entries the run `run_id` dispatched."""
    return [entry for entry in _entries(state.get(DELEGATIONS_KEY))
            if entry.get("run_id") == run_id]

