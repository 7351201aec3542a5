"""Helpers shared by the plugin tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.callbacks import BaseCallbackHandler

from antler.contracts.messages import is_hidden
from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel


def make_agent(home: Path, script: list[Any], **kwargs: Any) -> tuple[Any, ScriptedChatModel]:
    """The real chain of the installed plugins over a scripted model.

    Plugins that call a model of their own (title, memory) get their own scripted
    models, so `script` is only the agent's turns.
    """
    model = ScriptedChatModel(script)
    services = {TITLE_MODEL: ScriptedChatModel(["A title"] * 5),
                MEMORY_MODEL: ScriptedChatModel(["{}"] * 5), **kwargs.pop("services", {})}
    kwargs.setdefault("checkpointer", "memory")
    agent = create_agent(model=model, base_dir=home, services=services, **kwargs)
    return agent, model


class RetryOnce(AgentMiddleware):
    """An outer model wrapper that calls the model again once after one of `errors`.

    Stands for an error handler or LangChain's `ModelRetryMiddleware`: a plugin's
    one-shot injection must still be in the retried request. Subclasses narrow
    `errors`; `failures` counts the retries made.
    """

    errors: tuple[type[BaseException], ...] = (Exception,)

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        try:
            return handler(request)
        except self.errors:
            self.failures += 1
            return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        try:
            return await handler(request)
        except self.errors:
            self.failures += 1
            return await handler(request)


def visible(messages: list[Any]) -> list[Any]:
    """The conversation without the server's hidden messages (dynamic_context's date
    reminder and memory block, which sit among the messages since it is on by default)."""
    return [m for m in messages if not is_hidden(m)]


class ToolRuns(BaseCallbackHandler):
    """A callback handler that records the name of every tool run it sees start."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
        self.names.append(serialized["name"])
