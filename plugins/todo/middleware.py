"""Todo: plan mode's `write_todos` tool, and the todo list's way back after summarization.

LangChain's `TodoListMiddleware` contributes the `write_todos` tool, the
`todos` state key, the planning instructions appended to the system prompt
(`wrap_model_call`) and the check against parallel `write_todos` calls
(`after_model`). Antler adds one hook, `before_model`: when summarization has
cut the `write_todos` call out of the conversation, the model no longer sees
its plan, although `todos` still holds it. The hook then appends a
`todo_reminder` message listing the todos and their statuses, once.

Where it sits: after `summarization` (docs/chain.md#layer-dependencies), because its decision
depends on what summarization left of the history. `before_model` hooks run in
chain order, so this one always sees the messages summarization just wrote.
Plan mode only: the manifest joins it to the chain when `plan_mode` is true.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import TodoListMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from antler.plugin_api import BuildContext, hidden_marker, hidden_source

__all__ = [
    "REMINDER_NAME",
    "AntlerTodoMiddleware",
    "build",
    "format_todo_reminder",
    "reminder_in_messages",
    "todos_in_messages",
]

REMINDER_NAME = "todo_reminder"
"""`name` of the injected reminder message (for display: the hook recognises its own reminder
by its server-owned marker, `REMINDER_SOURCE`, which a caller cannot set)."""

REMINDER_SOURCE = "todo"
"""The `hidden_marker` source of the reminder."""

WRITE_TODOS = "write_todos"
_TAG = "system_reminder"


def todos_in_messages(messages: Iterable[BaseMessage]) -> bool:
    """Whether any assistant message in `messages` still carries a `write_todos` call."""
    return any(
        isinstance(message, AIMessage)
        and any(call.get("name") == WRITE_TODOS for call in message.tool_calls)
        for message in messages
    )


def reminder_in_messages(messages: Iterable[BaseMessage]) -> bool:
    """Whether the plugin's own reminder is already in `messages` (found by its marker)."""
    return any(
        isinstance(message, HumanMessage) and hidden_source(message) == REMINDER_SOURCE
        for message in messages
    )


def format_todo_reminder(todos: Sequence[Mapping[str, Any]]) -> str:
    """The reminder text: a `<system_reminder>` block listing every todo with its status."""
    lines = []
    for todo in todos:
        status = str(todo.get("status") or "pending")
        content = _neutralize(str(todo.get("content") or "").strip()) or "(no description)"
        lines.append(f"- [{status}] {content}")
    body = "\n".join(lines)
    return (
        f"<{_TAG}>\n"
        "Your todo list from earlier is no longer visible in the conversation, which was "
        "summarized, but it is still active. Its current state:\n\n"
        f"{body}\n\n"
        f"Keep working through it and call `{WRITE_TODOS}` whenever a status changes. Do not "
        "mention this reminder to the user.\n"
        f"</{_TAG}>"
    )


def _neutralize(text: str) -> str:
    # A todo written by the model must not be able to close the reminder block early.
    return text.replace(f"<{_TAG}>", f"[{_TAG}]").replace(f"</{_TAG}>", f"[/{_TAG}]")


class AntlerTodoMiddleware(TodoListMiddleware):
    """`TodoListMiddleware` plus the re-injection of the todo list after summarization."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Append a `todo_reminder` when the plan exists but has left the context.

        Injects only when all three hold: `todos` is non-empty; no `write_todos`
        call remains in `messages` (summarization removed it); and no reminder
        is present yet (one reminder per loss, not one per model call). A later
        summarization that also drops the reminder makes the hook inject a
        fresh one with the then-current statuses.
        """
        return self._reminder_update(state)

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Async form of `before_model`; the decision needs no I/O."""
        return self._reminder_update(state)

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """LangChain's check against parallel `write_todos` calls, in async runs.

        LangChain's own async form calls `self.after_model`; calling the class's
        method directly keeps the check when the hook runs in a fused node.
        """
        return TodoListMiddleware.after_model(self, state, runtime)

    # Both forms call this helper rather than each other: a fused node's proxy
    # resets the hook methods it runs itself, so `self.<hook>` may be a no-op there.
    @staticmethod
    def _reminder_update(state: Any) -> dict[str, Any] | None:
        todos = [todo for todo in state.get("todos") or [] if isinstance(todo, Mapping)]
        if not todos:
            return None
        messages = state.get("messages") or []
        if todos_in_messages(messages) or reminder_in_messages(messages):
            return None
        reminder = HumanMessage(content=format_todo_reminder(todos), name=REMINDER_NAME,
                                additional_kwargs=hidden_marker(REMINDER_SOURCE))
        return {"messages": [reminder]}


def build(ctx: BuildContext) -> AntlerTodoMiddleware:
    """The todo middleware with LangChain's default planning prompt and tool description."""
    return AntlerTodoMiddleware()
