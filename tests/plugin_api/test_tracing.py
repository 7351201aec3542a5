"""`could_trace`: whether a call made now could be traced, and the quiet steps' flag."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManager
from langchain_core.runnables.config import var_child_runnable_config
from langsmith.run_helpers import tracing_context

from antler.plugin_api import could_trace
from antler.plugin_api.tracing import UNTRACED


class _NoClient:
    """A LangSmith client that accepts runs and sends nothing."""

    tracing_queue = None

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@pytest.fixture
def untraced():
    token = UNTRACED.set(True)
    yield
    UNTRACED.reset(token)


def _with_handler() -> Any:
    return var_child_runnable_config.set({"callbacks": CallbackManager([BaseCallbackHandler()])})


def test_nothing_listening_and_tracing_off_is_not_traced():
    assert could_trace() is False


def test_a_handler_in_the_inherited_config_or_tracing_on_could_trace():
    token = _with_handler()
    try:
        assert could_trace() is True
    finally:
        var_child_runnable_config.reset(token)
    with tracing_context(enabled=True, client=_NoClient()):
        assert could_trace() is True
    # A manager without handlers is nobody listening.
    token = var_child_runnable_config.set({"callbacks": CallbackManager([])})
    try:
        assert could_trace() is False
    finally:
        var_child_runnable_config.reset(token)


def test_a_quiet_steps_answer_is_its_nodes_unless_a_handler_listens(untraced):
    import langsmith

    langsmith.configure(enabled=True, client=_NoClient())
    try:
        assert could_trace() is False  # the node found tracing off: LangSmith not asked again
        token = _with_handler()  # tracing turned on inside the node reaches it as a handler
        try:
            assert could_trace() is True
        finally:
            var_child_runnable_config.reset(token)
    finally:
        langsmith.configure(enabled=None, client=None)
