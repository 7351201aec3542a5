"""NotesMiddleware: a well-behaved third-party middleware.

Hooks
    `before_model` records how many messages the model is about to see
    (`acme_notes_seen`); `wrap_model_call` adds a hidden note counting the
    turn's tool results (from the end back to the user's message, so its work
    follows the turn, not the thread); `wrap_tool_call` passes every call through and keeps the
    result it got.

Where it sits and why
    The extension slot (no ordering): it needs nothing before it.

Configuration
    `acme_notes: {prefix: "Acme note"}`.

Example
    After one tool result the model reads "Acme note: 1 tool result(s) this turn.".
"""

from __future__ import annotations

from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import HumanMessage, ToolMessage

from antler.plugin_api import hidden_marker


class NotesState(AgentState[Any]):
    acme_notes_seen: NotRequired[int]


class NotesMiddleware(AgentMiddleware):
    state_schema = NotesState

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def _seen(self, state: Any) -> dict[str, Any]:
        return {"acme_notes_seen": len(state["messages"])}

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self._seen(state)

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self._seen(state)

    def _noted(self, request: Any) -> Any:
        results = 0
        for message in reversed(request.messages):  # this turn's messages, not the thread's
            if isinstance(message, HumanMessage):
                break
            results += isinstance(message, ToolMessage)
        note = HumanMessage(f"{self.prefix}: {results} tool result(s) this turn.",
                            additional_kwargs=hidden_marker("acme_notes"))
        return request.override(messages=[*request.messages, note])

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(self._noted(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._noted(request))

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


def build(context: Any) -> NotesMiddleware:
    return NotesMiddleware(prefix=context.config.prefix)
