"""The battery's own in-process entry point: its retrier plugin, and the hook that records.

`ConformanceHooks` declares the `conformance_retry` plugin (off unless a run
asks for retries) and, on `antler_chain_resolved`, wraps every middleware of
a chain the battery builds in its recorders.
"""

from __future__ import annotations

from typing import Any

from .recording import ACTIVE_SLOT, recorded
from .rules import ConformanceTransientError

__all__ = ["ENTRY_POINT", "RETRY_PLUGIN", "ConformanceHooks", "build_retrier"]

ENTRY_POINT = "antler_conformance"
RETRY_PLUGIN = "conformance_retry"


class _Retrier:
    """The battery's outermost model wrapper (after input_sanitization): retries once.

    It retries only `ConformanceTransientError`, which every other wrapper lets
    through, so every plugin's `wrap_model_call` is called again for the retry.
    """

    def __new__(cls, context: Any = None) -> Any:
        from langchain.agents.middleware import AgentMiddleware

        class ConformanceRetry(AgentMiddleware):
            """Retries a model call once after the battery's transient error."""

            def wrap_model_call(self, request: Any, handler: Any) -> Any:
                try:
                    return handler(request)
                except ConformanceTransientError:
                    return handler(request)

            async def awrap_model_call(self, request: Any, handler: Any) -> Any:
                try:
                    return await handler(request)
                except ConformanceTransientError:
                    return await handler(request)

        return ConformanceRetry()


def build_retrier(context: Any) -> Any:
    """The factory of the battery's `conformance_retry` plugin."""
    return _Retrier(context)


class ConformanceHooks:
    """The battery's in-process entry point: its retrier's spec, and the hook that records."""

    def __init__(self) -> None:
        from antler.plugin_api.hookspecs import hookimpl

        self.antler_plugin_specs = hookimpl(self._specs)
        self.antler_chain_resolved = hookimpl(self._chain_resolved)

    def __hash__(self) -> int:
        return id(self)

    @staticmethod
    def _specs() -> list[Any]:
        from antler.plugin_api.spec import PluginSpec

        return [PluginSpec(
            name=RETRY_PLUGIN, factory=f"{__name__}:build_retrier", enabled="off",
            summary="Retries a model call once after the conformance battery's transient error",
            chains=["lead", "subagent"], hooks=["wrap_model_call"], on_error="fail",
            order={"immediately_after": "input_sanitization"})]

    @staticmethod
    def _chain_resolved(chain: Any) -> None:
        slot = ACTIVE_SLOT.get()
        if slot is None:
            return
        for entry in chain.entries:
            entry.middleware = recorded(entry.middleware, entry.name, slot)
