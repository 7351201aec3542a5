"""AuthorizationMiddleware: the caller sees and runs only the tools its roles allow.

One provider instance, resolved once per build, answers both layers:

Layer 1 - visibility.
    At build time the plugin's `antler_select_tools` hook (see ``__init__``)
    drops the tools no run could use, so they are never compiled into the
    agent: a tool is compiled when any principal the provider compiles for
    may use it (`AuthorizationProvider.compile_principals`; with RBAC, the
    default role and every declared role). Then, before every model call,
    ``wrap_model_call`` filters ``request.tools`` with the run's own principal
    (its `RunContext.roles`, else ``default_role``), so each run's roles select
    its tool set (this also covers the tools middlewares register themselves,
    which the build hook never sees). A run with no role and no
    ``default_role`` gets no tool, and the audit log says so once per run.

Layer 2 - execution.
    ``wrap_tool_call`` asks the provider about every call before it runs
    (whether or not layer 1 showed the tool: a model may name any tool). A
    denial answers with an error `ToolMessage` carrying
    ``additional_kwargs["antler_tool_meta"]``; the tool never runs.

The generated ``tool_search`` (with ``tool_search: {enabled: true}`` and MCP
tools deferred) is exempt from both per-run layers: its catalog holds only the
tools the build-time selection kept, each of which layer 1 and layer 2 still
check when it is shown or called. The exemption is for that one tool object
of this build (`DeferredTools.is_tool_search`); an ordinary tool that is
merely named ``tool_search`` is checked like any other, and a guardrail still
checks every call.

Identity comes only from the run's `RunContext`
(`antler.plugin_api.principal_from_context`), never from messages or tool
arguments. A provider that raises or answers nonsense is treated per ``fail_closed``.
Every decision is written to the ``antler.audit.authorization`` logger (layer-1
allows at DEBUG, the rest at INFO/WARNING). Sync and async hooks share one
implementation each and give the same answers.

How the instance is shared: :func:`shared_provider` takes the build's
``authorization_provider`` service, or resolves the configured provider and
registers it there. The factory and the build hook both call it, so whichever
runs first creates it and the other reuses it; a subagent built from the same
services reuses it too. An embedding application may provide its own
instance under that service name; it then replaces the configured one.

Where it sits: after dangling_tool_call and outer of guardrail (manifest), so
authorization can deny before an external guardrail is asked.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from antler.plugin_api import (
    AUTHORIZATION_AUDIT_LOGGER,
    AUTHORIZATION_PROVIDER,
    DEFERRED_TOOLS,
    Action,
    AuthorizationProvider,
    BuildContext,
    Decision,
    DeferredTools,
    Principal,
    RunContext,
    RunStore,
    RuntimeOptions,
    Services,
    aevaluate,
    audit_decision,
    denied_tool_message,
    evaluate,
    principal_from_context,
    resolve_authorization_provider,
    run_context,
    run_id_of,
    thread_id_of,
    tool_name,
)

from .config import AuthorizationConfig

__all__ = [
    "AuthorizationMiddleware",
    "build",
    "build_principal",
    "select_tools",
    "shared_provider",
]

SOURCE = "authorization"
_audit_logger = logging.getLogger(AUTHORIZATION_AUDIT_LOGGER)
_TOOL_CHOICE_KEYWORDS = frozenset({"auto", "any", "none", "required"})


def shared_provider(services: Services, config: AuthorizationConfig) -> AuthorizationProvider:
    """The build's one provider: the service if set, else resolved from config and registered."""
    provided = services.items.get(AUTHORIZATION_PROVIDER) is not None
    provider = services.shared(AUTHORIZATION_PROVIDER, AuthorizationProvider, functools.partial(
        resolve_authorization_provider, config.provider, default_role=config.default_role,
        options=config.provider_options))
    if provided:  # one resolved from config checked its default role already
        provider.validate_default_role(config.default_role)
    return provider


def build_principal(options: RuntimeOptions, config: AuthorizationConfig) -> Principal:
    """The principal the agent's tools are compiled for: the build's user, default role."""
    context = RunContext(thread_id=options.thread_id, user_id=options.user_id)
    return principal_from_context(context, config.default_role)


def select_tools(ctx: BuildContext, tools: list[Any]) -> list[Any]:
    """Layer 1 at build time: the tools some run may use (the hook's body).

    A tool is compiled when any principal the provider compiles for
    (`AuthorizationProvider.compile_principals`: with RBAC, every role) may
    use it; each run's own roles then narrow the set before every model call.
    """
    config = ctx.plugin_config(AuthorizationConfig)
    provider = shared_provider(ctx.services, config)
    principals = provider.compile_principals(build_principal(ctx.runtime, config))
    kept = []
    for tool in tools:
        name = tool_name(tool)
        decision = _unnamed() if name is None else _first_allowed(
            provider, principals, Action.tool(name), config.fail_closed)
        _audit(principals[0], name, decision, type(provider).__name__, layer="visibility",
               phase="build", chain=ctx.chain, level=logging.DEBUG)
        if decision.allowed:
            kept.append(tool)
    return kept


class AuthorizationMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Filters the model's tools per run and checks every tool call with one provider."""

    def __init__(self, provider: AuthorizationProvider, *, default_role: str | None = None,
                 fail_closed: bool = True, provider_name: str | None = None,
                 deferred: DeferredTools | None = None) -> None:
        super().__init__()
        self.provider = provider
        self.deferred = deferred or DeferredTools()
        self.default_role = default_role
        self.fail_closed = fail_closed
        self.provider_name = provider_name or type(provider).__name__
        self._roleless_runs: RunStore[bool] = RunStore()

    def principal(self, runtime: Any) -> Principal:
        """The run's principal, from its `RunContext` only.

        A run that names no role, with no ``default_role`` configured, is denied
        every tool; that is said once per run on the audit logger, at WARNING.
        """
        principal = principal_from_context(run_context(runtime), self.default_role)
        if not principal.roles:
            key = run_id_of(runtime)
            if key not in self._roleless_runs:
                self._roleless_runs.set(key, True)
                record = {"event": "authorization.no_role", "layer": "run", "run_id": key,
                          "user_id": principal.user_id,
                          "reason": "the run names no role and authorization has no "
                                    "default_role, so every tool is denied; give the run "
                                    "roles (RunContext.roles) or set authorization.default_role"}
                _audit_logger.warning(json.dumps(record, sort_keys=True),
                                      extra={"audit": record})
        return principal

    # -- layer 1, per run ---------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]
                        ) -> Any:
        """Hide the tools the run's principal may not use, then call the model."""
        principal = self.principal(request.runtime)
        decisions = [self._decide_visible(principal, tool, request.runtime)
                     for tool in request.tools]
        return handler(self._narrowed(request, decisions))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[Any]]) -> Any:
        """Async form of `wrap_model_call` (the provider's async API)."""
        principal = self.principal(request.runtime)
        decisions = [await self._adecide_visible(principal, tool, request.runtime)
                     for tool in request.tools]
        return await handler(self._narrowed(request, decisions))

    def _decide_visible(self, principal: Principal, tool: Any, runtime: Any) -> Decision:
        if self.deferred.is_tool_search(tool):
            return _DISCOVERY
        name = tool_name(tool)
        decision = _unnamed() if name is None else evaluate(
            lambda: self.provider.authorize(principal, Action.tool(name)),
            fail_closed=self.fail_closed)
        self._audit_visible(principal, name, decision, runtime)
        return decision

    async def _adecide_visible(self, principal: Principal, tool: Any, runtime: Any
                               ) -> Decision:
        if self.deferred.is_tool_search(tool):
            return _DISCOVERY
        name = tool_name(tool)
        decision = _unnamed() if name is None else await aevaluate(
            lambda: self.provider.aauthorize(principal, Action.tool(name)),
            fail_closed=self.fail_closed)
        self._audit_visible(principal, name, decision, runtime)
        return decision

    def _audit_visible(self, principal: Principal, name: str | None, decision: Decision,
                       runtime: Any) -> None:
        _audit(principal, name, decision, self.provider_name, layer="visibility",
               phase="model_call", thread_id=thread_id_of(runtime), run_id=run_id_of(runtime))

    @staticmethod
    def _narrowed(request: ModelRequest, decisions: Sequence[Decision]) -> ModelRequest:
        if all(d.allowed for d in decisions):
            return request
        kept = [tool for tool, d in zip(request.tools, decisions, strict=True) if d.allowed]
        overrides: dict[str, Any] = {"tools": kept}
        choice = request.tool_choice
        # A forced choice of a hidden tool would make the provider reject the request.
        if isinstance(choice, str) and choice not in _TOOL_CHOICE_KEYWORDS and \
                choice not in {tool_name(t) for t in kept}:
            overrides["tool_choice"] = None
        return request.override(**overrides)

    # -- layer 2 ------------------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
                       ) -> ToolMessage | Command[Any]:
        """Ask the provider about the call; run it only when allowed."""
        if self.deferred.is_tool_search(request.tool):
            return handler(request)
        principal = self.principal(request.runtime)
        call = request.tool_call
        decision = evaluate(
            lambda: self.provider.authorize(principal, self._action(call)),
            fail_closed=self.fail_closed)
        refusal = self._refusal(principal, call, decision, request.runtime)
        return refusal if refusal is not None else handler(request)

    async def awrap_tool_call(
        self, request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async form of `wrap_tool_call`."""
        if self.deferred.is_tool_search(request.tool):
            return await handler(request)
        principal = self.principal(request.runtime)
        call = request.tool_call
        decision = await aevaluate(
            lambda: self.provider.aauthorize(principal, self._action(call)),
            fail_closed=self.fail_closed)
        refusal = self._refusal(principal, call, decision, request.runtime)
        return refusal if refusal is not None else await handler(request)

    @staticmethod
    def _action(call: Any) -> Action:
        args = call.get("args")
        return Action.tool(str(call.get("name") or ""), args if isinstance(args, dict) else {})

    def _refusal(self, principal: Principal, call: Any, decision: Decision,
                 runtime: Any) -> ToolMessage | None:
        name = str(call.get("name") or "")
        _audit(principal, name, decision, self.provider_name, layer="execution",
               phase="tool_call", tool_call_id=call.get("id"), thread_id=thread_id_of(runtime),
               run_id=run_id_of(runtime))
        if decision.allowed:
            return None
        if decision.error is not None:
            text = (f"Error: the authorization check for tool {name!r} failed, so the call was "
                    "not run. Stop using this tool and tell the user.")
        else:
            text = (f"Error: permission denied: tool {name!r} is not available to you "
                    f"({decision.reason}). The call was not run; do not retry it, use another "
                    "tool or tell the user.")
        message: ToolMessage = denied_tool_message(call, text, source=SOURCE, decision=decision)
        return message


def _first_allowed(provider: AuthorizationProvider, principals: Sequence[Principal],
                   action: Action, fail_closed: bool) -> Decision:
    """The first principal's allow, or the last denial when none may act."""
    decision = _unnamed()
    for principal in principals:
        decision = evaluate(functools.partial(provider.authorize, principal, action),
                            fail_closed=fail_closed)
        if decision.allowed:
            break
    return decision


_DISCOVERY = Decision.allow("the generated tool_search searches a catalog layer 1 already "
                            "filtered", rule="deferred_tool_search")


def _unnamed() -> Decision:
    return Decision.deny("the tool has no name to authorize", rule="unnamed_tool")


def _audit(principal: Principal, name: str | None, decision: Decision, provider: str, *,
           layer: str, phase: str, level: int | None = None, **details: Any) -> None:
    # Hiding tools is routine: visibility allows at DEBUG, visibility denials at INFO.
    if level is None and layer == "visibility" and decision.error is None:
        level = logging.DEBUG if decision.allowed else logging.INFO
    audit_decision(_audit_logger, check=SOURCE, layer=layer, principal=principal,
                   target=name or "<unnamed>", decision=decision, provider=provider,
                   level=level, phase=phase, **details)


def build(ctx: BuildContext) -> AuthorizationMiddleware:
    """Factory named in the manifest: the provider comes from (or goes into) the services."""
    config = ctx.plugin_config(AuthorizationConfig)
    provider = shared_provider(ctx.services, config)
    deferred = ctx.services.items.get(DEFERRED_TOOLS)
    return AuthorizationMiddleware(provider, default_role=config.default_role,
                                   fail_closed=config.fail_closed,
                                   deferred=deferred if isinstance(deferred, DeferredTools)
                                   else None)
