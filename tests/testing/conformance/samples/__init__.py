"""Deliberately broken sample middlewares: each breaks exactly one rule of docs/plugins.md.

They are registered in-process (`SAMPLES`), every one off by default; the
conformance battery switches on the one under test. Each is otherwise a
well-behaved plugin, so the battery must fail exactly the check aimed at it.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import HumanMessage

from antler.contracts.messages import hidden_marker
from antler.contracts.runstore import run_key
from antler.plugin_api.hookspecs import hookimpl
from antler.plugin_api.spec import PluginSpec


class Sample(AgentMiddleware):
    """Built from a BuildContext, like every plugin factory."""

    def __init__(self, context: Any = None) -> None:
        super().__init__()


class BlockingHook(Sample):
    """Sleeps on the event loop in its async `before_model` (rule: non_blocking)."""

    def before_model(self, state: Any, runtime: Any) -> None:
        return None

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        time.sleep(0.001)  # blocks the loop: asyncio.sleep was meant
        return None


class MismatchedState(AgentState[Any]):
    mismatched_hook_form: NotRequired[str]


class MismatchedHook(Sample):
    """Its sync and async `before_model` write different values (rule: sync_async)."""

    state_schema = MismatchedState

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return {"mismatched_hook_form": "sync"}

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return {"mismatched_hook_form": "async"}


class LossyInjection(Sample):
    """Marks its hint delivered before the model answered (rule: retry_injection).

    A retried call finds the hint already "delivered" and goes without it.
    """

    def __init__(self, context: Any = None) -> None:
        super().__init__()
        self.delivered: set[Any] = set()

    def _request(self, request: Any) -> Any:
        key = (*run_key(request.runtime), len(request.messages))
        if key in self.delivered:
            return request
        self.delivered.add(key)  # committed too early: before the handler returned
        hint = HumanMessage("Remember to cite the dictionary.",
                            additional_kwargs=hidden_marker("lossy_injection"))
        return request.override(messages=[*request.messages, hint])

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(self._request(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._request(request))


class CollidingState(AgentState[Any]):
    thread_data: NotRequired[Any]


class CollidingKey(Sample):
    """Declares `thread_data`, the thread_data plugin's state key (rule: state_keys)."""

    state_schema = CollidingState

    def before_model(self, state: Any, runtime: Any) -> None:
        return None

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        return None


class RaisingWrapper(Sample):
    """Its `wrap_model_call` always raises before calling the model (rule: hooks_run)."""

    def _check(self, request: Any) -> None:
        raise LookupError("the policy table acme.rules was not found")

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self._check(request)
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self._check(request)
        return await handler(request)


class MutatingWrapper(Sample):
    """Appends its hint to the request's own message list (rule: request_mutation)."""

    def _request(self, request: Any) -> Any:
        request.messages.append(HumanMessage("Answer briefly.", id="mutating-wrapper-hint",
                                             additional_kwargs=hidden_marker("mutating")))
        return request

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(self._request(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._request(request))


class TitleWriter(Sample):
    """Returns `{"title": ...}`, the title plugin's key (rule: state_writes)."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return {"title": "x"}

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return {"title": "x"}


class UndeclaredHooks(Sample):
    """Implements `before_model` only; its manifest says more (rule: manifest)."""

    def before_model(self, state: Any, runtime: Any) -> None:
        return None

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        return None


class ForgetfulState(AgentState[Any]):
    forgetful_counter_calls: NotRequired[int]


class ForgetfulCounter(Sample):
    """Counts model calls per thread in memory, not in state (rule: resume).

    After a restart the count starts again from nothing.
    """

    state_schema = ForgetfulState

    def __init__(self, context: Any = None) -> None:
        super().__init__()
        self.calls: dict[Any, int] = {}

    def _count(self, runtime: Any) -> dict[str, Any]:
        key = run_key(runtime)[0]
        self.calls[key] = self.calls.get(key, 0) + 1
        return {"forgetful_counter_calls": self.calls[key]}

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self._count(runtime)

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self._count(runtime)


class HistoryScanner(Sample):
    """Digests every message of the request on every model call (rule: history_work).

    Its cost grows with the thread, however few messages a turn adds.
    """

    def __init__(self, context: Any = None) -> None:
        super().__init__()
        self.digests: dict[Any, str] = {}

    def _digest(self, request: Any) -> None:
        dumped = json.dumps([m.model_dump(mode="json") for m in request.messages])
        self.digests[run_key(request.runtime)] = hashlib.sha256(dumped.encode()).hexdigest()

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self._digest(request)
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self._digest(request)
        return await handler(request)


def _spec(name: str, cls: type, hooks: list[str]) -> PluginSpec:
    # Lead chain only: the rule each breaks does not depend on the chain.
    return PluginSpec(name=name, factory=f"{__name__}:{cls.__name__}", enabled="off",
                      chains=["lead"],
                      summary=cls.__doc__.splitlines()[0] if cls.__doc__ else "",
                      hooks=hooks)  # type: ignore[arg-type]


SPECS = [
    _spec("blocking_hook", BlockingHook, ["before_model"]),
    _spec("mismatched_hook", MismatchedHook, ["before_model"]),
    _spec("lossy_injection", LossyInjection, ["wrap_model_call"]),
    _spec("colliding_key", CollidingKey, ["before_model"]),
    _spec("undeclared_hooks", UndeclaredHooks, ["before_model", "after_model"]),
    _spec("raising_wrapper", RaisingWrapper, ["wrap_model_call"]),
    _spec("mutating_wrapper", MutatingWrapper, ["wrap_model_call"]),
    _spec("title_writer", TitleWriter, ["before_model"]),
    _spec("forgetful_counter", ForgetfulCounter, ["before_model"]),
    _spec("history_scanner", HistoryScanner, ["wrap_model_call"]),
]
"""Each sample's spec; the rule it breaks is in its class docstring."""


class SampleHooks:
    """The in-process entry point declaring every sample."""

    @hookimpl
    def antler_plugin_specs(self) -> list[PluginSpec]:
        return list(SPECS)


SAMPLES = [("conformance_samples", SampleHooks())]
