"""ApprovalGuardrail: a person approves or rejects chosen tool calls before they run.

For every call to a tool that needs approval, the provider pauses the run with
LangGraph's ``interrupt()``, handing the caller the pending action::

    {"type": "approval", "tool": "bash", "args": {...}, "tool_call_id": "...",
     "user_id": "...", "options": ["approve", "reject"]}

The run is resumed with ``Command(resume=...)``: ``"approve"`` or
``{"decision": "approve"}`` lets the call run; ``"reject"`` or
``{"decision": "reject", "reason": "..."}`` answers it with a refusal the model
can read. Any other answer is a rejection (fail closed). Calls to other tools
are allowed without asking.

Configuration (operator config)::

    guardrails:
      enabled: true
      provider: approval
      provider_options:
        tools: [bash, write_file]   # glob patterns; default: every tool

The interrupt travels through the guardrail plugin untouched (an interrupt is
never a provider failure), so ``fail_closed: false`` cannot turn a pending
approval into an allow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from antler.plugin_api import Decision, GuardrailProvider, GuardrailRequest, ProviderConfigError

__all__ = ["APPROVE", "REJECT", "ApprovalGuardrail"]

APPROVE = "approve"
REJECT = "reject"


class ApprovalGuardrail(GuardrailProvider):
    """Pause for a person's decision on calls to the listed tools."""

    def __init__(self, tools: Sequence[str] = ("*",)) -> None:
        if isinstance(tools, str) or not all(isinstance(t, str) and t for t in tools):
            raise ProviderConfigError(
                "guardrails.provider_options.tools must be a list of tool names or globs, "
                f"got {tools!r}")
        self.tools = tuple(tools)

    def needs_approval(self, tool_name: str) -> bool:
        return any(fnmatchcase(tool_name, pattern) for pattern in self.tools)

    def evaluate(self, request: GuardrailRequest) -> Decision:
        if not self.needs_approval(request.tool_name):
            return Decision.allow(f"tool {request.tool_name!r} needs no approval",
                                  rule="no_approval_needed")
        from langgraph.types import interrupt

        answer = interrupt({
            "type": "approval", "tool": request.tool_name, "args": dict(request.args),
            "tool_call_id": request.tool_call_id, "user_id": request.principal.user_id,
            "options": [APPROVE, REJECT],
        })
        return _decision(request.tool_name, answer)

    async def aevaluate(self, request: GuardrailRequest) -> Decision:
        # interrupt() must run in the graph's own task, not a worker thread.
        return self.evaluate(request)


def _decision(tool: str, answer: Any) -> Decision:
    decision = answer.get("decision") if isinstance(answer, Mapping) else answer
    reason = answer.get("reason") if isinstance(answer, Mapping) else None
    if decision == APPROVE:
        return Decision.allow(f"a person approved the call to {tool!r}", rule="approved")
    why = f": {reason}" if isinstance(reason, str) and reason.strip() else ""
    if decision == REJECT:
        return Decision.deny(f"a person rejected the call to {tool!r}{why}", rule="rejected")
    return Decision.deny(f"the approval answer {answer!r} is neither {APPROVE!r} nor "
                         f"{REJECT!r}, so the call to {tool!r} was not run", rule="unanswered")
