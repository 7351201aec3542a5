"""The `task` tool: delegating work to a subagent built from the subagent chain.

The lead agent and its subagents come from one plugin set: the subagent is an
ordinary Antler agent built with `chain="subagent"`, the same operator config
and the same services (thread paths, sandbox provider), so a delegated task
sees the thread's files and obeys the same guards. It runs without a
checkpointer of its own: its result reaches the lead as the tool's message,
with its token usage in `additional_kwargs` for accounting plugins.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any

from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from .runcontext import RunContext, run_context

TASK_TOOL = "task"


def make_task_tool(build_subagent: Callable[[], Any]) -> Any:
    """A LangChain tool named `task`; `build_subagent()` returns a compiled subagent graph.

    The subagent graph is built on first use and reused for later tasks.
    """
    cache: dict[str, Any] = {}

    @tool(TASK_TOOL)
    def task(
        description: Annotated[str, "A short (3-5 word) description of the task."],
        prompt: Annotated[str, "Everything the subagent needs to know to do the task alone."],
        runtime: ToolRuntime[RunContext, Any],
    ) -> ToolMessage:
        """Delegate a self-contained task to a subagent and get its final answer back."""
        if "graph" not in cache:
            cache["graph"] = build_subagent()
        parent = run_context(runtime)
        context = RunContext(
            thread_id=parent.thread_id, user_id=parent.user_id, run_id=uuid.uuid4().hex,
            # The subagent acts for the same caller: it inherits, never widens, the
            # caller's provenance, so delegating cannot escalate privileges.
            is_internal=parent.is_internal, roles=parent.roles, attributes=parent.attributes,
        )
        try:
            state = cache["graph"].invoke(
                {"messages": [HumanMessage(content=prompt)]}, context=context,
                config={"recursion_limit": 60},
            )
        except Exception as exc:  # the lead must be able to recover from a failed delegate
            return ToolMessage(
                content=f"Task '{description}' failed: {type(exc).__name__}: {exc}",
                tool_call_id=runtime.tool_call_id, name=TASK_TOOL, status="error",
            )
        replies = [m for m in state.get("messages", []) if isinstance(m, AIMessage)]
        answer = str(replies[-1].content) if replies else ""
        usage = _sum_usage(replies)
        return ToolMessage(
            content=answer or f"Task '{description}' finished without a reply.",
            tool_call_id=runtime.tool_call_id, name=TASK_TOOL,
            additional_kwargs={"subagent_token_usage": usage, "task_description": description},
        )

    task.metadata = {"antler": {"sandbox": False, "remote_content": False, "delegation": True}}
    return task


def _sum_usage(messages: list[Any]) -> dict[str, int]:
    total = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    for message in messages:
        usage = getattr(message, "usage_metadata", None) or {}
        for key in total:
            total[key] += int(usage.get(key, 0) or 0)
    return total
