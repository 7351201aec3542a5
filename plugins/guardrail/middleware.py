"""GuardrailMiddleware: an explicitly configured provider evaluates every tool call.

``wrap_tool_call`` maps each call into an `antler.plugin_api.GuardrailRequest` (tool
name, a deep copy of the arguments, the run's principal built from its
`RunContext` only, call/thread/run ids) and asks the provider. A denial
answers with an error `ToolMessage` carrying
``additional_kwargs["antler_tool_meta"]``; the tool never runs. A provider that
raises or answers nonsense is treated per ``fail_closed``. Every decision is
written to the ``antler.audit.guardrail`` logger. The async hook uses the
provider's async API and gives the same answers.

Unlike authorization, the guardrail has no visibility layer and exempts no
tool: it sees every call that authorization let through. The principal carries
the run's own roles (no fallback role): the guardrail judges calls, not roles.

One provider instance per build, shared through the ``guardrail_provider``
service the same way the authorization provider is (an embedding application
may provide its own instance under that name).

Where it sits: inner of authorization (manifest ``outer_of``), so an
authorization denial never reaches an external guardrail, and before
sandbox_audit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from antler.plugin_api import (
    GUARDRAIL_AUDIT_LOGGER,
    GUARDRAIL_PROVIDER,
    BuildContext,
    BuildError,
    Decision,
    GuardrailProvider,
    GuardrailRequest,
    Services,
    aevaluate,
    audit_decision,
    denied_tool_message,
    evaluate,
    load_guardrail_provider,
    principal_from_context,
    run_context,
    run_id_of,
    thread_id_of,
)

from .config import GuardrailsConfig

__all__ = ["GuardrailMiddleware", "build", "shared_provider"]

SOURCE = "guardrail"
_audit_logger = logging.getLogger(GUARDRAIL_AUDIT_LOGGER)


def shared_provider(services: Services, config: GuardrailsConfig) -> GuardrailProvider:
    """The build's one guardrail provider: the service if set, else the configured one."""
    def configured() -> GuardrailProvider:
        if config.provider is None:
            raise BuildError("guardrails are enabled but no guardrails.provider is configured")
        return load_guardrail_provider(config.provider, **config.provider_options)

    return services.shared(GUARDRAIL_PROVIDER, GuardrailProvider, configured)


class GuardrailMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Evaluates every tool call with the configured guardrail provider."""

    def __init__(self, provider: GuardrailProvider, *, fail_closed: bool = True) -> None:
        super().__init__()
        self.provider = provider
        self.fail_closed = fail_closed

    def guardrail_request(self, request: ToolCallRequest) -> GuardrailRequest:
        """The provider's view of one call; identity from the `RunContext` only."""
        call = request.tool_call
        args = call.get("args")
        return GuardrailRequest(
            tool_name=str(call.get("name") or ""),
            args=args if isinstance(args, dict) else {},
            principal=principal_from_context(run_context(request.runtime)),
            tool_call_id=call.get("id"),
            thread_id=thread_id_of(request.runtime),
            run_id=run_id_of(request.runtime),
        )

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
                       ) -> ToolMessage | Command[Any]:
        """Run the call only when the provider allows it."""
        checked = self.guardrail_request(request)
        decision = evaluate(lambda: self.provider.evaluate(checked),
                            fail_closed=self.fail_closed)
        refusal = self._refusal(request, checked, decision)
        return refusal if refusal is not None else handler(request)

    async def awrap_tool_call(
        self, request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async form of `wrap_tool_call`."""
        checked = self.guardrail_request(request)
        decision = await aevaluate(lambda: self.provider.aevaluate(checked),
                                   fail_closed=self.fail_closed)
        refusal = self._refusal(request, checked, decision)
        return refusal if refusal is not None else await handler(request)

    def _refusal(self, request: ToolCallRequest, checked: GuardrailRequest,
                 decision: Decision) -> ToolMessage | None:
        audit_decision(_audit_logger, check=SOURCE, layer="execution",
                       principal=checked.principal, target=checked.tool_name,
                       decision=decision, provider=type(self.provider).__name__,
                       phase="tool_call", tool_call_id=checked.tool_call_id,
                       thread_id=checked.thread_id, run_id=checked.run_id)
        if decision.allowed:
            return None
        name = checked.tool_name
        if decision.error is not None:
            text = (f"Error: the guardrail check for tool {name!r} failed, so the call was not "
                    "run. Stop using this tool and tell the user.")
        else:
            text = (f"Error: the guardrail blocked this call to {name!r} ({decision.reason}). "
                    "The call was not run; do not retry it unchanged.")
        message: ToolMessage = denied_tool_message(request.tool_call, text, source=SOURCE,
                                                   decision=decision)
        return message


def build(ctx: BuildContext) -> GuardrailMiddleware:
    """Factory named in the manifest: the provider comes from (or goes into) the services."""
    config = ctx.plugin_config(GuardrailsConfig)
    return GuardrailMiddleware(shared_provider(ctx.services, config),
                               fail_closed=config.fail_closed)
