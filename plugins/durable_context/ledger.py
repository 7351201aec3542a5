"""What durable_context records: `task` delegations and skill reads, from new messages only.

`unseen` finds the messages a capture has not looked at yet, walking back
from the end of the history to the cursor (the last message the previous
capture of this run saw) or, on the run's first capture, to the run's user
message; so a capture costs the new messages, never the whole thread, and a
message of an earlier run is never captured again. `capture` turns those
messages into new or changed entries of the `antler.contracts.durable`
channels, reading the `task` result contract and the tool-result metadata,
never the text of a result.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from antler.plugin_api import (
    IN_PROGRESS,
    SKILL_FILENAME,
    SKILLS_VIRTUAL_ROOT,
    TERMINAL_STATUSES,
    SkillError,
    is_hidden,
    merge_delegations,
    message_text,
    parse_skill,
    tool_meta,
)

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["TASK_TOOL", "Capture", "capture", "recordable", "skill_path", "unseen"]

TASK_TOOL = "task"
DESCRIPTION_CHARS = 200
BRIEF_CHARS = 2000


def unseen(messages: Sequence[Any], cursor: str | None) -> list[Any]:
    """The messages after `cursor`, or after the run's user message when there is no cursor."""
    found: list[Any] = []
    for message in reversed(messages):
        if cursor is not None and message.id == cursor:
            break
        if isinstance(message, HumanMessage) and not is_hidden(message):
            break
        found.append(message)
    found.reverse()
    return found


def recordable(message: Any) -> bool:
    """Whether `capture` can find anything in `message`: a tool call or a tool result."""
    return isinstance(message, ToolMessage) or (isinstance(message, AIMessage)
                                                and bool(message.tool_calls))


def skill_path(args: Any) -> str | None:
    """The `SKILL.md` path under the skills root a read call names (None: it names none)."""
    path = args.get("path") if isinstance(args, Mapping) else None
    if not isinstance(path, str) or ".." in path.split("/"):
        return None
    path = posixpath.normpath(path)
    if not path.startswith(SKILLS_VIRTUAL_ROOT + "/") or posixpath.basename(path) != \
            SKILL_FILENAME:
        return None
    return path


@dataclass
class Capture:
    """New or changed entries, and the skill reads still waiting for their result."""

    delegations: list[dict[str, Any]] = field(default_factory=list)
    skills: list[dict[str, Any]] = field(default_factory=list)
    pending_reads: dict[str, str] = field(default_factory=dict)


def capture(messages: Sequence[Any], known: Sequence[Mapping[str, Any]], *, run_id: str | None,
            now: str | Callable[[], str], read_tools: Collection[str],
            pending_reads: Mapping[str, str]) -> Capture:
    """The entries `messages` add to or change in `known` (the recorded delegations).

    `now` stamps a new delegation; a callable is asked only when there is one.
    """
    recorded = {str(entry.get("id")): entry for entry in known}
    changed: dict[str, dict[str, Any]] = {}
    result = Capture(pending_reads=dict(pending_reads))
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                call_id = str(call.get("id") or "")
                if not call_id:
                    continue
                if call.get("name") == TASK_TOOL and call_id not in recorded:
                    stamp = now if isinstance(now, str) else now()
                    changed.setdefault(call_id, _dispatched(call_id, call.get("args"), run_id,
                                                            stamp))
                elif call.get("name") in read_tools and (path := skill_path(call.get("args"))):
                    result.pending_reads[call_id] = path
        elif isinstance(message, ToolMessage):
            call_id = str(message.tool_call_id)
            base = changed.get(call_id) or recorded.get(call_id)
            if base is not None:
                [updated] = merge_delegations([base], [{**_finished(message), "id": call_id}])
                if updated != recorded.get(call_id):
                    changed[call_id] = updated
            elif call_id in result.pending_reads:
                path = result.pending_reads.pop(call_id)
                meta = tool_meta(message)
                if meta is not None and meta.status == "success":
                    result.skills.append(_skill(path, message_text(message)))
    result.delegations = list(changed.values())
    return result


def _dispatched(call_id: str, args: Any, run_id: str | None, now: str) -> dict[str, Any]:
    args = args if isinstance(args, Mapping) else {}
    entry: dict[str, Any] = {
        "id": call_id, "description": " ".join(str(args.get("description") or "").split())
        [:DESCRIPTION_CHARS], "status": IN_PROGRESS, "created_at": now, "run_id": run_id}
    if isinstance(args.get("subagent_type"), str):
        entry["subagent_type"] = args["subagent_type"]
    return entry


def _finished(message: ToolMessage) -> dict[str, Any]:
    """The result fields of a `task` result, from its structured metadata only."""
    kwargs = message.additional_kwargs or {}
    meta = tool_meta(message)
    status = kwargs.get("subagent_status")
    if status not in TERMINAL_STATUSES:
        failed = message.status == "error" or (meta is not None and meta.status == "error")
        status = "failed" if failed else "completed"
    stop = kwargs.get("subagent_stop_reason")
    if stop is None and meta is not None and meta.status == "error":
        stop = meta.error_type
    brief = kwargs.get("subagent_result_brief")
    digest = kwargs.get("subagent_result_sha256")
    return {"status": status, "stop_reason": stop if isinstance(stop, str) else None,
            "result_brief": brief[:BRIEF_CHARS] if isinstance(brief, str) else None,
            "result_sha256": digest if isinstance(digest, str) else None,
            "message_id": message.id}


def _skill(path: str, text: str) -> dict[str, Any]:
    """A `skill_context` entry: the front matter's name and description, never the body."""
    name, description = posixpath.basename(posixpath.dirname(path)), ""
    try:
        data, _ = parse_skill(text)
    except SkillError:
        pass  # a partial read: the folder names the skill
    else:
        name, description = data["name"], " ".join(data["description"].split())
    return {"path": path, "name": name, "description": description}
