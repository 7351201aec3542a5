"""`sidecall`: a plugin's call to a chat model, through `invoke` whenever anything could
observe it, else without the parent run's config (the title's graph tests show both)."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler, CallbackManager
from langchain_core.messages import AIMessage
from langchain_core.runnables.config import var_child_runnable_config
from langsmith.run_helpers import tracing_context
from pydantic import Field

from antler.plugins._lib.sidecall import _observed, side_ainvoke, side_invoke
from antler.runtime.models import ScriptedChatModel

CONFIG = {"tags": ["nostream"], "metadata": {"lc_source": "test"}, "run_name": "antler_test"}


class Generations(ScriptedChatModel):
    """A scripted model recording the arguments of each `generate`/`agenerate` call."""

    given: list[dict[str, Any]] = Field(default_factory=list)

    def generate(self, messages: Any, stop: Any = None, callbacks: Any = None,
                 **kwargs: Any) -> Any:
        self.given.append({"messages": messages, "callbacks": callbacks, **kwargs})
        return super().generate(messages, stop, callbacks, **kwargs)

    async def agenerate(self, messages: Any, stop: Any = None, callbacks: Any = None,
                        **kwargs: Any) -> Any:
        self.given.append({"messages": messages, "callbacks": callbacks, **kwargs})
        return await super().agenerate(messages, stop, callbacks, **kwargs)


class Runs(BaseCallbackHandler):
    """Records each chat model run's tags and metadata."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.runs.append(kwargs)


def _manager(handlers: list[Any]) -> CallbackManager:
    """The callback manager a graph node hands down: the run's tags and metadata with it."""
    return CallbackManager(handlers, inheritable_handlers=handlers, tags=["x"],
                           inheritable_tags=["x"], metadata={"thread_id": "t1"},
                           inheritable_metadata={"thread_id": "t1"})


def test_unobserved_the_call_carries_only_its_own_config():
    model = Generations(["A title"])
    token = var_child_runnable_config.set({"callbacks": _manager([])})
    try:
        reply = side_invoke(model, "Name it", CONFIG)
    finally:
        var_child_runnable_config.reset(token)
    assert isinstance(reply, AIMessage) and reply.content == "A title"
    [given] = model.given
    assert given["callbacks"] is None
    assert (given["tags"], given["metadata"], given["run_name"]) == (
        ["nostream"], {"lc_source": "test"}, "antler_test")
    assert [m.content for m in given["messages"][0]] == ["Name it"]


def test_the_async_form_takes_the_same_paths():
    model = Generations(["A title", "Another"])
    reply = asyncio.run(side_ainvoke(model, "Name it", CONFIG))
    assert reply.content == "A title" and model.given[-1]["callbacks"] is None
    runs = Runs()
    token = var_child_runnable_config.set({"callbacks": _manager([runs])})
    try:
        assert asyncio.run(side_ainvoke(model, "Name it", CONFIG)).content == "Another"
    finally:
        var_child_runnable_config.reset(token)
    [run] = runs.runs
    assert run["metadata"]["thread_id"] == "t1" and run["metadata"]["lc_source"] == "test"


def test_an_inherited_handler_gets_the_call_with_the_runs_metadata():
    model = Generations(["A title"])
    runs = Runs()
    token = var_child_runnable_config.set({"callbacks": _manager([runs])})
    try:
        assert side_invoke(model, "Name it", CONFIG).content == "A title"
    finally:
        var_child_runnable_config.reset(token)
    [run] = runs.runs
    assert run["metadata"]["thread_id"] == "t1" and run["metadata"]["lc_source"] == "test"
    assert set(run["tags"]) == {"x", "nostream"} and run["name"] == "antler_test"


def test_what_counts_as_observed():
    quiet = ScriptedChatModel([])
    assert not _observed(quiet)
    with tracing_context(enabled=True):  # LangSmith would trace the call
        assert _observed(quiet)
    assert _observed(ScriptedChatModel([], callbacks=[Runs()]))  # the model's own handler

    class OwnInvoke(ScriptedChatModel):  # a class that calls models its own way
        def invoke(self, *args: Any, **kwargs: Any) -> Any:
            return super().invoke(*args, **kwargs)

    assert _observed(OwnInvoke([]))


def test_a_model_with_its_own_handler_is_invoked_with_the_run_config():
    runs = Runs()
    model = Generations(["A title"], callbacks=[runs])
    token = var_child_runnable_config.set({"callbacks": _manager([])})
    try:
        side_invoke(model, "Name it", CONFIG)
    finally:
        var_child_runnable_config.reset(token)
    [run] = runs.runs
    assert run["metadata"]["thread_id"] == "t1"
