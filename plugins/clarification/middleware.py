"""Clarification: turn `ask_clarification` into a question for the user and end the run.

`wrap_tool_call` intercepts every `ask_clarification` call before the tool
runs. It normalizes the arguments into a versioned human-input request
(`request.build_request`, `form.normalize_fields`) and answers the call with a
`ToolMessage` whose `content` is a readable rendering of the question (for
channels without cards) and whose `artifact` is ``{"human_input": request}``
(for frontends that render cards). It returns
``Command(update={"messages": [tool_message]}, goto=END)``: the question is
written to state, so it is checkpointed and the next user turn continues from
it, and the run stops instead of letting the model answer its own question.
Every other tool call passes through untouched.

Why the run really stops: LangChain's agent loop routes the tools node back to
the model unless every executed tool returns directly, and a tool's
`Command(goto=END)` does not override that edge. The `ask_clarification` tool
is therefore `return_direct`, which ends a turn whose only call is the
question. When the model called other tools alongside it, `before_model` ends
the run instead: if the latest assistant message's question was answered by
this middleware *in the current run*, it jumps to the end before the model is
called. A later user turn is a new run, so the model then sees the answer.

Where it sits: last (manifest `position: last`). As the innermost
`wrap_tool_call` it sees each call after every other tool wrapper (guards,
error handling) let it through, and ending the run here skips no other
middleware's tool handling. Its `before_model` is the last one, so it only
ends a run that every earlier `before_model` has already seen.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.graph import END
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from antler.plugin_api import BuildContext, run_id_of

from .request import build_request, render_text
from .tool import TOOL_NAME

__all__ = ["ASKED_MARKER", "ClarificationMiddleware", "build"]

ASKED_MARKER = "antler_clarification"
"""`ToolMessage.additional_kwargs` key this middleware writes on its answers:
``{"run_id": ...}``, the run that asked. It is how `before_model` tells a
question asked in this run from one a previous run asked."""


class ClarificationMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Intercepts `ask_clarification`, records the request and ends the run."""

    def __init__(self, tool_name: str = TOOL_NAME) -> None:
        super().__init__()
        self.tool_name = tool_name

    # The sync and async hooks share one implementation: the work is pure state
    # inspection, with no I/O to await.

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        """End the run if this run already asked the user; the model must not continue."""
        return self._end_if_asked(state, runtime)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: AgentState[Any],
                            runtime: Any) -> dict[str, Any] | None:
        """Async form of `before_model` (pure state inspection, no I/O)."""
        return self._end_if_asked(state, runtime)

    def _end_if_asked(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        messages = state.get("messages") or []
        # The run id is looked up only when the latest assistant message asked at all.
        if self._asked(messages) and self.asked_in_current_run(messages, run_id_of(runtime)):
            return {"jump_to": "end"}
        return None

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Answer `ask_clarification` with the question and end the run; pass others on."""
        if request.tool_call.get("name") != self.tool_name:
            return handler(request)
        return self.interrupt(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async form of `wrap_tool_call`."""
        if request.tool_call.get("name") != self.tool_name:
            return await handler(request)
        return self.interrupt(request)

    def interrupt(self, request: ToolCallRequest) -> Command[Any]:
        """The `Command` that records the question and ends the run."""
        call = request.tool_call
        human_input = build_request(call.get("args"), call.get("id"))
        message = ToolMessage(
            content=render_text(human_input),
            artifact={"human_input": human_input},
            tool_call_id=call.get("id") or "",
            name=self.tool_name,
            additional_kwargs={ASKED_MARKER: {"run_id": run_id_of(request.runtime)}},
        )
        return Command(update={"messages": [message]}, goto=END)

    def asked_in_current_run(self, messages: Sequence[AnyMessage], run_id: str | None) -> bool:
        """Whether the latest assistant message's question was answered in this run.

        Only answers carrying this middleware's marker count. Without a run id (a
        bare graph invoked without one), a question counts as current while
        nothing but tool results follows the assistant message.
        """
        found = self._asked(messages)
        if found is None:
            return False
        index, asked = found
        tail = messages[index + 1:]
        for message in tail:
            if not (isinstance(message, ToolMessage) and message.tool_call_id in asked):
                continue
            marker = message.additional_kwargs.get(ASKED_MARKER)
            if not isinstance(marker, Mapping):
                continue
            if run_id is not None:
                if marker.get("run_id") == run_id:
                    return True
            elif all(isinstance(m, ToolMessage) for m in tail):
                return True
        return False

    def _asked(self, messages: Sequence[AnyMessage]) -> tuple[int, set[Any]] | None:
        """The latest assistant message's index and the ids of its questions, if it asked."""
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, AIMessage):
                asked = {call.get("id") for call in message.tool_calls
                         if call.get("name") == self.tool_name}
                return (index, asked) if asked else None
        return None


def build(ctx: BuildContext) -> ClarificationMiddleware:
    """Factory named in the manifest; the plugin has no configuration."""
    return ClarificationMiddleware()
