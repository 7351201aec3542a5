"""The `task` tool: delegating work to a subagent built from the subagent chain.

The lead agent and its subagents come from one plugin set: the subagent is an
ordinary Antler agent built with `chain="subagent"`, the same operator config
and the same services (thread paths, sandbox provider), so a delegated task
sees the thread's files and obeys the same guards. It runs without a
checkpointer of its own: its result reaches the lead as the tool's message.

The result contract: the `ToolMessage`'s ``additional_kwargs`` carry
``subagent_status`` (``completed`` or ``failed``), ``subagent_stop_reason``
(the reason a guard recorded in the subagent's run, or None),
``subagent_result_brief`` (at most `BRIEF_CHARS` characters of the answer) with
its ``subagent_result_sha256``, ``subagent_token_usage`` (input, output and
total tokens of the subagent's model calls) and ``task_description``. Plugins
read these fields, never the result's text.

The text and the fields come from one `TaskOutcome`, so they cannot disagree
(docs/chain.md#tool_error_handling): a completed task's text is the subagent's answer; a failed
one's is ``Task failed. Error: <error>``, where the error is the exception the
subagent raised or the error reply it ended with, and its ``antler_tool_meta``
(``error_type``, ``recoverable_by_model``, ``recommended_next_action``, source
``task``) is classified from that same error (`classify_error_text`).
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, ConfigDict, Field

from antler.compat import CONFIG_KEY_DURABILITY
from antler.contracts.fallback import error_fallback_of
from antler.contracts.runcontext import run_context
from antler.contracts.stop_reason import stop_reason_of
from antler.contracts.toolmeta import TOOL_META_KEY, ToolMeta, classify_error_text

from .quiettools import NOT_QUIET, quiet_call

TASK_TOOL = "task"
BRIEF_CHARS = 2000


class TaskArgs(BaseModel):
    """The `task` tool's arguments: what the model writes, and the runtime the tools node
    injects (left out of the schema the model sees and of the validated input's dump).

    Declared as plain types, not read from the function's ``Annotated`` hints:
    LangChain rebuilds every generic annotation of a tool's schema on every call,
    about 30 us of each delegation; the schema the model sees is the same.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    description: str = Field(description="A short (3-5 word) description of the task.")
    prompt: str = Field(
        description="Everything the subagent needs to know to do the task alone.")
    runtime: ToolRuntime = Field(exclude=True)


def make_task_tool(build_subagent: Callable[[], Any]) -> Any:
    """A LangChain tool named `task`; `build_subagent()` returns the subagent's `AntlerAgent`.

    The subagent is built on first use, once (parallel tasks wait for it), and
    reused for every later task of the lead agent, with the run config its runs get.
    """
    built: list[tuple[Any, dict[str, Any]]] = []
    building = threading.Lock()

    def subagent() -> tuple[Any, dict[str, Any]]:
        if not built:
            with building:
                if not built:
                    sub = build_subagent()
                    # The subagent keeps no checkpoints. LangGraph hands the lead's
                    # durability down to nested graphs, and 'sync' in a graph without a
                    # checkpointer waits for a checkpoint that is never written.
                    built.append((sub, {"recursion_limit": sub.recursion_limit,
                                        "configurable": {CONFIG_KEY_DURABILITY: "async"}}))
        return built[0]

    def task(description: str, prompt: str, runtime: ToolRuntime) -> ToolMessage:
        """Delegate a self-contained task to a subagent and get its final answer back."""
        sub, config = subagent()
        # The subagent acts for the same caller: it inherits, never widens, the
        # caller's identity and provenance, so delegating cannot escalate
        # privileges. Same context class too: a served graph's trust setting holds.
        context = replace(run_context(runtime), run_id=uuid.uuid4().hex)
        try:
            # LangGraph copies the config it is given: one dict serves every run.
            state = sub.graph.invoke({"messages": [HumanMessage(content=prompt)]},
                                     context=context, config=config)
        except Exception as error:  # the lead must be able to recover from a failed delegate
            exc = sub.explain(error)
            detail = f"{type(exc).__name__}: {exc}"
            return TaskOutcome(description, "failed", error=detail,
                               error_kind=detail).message(runtime.tool_call_id)
        replies = [m for m in state.get("messages", ()) if isinstance(m, AIMessage)]
        last = replies[-1] if replies else None
        answer = str(last.content) if last is not None else ""
        fallback = error_fallback_of(last) if last is not None else None
        stop = stop_reason_of(state, context.run_id)
        stop_reason = stop["reason"] if stop else None
        if fallback is not None:
            # The error reply says what went wrong; its marker says why, for the class.
            kind = f"{fallback.get('error_type')}: {fallback.get('detail') or answer}"
            return TaskOutcome(description, "failed", error=answer or str(fallback["reason"]),
                               error_kind=kind, stop_reason=stop_reason,
                               usage=_sum_usage(replies)).message(runtime.tool_call_id)
        return TaskOutcome(description, "completed", result=answer, stop_reason=stop_reason,
                           usage=_sum_usage(replies)).message(runtime.tool_call_id)

    return TaskTool(
        name=TASK_TOOL, func=task, args_schema=TaskArgs, description=task.__doc__,
        metadata={"antler": {"sandbox": False, "remote_content": False, "delegation": True}})


class TaskTool(StructuredTool):
    """The `task` tool: a call nothing observes skips LangChain's tool run
    (`antler.runtime.quiettools`); the subagent's graph then inherits the lead's config
    (its nesting, its stream) with the tools node's callback manager instead of a child
    of a tool run, neither of which has a handler."""

    def invoke(self, input: Any, config: RunnableConfig | None = None,
               **kwargs: Any) -> Any:
        result = quiet_call(self, input, config, kwargs)
        return super().invoke(input, config, **kwargs) if result is NOT_QUIET else result


@dataclass(frozen=True)
class TaskOutcome:
    """How one delegation ended: the one source of a `task` result's text and fields."""

    description: str
    status: Literal["completed", "failed"]
    result: str = ""
    """The subagent's answer (completed)."""
    error: str = ""
    """What went wrong, as the lead reads it (failed)."""
    error_kind: str = ""
    """The text the failure is classified from: the exception, or the error reply's
    marker (failed)."""
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=lambda: _sum_usage([]))

    @property
    def text(self) -> str:
        if self.status == "failed":
            return f"Task failed. Error: {self.error or 'the subagent gave no reason'}"
        return self.result or f"Task '{self.description}' finished without a reply."

    def meta(self) -> ToolMeta:
        if self.status == "completed":
            return ToolMeta(status="success", source=TASK_TOOL)
        error_type, recoverable, action = classify_error_text(self.error_kind or self.error)
        return ToolMeta(status="error", error_type=error_type, recoverable_by_model=recoverable,
                        recommended_next_action=action, source=TASK_TOOL)

    def message(self, tool_call_id: str | None) -> ToolMessage:
        """The `task` tool's result."""
        text = self.text
        fields = task_result_fields(self.description, self.status, self.stop_reason,
                                    self.result if self.status == "completed" else text,
                                    self.usage)
        return ToolMessage(
            content=text, tool_call_id=tool_call_id or "", name=TASK_TOOL,
            status="error" if self.status == "failed" else "success",
            additional_kwargs={**fields, TOOL_META_KEY: self.meta().as_dict()})


def task_result_fields(description: str, status: str, stop_reason: str | None, answer: str,
                       usage: dict[str, int]) -> dict[str, Any]:
    """The `additional_kwargs` of a `task` result (the contract in the module docstring)."""
    return {
        "subagent_status": status,
        "subagent_stop_reason": stop_reason,
        "subagent_result_brief": answer[:BRIEF_CHARS],
        "subagent_result_sha256": hashlib.sha256(answer.encode("utf-8")).hexdigest(),
        "subagent_token_usage": usage,
        "task_description": description,
    }


def _sum_usage(messages: list[Any]) -> dict[str, int]:
    total = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    for message in messages:
        usage = getattr(message, "usage_metadata", None) or {}
        for key in total:
            total[key] += int(usage.get(key, 0) or 0)
    return total
