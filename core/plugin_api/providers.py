"""Authorization and guardrail providers: who may run which tool, and the checks around it.

Two independent gates sit in front of every tool call:

* an **authorization provider** answers "may this principal use this tool?".
  The authorization plugin asks it twice with one instance: at build time and
  before each model call, to hide the tools a caller may not use (layer 1),
  and before each call executes (layer 2);
* a **guardrail provider** evaluates each concrete call (tool name and
  arguments) after authorization let it through.

Providers are drivers, found by name in the entry point groups
``antler.authorization_providers`` and ``antler.guardrail_providers``, so a
deployment can replace the shipped RBAC provider or allowlist guardrail
without touching a middleware.

Identity comes only from the server-owned `RunContext` (`antler.plugin_api.run_context(runtime)`),
through one builder, :func:`principal_from_context`. Nothing here ever looks
at message text, tool arguments or ``additional_kwargs``: a user or a model can
write those. Attributes are copied when the principal is built and again on
every read, so neither the caller that started the run nor a provider can
change what a later decision sees.

Decisions go through :func:`evaluate` / :func:`aevaluate`, which apply
``fail_closed`` when a provider raises (or answers with something that is not a
:class:`Decision`), and :func:`audit_decision` writes one structured record
per decision.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.errors import GraphBubbleUp

from antler.contracts.runcontext import DEFAULT_USER, RunContext
from antler.contracts.toolmeta import TOOL_META_KEY, refusal
from antler.errors import AntlerError

from .entrypoints import registered_names, unknown_name

__all__ = [
    "AUTHORIZATION_AUDIT_LOGGER",
    "AUTHORIZATION_PROVIDER",
    "AUTHORIZATION_PROVIDER_GROUP",
    "GUARDRAIL_AUDIT_LOGGER",
    "GUARDRAIL_PROVIDER",
    "GUARDRAIL_PROVIDER_GROUP",
    "TOOL_META_KEY",
    "Action",
    "AuthorizationProvider",
    "AuthzError",
    "Decision",
    "GuardrailProvider",
    "GuardrailRequest",
    "Principal",
    "ProviderConfigError",
    "ProviderLoadError",
    "UnknownProviderError",
    "aevaluate",
    "audit_decision",
    "available_authorization_providers",
    "available_guardrail_providers",
    "denied_tool_message",
    "evaluate",
    "load_authorization_provider",
    "load_guardrail_provider",
    "principal_from_context",
    "resolve_authorization_provider",
    "tool_name",
]

AUTHORIZATION_PROVIDER_GROUP = "antler.authorization_providers"
"""Entry point group in which authorization providers register by name."""

GUARDRAIL_PROVIDER_GROUP = "antler.guardrail_providers"
"""Entry point group in which guardrail providers register by name."""

AUTHORIZATION_PROVIDER = "authorization_provider"
"""Service name of the build's one authorization provider instance (a `Services` entry)."""

GUARDRAIL_PROVIDER = "guardrail_provider"
"""Service name of the build's one guardrail provider instance."""

AUTHORIZATION_AUDIT_LOGGER = "antler.audit.authorization"
GUARDRAIL_AUDIT_LOGGER = "antler.audit.guardrail"

"""`ToolMessage.additional_kwargs` key of a refused call's structured result metadata."""


class AuthzError(AntlerError):
    """Base class of the errors raised while resolving providers."""


class UnknownProviderError(AuthzError, LookupError):
    """No provider is registered under the requested name."""


class ProviderLoadError(AuthzError, RuntimeError):
    """A provider is registered but could not be imported or constructed."""


class ProviderConfigError(AuthzError, ValueError):
    """A provider's options are invalid (providers raise it from their constructor)."""


# -- identity ---------------------------------------------------------------------------------


class Principal:
    """Who is asking: user, roles, internal provenance and attributes. Immutable.

    Build it with :func:`principal_from_context` in runtime code; constructing
    one directly is for tests and providers. ``attributes`` returns a fresh deep
    copy on every read.
    """

    __slots__ = ("_attributes", "is_internal", "roles", "user_id")

    user_id: str
    roles: tuple[str, ...]
    is_internal: bool
    _attributes: dict[str, Any]

    def __init__(self, user_id: str = DEFAULT_USER, roles: tuple[str, ...] = (),
                 is_internal: bool = False,
                 attributes: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "user_id", user_id)
        object.__setattr__(self, "roles", tuple(roles))
        object.__setattr__(self, "is_internal", is_internal is True)
        object.__setattr__(self, "_attributes", copy.deepcopy(dict(attributes or {})))

    @property
    def attributes(self) -> dict[str, Any]:
        """A deep copy of the attributes: changing it changes nothing else."""
        return copy.deepcopy(self._attributes)

    def has_role(self, role: str) -> bool:
        return role in self.roles

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Principal is immutable; cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Principal):
            return NotImplemented
        return (self.user_id, self.roles, self.is_internal, self._attributes) == (
            other.user_id, other.roles, other.is_internal, other._attributes)

    __hash__ = None  # type: ignore[assignment]  # attributes are an arbitrary mapping

    # Immutable, and attributes are copied on read: copies may share this instance.
    def __copy__(self) -> Principal:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Principal:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Principal, (self.user_id, self.roles, self.is_internal, self._attributes))

    def __repr__(self) -> str:
        return (f"Principal(user_id={self.user_id!r}, roles={self.roles!r}, "
                f"is_internal={self.is_internal!r}, attributes=<{len(self._attributes)} keys>)")


def principal_from_context(context: RunContext, default_role: str | None = None) -> Principal:
    """The principal of a run, from its server-owned `RunContext` only.

    * ``roles``: the context's non-empty string roles, deduplicated in order;
      ``default_role`` only when the context names none;
    * ``is_internal``: true only when the context holds the boolean ``True``
      (a ``"true"`` string or ``1`` that slipped in is not internal provenance);
    * ``attributes``: deep-copied now, and again on every read.

    Raises:
        TypeError: when given anything but a `RunContext` (a dict of message
            kwargs, tool arguments, a runtime): identity has one source. Use
            ``principal_from_context(antler.plugin_api.run_context(runtime))``.
    """
    if not isinstance(context, RunContext):
        raise TypeError(
            f"a Principal is built only from a RunContext, not a {type(context).__name__}; "
            "identity never comes from messages or tool arguments"
        )
    roles: list[str] = []
    for role in context.roles:
        if isinstance(role, str) and role.strip() and role not in roles:
            roles.append(role)
    if not roles and default_role:
        roles.append(default_role)
    user_id = context.user_id if isinstance(context.user_id, str) and context.user_id \
        else DEFAULT_USER
    return Principal(user_id=user_id, roles=tuple(roles), is_internal=context.is_internal is True,
                     attributes=context.attributes)


# -- requests and decisions -------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """What the principal wants to do: ``resource`` kind, ``target`` name, optional args.

    Tools use ``resource="tool"`` and the tool's name as ``target``. ``args`` is
    given for an execution check (layer 2) and None when only visibility is
    asked (layer 1); it is a deep copy, so a provider cannot change the call.
    """

    resource: str
    target: str
    args: Mapping[str, Any] | None = None

    @classmethod
    def tool(cls, name: str, args: Mapping[str, Any] | None = None) -> Action:
        return cls("tool", name, copy.deepcopy(dict(args)) if args is not None else None)


@dataclass(frozen=True)
class Decision:
    """A provider's answer. ``rule`` names what decided it (for the audit log).

    ``error`` is set only when the provider failed and the decision was imposed
    by ``fail_closed`` (see :func:`evaluate`).
    """

    allowed: bool
    reason: str = ""
    rule: str | None = None
    error: str | None = None

    @classmethod
    def allow(cls, reason: str = "", rule: str | None = None) -> Decision:
        return cls(True, reason, rule)

    @classmethod
    def deny(cls, reason: str = "", rule: str | None = None) -> Decision:
        return cls(False, reason, rule)


@dataclass(frozen=True)
class GuardrailRequest:
    """One tool call as a guardrail sees it. ``args`` is a deep copy of the call's."""

    tool_name: str
    args: Mapping[str, Any]
    principal: Principal
    tool_call_id: str | None = None
    thread_id: str | None = None
    run_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", copy.deepcopy(dict(self.args)))
        object.__setattr__(self, "metadata", copy.deepcopy(dict(self.metadata)))


# -- provider interfaces ----------------------------------------------------------------------


class AuthorizationProvider(ABC):
    """Decides whether a principal may perform an action. One instance per agent build.

    Implement :meth:`authorize`; override :meth:`aauthorize` when the provider
    has a native async client (the default runs :meth:`authorize` in a worker
    thread so a blocking provider cannot stall the event loop). Both must give
    the same answer. Raise :class:`ProviderConfigError` from the constructor
    for invalid options.
    """

    @abstractmethod
    def authorize(self, principal: Principal, action: Action) -> Decision:
        """Allow or deny ``action`` for ``principal``."""

    async def aauthorize(self, principal: Principal, action: Action) -> Decision:
        """Async form of :meth:`authorize`."""
        return await asyncio.to_thread(self.authorize, principal, action)

    def validate_default_role(self, role: str | None) -> None:  # noqa: B027 - optional hook
        """Raise :class:`ProviderConfigError` when ``role`` cannot serve as the fallback role.

        Called while the provider is resolved, so a misspelt ``default_role``
        fails the agent's construction instead of silently granting nothing.
        The default accepts any role.
        """

    def compile_principals(self, base: Principal) -> list[Principal]:
        """The principals whose tools an agent is compiled with (layer 1 at build time).

        A run's roles select among the compiled tools, so an agent must be
        compiled with every tool some run may be allowed: a tool is compiled
        when any of these principals may use it. ``base`` is the build's user
        with the configured default role. The default is ``[base]``; a provider
        that knows its roles (RBAC) returns one principal per role.
        """
        return [base]


class GuardrailProvider(ABC):
    """Evaluates each tool call before it runs. One instance per agent build.

    Same conventions as :class:`AuthorizationProvider`: implement
    :meth:`evaluate`, override :meth:`aevaluate` for a native async client.
    """

    @abstractmethod
    def evaluate(self, request: GuardrailRequest) -> Decision:
        """Allow or deny one tool call."""

    async def aevaluate(self, request: GuardrailRequest) -> Decision:
        """Async form of :meth:`evaluate`."""
        return await asyncio.to_thread(self.evaluate, request)


# -- loading providers by name ----------------------------------------------------------------

def available_authorization_providers() -> list[str]:
    """Names registered in ``antler.authorization_providers``, sorted."""
    return registered_names(AUTHORIZATION_PROVIDER_GROUP)


def available_guardrail_providers() -> list[str]:
    """Names registered in ``antler.guardrail_providers``, sorted."""
    return registered_names(GUARDRAIL_PROVIDER_GROUP)


def load_authorization_provider(name: str, /, **options: Any) -> AuthorizationProvider:
    """Construct the authorization provider registered as ``name`` with ``options``.

    Raises:
        UnknownProviderError: no provider of that name (lists the known ones,
            suggests the closest).
        ProviderLoadError: it cannot be imported or constructed, or is not an
            `AuthorizationProvider`.
        ProviderConfigError: the provider rejected its options.
    """
    provider: AuthorizationProvider = _load(AUTHORIZATION_PROVIDER_GROUP, "authorization",
                                            name, options, AuthorizationProvider)
    return provider


def load_guardrail_provider(name: str, /, **options: Any) -> GuardrailProvider:
    """Construct the guardrail provider registered as ``name`` (see the authorization form)."""
    provider: GuardrailProvider = _load(GUARDRAIL_PROVIDER_GROUP, "guardrail", name, options,
                                        GuardrailProvider)
    return provider


def resolve_authorization_provider(name: str, *, default_role: str | None,
                                   options: Mapping[str, Any] | None = None,
                                   ) -> AuthorizationProvider:
    """Load provider ``name`` and check that it accepts ``default_role``."""
    provider = load_authorization_provider(name, **dict(options or {}))
    provider.validate_default_role(default_role)
    return provider


def _load(group: str, kind: str, name: str, options: Mapping[str, Any], base: type) -> Any:
    from stevedore.driver import DriverManager
    from stevedore.exception import MultipleMatches, NoMatches

    available = registered_names(group)
    if name not in available:
        raise _unknown(kind, group, name, available)
    failures: list[tuple[Any, BaseException]] = []
    try:
        manager: DriverManager[Any] = DriverManager(
            namespace=group, name=name, invoke_on_load=False,
            on_load_failure_callback=lambda _m, ep, exc: failures.append((ep, exc)),
        )
    except MultipleMatches:
        raise ProviderLoadError(
            f"{kind} provider {name!r} is registered more than once in {group!r}; uninstall "
            "one of the distributions that declare it"
        ) from None
    except NoMatches as exc:
        if failures:
            ep, error = failures[0]
            raise ProviderLoadError(
                f"{kind} provider {name!r} ({ep.value}) failed to load: "
                f"{type(error).__name__}: {error}"
            ) from error
        raise _unknown(kind, group, name, registered_names(group)) from exc
    factory = manager.driver
    try:
        provider = factory(**options)
    except AntlerError:
        raise
    # Shaped like the chain builder's factory call (chain/build.py), with a provider's
    # own error and wording: an operator reads one as a provider, the other as a plugin.
    except TypeError as exc:
        raise ProviderLoadError(
            f"{kind} provider {name!r} could not be constructed with options "
            f"{sorted(options)}: {exc}"
        ) from exc
    except Exception as exc:
        raise ProviderLoadError(
            f"{kind} provider {name!r} failed while being constructed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(provider, base):
        raise ProviderLoadError(
            f"{kind} provider {name!r} built a {type(provider).__name__}, which is not an "
            f"antler.plugin_api.providers.{base.__name__}; its entry point must name a subclass"
        )
    return provider


def _unknown(kind: str, group: str, name: str, available: list[str]) -> UnknownProviderError:
    return UnknownProviderError(unknown_name(kind, name, group, available))


# -- evaluating and auditing ------------------------------------------------------------------


def evaluate(call: Callable[[], Any], *, fail_closed: bool = True) -> Decision:
    """Run one provider check; a failure becomes a deny (``fail_closed``) or an allow.

    A provider that raises, or answers with anything but a :class:`Decision`
    (a bare ``True`` is not an answer), has failed; the imposed decision
    carries the failure in ``error`` for the audit log. An interrupt
    (`GraphBubbleUp`, raised by a provider that asks a person) is not a
    failure: it always propagates, so ``fail_closed: false`` cannot turn a
    pending approval into an allow.
    """
    try:
        return _checked(call())
    except GraphBubbleUp:
        raise
    except Exception as exc:
        return _failed(exc, fail_closed)


async def aevaluate(call: Callable[[], Awaitable[Any]], *, fail_closed: bool = True) -> Decision:
    """Async form of :func:`evaluate`."""
    try:
        return _checked(await call())
    except GraphBubbleUp:
        raise
    except Exception as exc:
        return _failed(exc, fail_closed)


def _checked(answer: Any) -> Decision:
    if not isinstance(answer, Decision):
        raise TypeError(f"the provider answered {type(answer).__name__}, not a Decision")
    return answer


def _failed(exc: Exception, fail_closed: bool) -> Decision:
    error = f"{type(exc).__name__}: {exc}"
    if fail_closed:
        return Decision(False, "the provider failed; denied because fail_closed is on",
                        "fail_closed", error)
    return Decision(True, "the provider failed; allowed because fail_closed is off",
                    "fail_open", error)


def audit_decision(logger: logging.Logger | str, *, check: str, layer: str,
                   principal: Principal, target: str, decision: Decision,
                   provider: str, level: int | None = None,
                   **details: Any) -> dict[str, Any]:
    """Write one structured audit record for one decision and return it.

    The record is the log record's ``audit`` attribute (for handlers that ship
    structured logs) and, as JSON, its message. Attributes are never logged:
    they may be sensitive. Denials and provider failures log at WARNING,
    allows at INFO unless ``level`` says otherwise.
    """
    record: dict[str, Any] = {
        "event": f"{check}.decision", "layer": layer, "provider": provider,
        "target": target, "allowed": decision.allowed, "reason": decision.reason,
        "rule": decision.rule, "error": decision.error, "user_id": principal.user_id,
        "roles": list(principal.roles), "is_internal": principal.is_internal,
        **{key: value for key, value in details.items() if value is not None},
    }
    if level is None:
        level = logging.INFO if decision.allowed and decision.error is None else logging.WARNING
    log = logging.getLogger(logger) if isinstance(logger, str) else logger
    if log.isEnabledFor(level):
        log.log(level, "%s", json.dumps(record, sort_keys=True, default=str),
                extra={"audit": record})
    return record


# -- tools ------------------------------------------------------------------------------------


def tool_name(tool: Any) -> str | None:
    """The name a tool is offered under: a `BaseTool`, a provider tool dict, or a function.

    A provider-side tool without a name (``{"type": "web_search"}``) is named by
    its type. None when no name can be found; callers deny such a tool.
    """
    if isinstance(tool, Mapping):
        function = tool.get("function")
        name = tool.get("name") or (function.get("name") if isinstance(function, Mapping)
                                    else None) or tool.get("type")
    else:
        name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
    return name if isinstance(name, str) and name else None


def denied_tool_message(tool_call: Mapping[str, Any], content: str, *, source: str,
                        decision: Decision) -> Any:
    """The error `ToolMessage` answering a refused call; the tool never ran.

    ``additional_kwargs["antler_tool_meta"]`` says so in structured form. A
    policy denial is recoverable by the model (it can choose another tool); a
    provider failure is not (``recommended_next_action: stop``).
    """
    from langchain_core.messages import ToolMessage

    failed = decision.error is not None
    meta = refusal("denied", source, recoverable=not failed,
                   next_action="stop" if failed else "use_another_tool", rule=decision.rule,
                   cause="provider_error" if failed else "policy")
    name = tool_call.get("name")
    return ToolMessage(content=content, tool_call_id=str(tool_call.get("id") or ""),
                       name=name if isinstance(name, str) else None, status="error",
                       additional_kwargs={TOOL_META_KEY: meta})
