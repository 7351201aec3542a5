"""Runs that wait for a person: reading their pending approvals, answering them.

A human-in-the-loop middleware (LangChain's `HumanInTheLoopMiddleware`, or any
plugin that calls LangGraph's `interrupt`) stops the run and leaves the
question in the thread's checkpoint. Two shapes are understood:

* batched (`HITLRequest`): one interrupt per model turn with `action_requests`
  and `review_configs`, answered with `{"decisions": [...]}` in the same order;
* per call (`ToolApprovalRequest`, `type: tool_approval`): one interrupt per tool
  call, each answered with one decision keyed by the interrupt's id.

Any other interrupt is shown as it is and answered with the decision's type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from antler.errors import AntlerError

__all__ = ["pending_actions", "pending_approvals", "resume_value"]


def pending_approvals(agent: Any, thread_id: str) -> list[Any]:
    """The interrupts the thread's last run stopped on (LangGraph `Interrupt`s)."""
    snapshot = agent.graph.get_state(agent.run_config(thread_id))
    return list(getattr(snapshot, "interrupts", ()) or ())


_INTERRUPT_CHANNEL = "__interrupt__"
"""The channel LangGraph stores a task's interrupts under in a checkpoint's pending writes."""


def checkpoint_interrupts(agent: Any, thread_id: str) -> list[Any]:
    """The interrupts stored in the thread's latest checkpoint, read from the saver
    itself: found even when this agent's graph lacks the node that raised them (a
    resume with other flags than the paused run)."""
    saver = getattr(agent, "checkpointer", None)
    if saver is None:
        return []
    stored = saver.get_tuple(agent.run_config(thread_id))
    found: list[Any] = []
    for write in getattr(stored, "pending_writes", None) or ():
        if len(write) >= 3 and write[1] == _INTERRUPT_CHANNEL:
            value = write[2]
            found.extend(value if isinstance(value, (list, tuple)) else [value])
    return found


def pending_actions(pending: Sequence[Any]) -> list[dict[str, Any]]:
    """Each pending action as {name, args, allowed, interrupt}, in answer order."""
    actions: list[dict[str, Any]] = []
    for item in pending:
        value = getattr(item, "value", item)
        if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
            allowed = {config.get("action_name"): config.get("allowed_decisions", [])
                       for config in value.get("review_configs", [])
                       if isinstance(config, dict)}
            actions += [{"name": request.get("name"), "args": request.get("args"),
                         "allowed": allowed.get(request.get("name"), []), "interrupt": item}
                        for request in value["action_requests"]]
        elif isinstance(value, dict) and value.get("type") == "tool_approval":
            actions.append({"name": value.get("name"), "args": value.get("args"),
                            "allowed": [], "interrupt": item})
        elif isinstance(value, dict) and value.get("type") == "approval" and value.get("tool"):
            # a guardrail approval provider: {"type": "approval", "tool", "args", "options"}
            actions.append({"name": value["tool"], "args": value.get("args"),
                            "allowed": list(value.get("options") or ()), "interrupt": item})
        else:
            actions.append({"name": "interrupt", "args": value, "allowed": [],
                            "interrupt": item})
    return actions


def _decision(kind: str, action: dict[str, Any], message: str | None,
              edit: dict[str, Any] | None) -> dict[str, Any]:
    allowed = action.get("allowed") or []
    if allowed and kind not in allowed:
        raise AntlerError(f"{action['name']}: the reviewer may only {' or '.join(allowed)} "
                          f"this action, not {kind}")
    if kind == "edit":
        return {"type": "edit", "edited_action": {"name": action["name"], "args": edit or {}}}
    if kind == "reject" and message:
        return {"type": "reject", "message": message}
    return {"type": kind}


def resume_value(pending: Sequence[Any], kind: str, *, message: str | None = None,
                 edits: Sequence[dict[str, Any]] | None = None) -> Any:
    """The `Command` that answers every pending action with the same decision `kind`
    ('approve', 'reject' or 'edit'; edits give one set of arguments per action)."""
    from langgraph.types import Command

    actions = pending_actions(pending)
    if kind == "edit" and (edits is None or len(edits) != len(actions)):
        count = 0 if edits is None else len(edits)
        raise AntlerError(f"--edit gave {count} set(s) of arguments for {len(actions)} pending "
                          "action(s); give one JSON object per action, as a list")
    answers: dict[str, Any] = {}
    for index, action in enumerate(actions):
        item = action["interrupt"]
        value = getattr(item, "value", item)
        decision = _decision(kind, action, message, edits[index] if edits else None)
        key = getattr(item, "id", None) or str(index)
        if isinstance(value, dict) and "action_requests" in value:
            answers.setdefault(key, {"decisions": []})["decisions"].append(decision)
        elif isinstance(value, dict) and value.get("type") == "tool_approval":
            answers[key] = decision
        elif isinstance(value, dict) and value.get("type") == "approval" and value.get("tool"):
            answers[key] = {"decision": kind, **({"reason": message} if message else {})}
        else:
            answers[key] = kind if not edits else edits[index]
    if len(answers) == 1 and len(pending) == 1:
        return Command(resume=next(iter(answers.values())))
    return Command(resume=answers)
