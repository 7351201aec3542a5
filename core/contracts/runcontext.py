"""Server-owned facts about one run, handed to the graph as LangGraph runtime context.

Identity (user, roles, internal provenance, attributes) comes only from here:
never from message text, tool arguments or `additional_kwargs`, which a user or
a model can write. Middlewares read it with `run_context(runtime)`.

Under LangGraph Server the run's `context` is whatever the HTTP client sent, so
there the identity comes from the server's auth handler instead: the user it
authenticated, which the server puts in `config["configurable"]
["langgraph_auth_user"]` (a key clients cannot set). Only a graph built with
`TrustingRunContext` (the operator's `server: {trust_client_identity: true}`,
for a trusted front end that authenticates users itself) takes the identity
from the client's context.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

DEFAULT_USER = "default"
AUTH_USER_KEY = "langgraph_auth_user"
"""The configurable key where LangGraph Server puts the user its auth handler returned."""


@dataclass(frozen=True)
class RunContext:
    """The `context_schema` of every Antler agent."""

    thread_id: str | None = None
    user_id: str = DEFAULT_USER
    run_id: str | None = None
    is_internal: bool = False
    roles: tuple[str, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)
    trust_client_identity: ClassVar[bool] = False
    """Under LangGraph Server, whether the client's context may set the identity."""

    def __post_init__(self) -> None:
        if isinstance(self.roles, str):
            raise TypeError(
                f"RunContext.roles must be a list of role names, not the string {self.roles!r} "
                f"(write roles=[{self.roles!r}])"
            )
        # A caller mutating its dict after the run started must not change a decision.
        object.__setattr__(self, "attributes", _own_copy(self.attributes))
        if type(self.roles) is not tuple:
            object.__setattr__(self, "roles", tuple(self.roles))


_ATOMIC = frozenset({str, int, float, bool, bytes, type(None)})
"""Value types a copy of the attributes may share with the caller's: nothing can change
one in place."""


def _own_copy(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `attributes` nothing the caller holds can change: a new dict, whose values
    are deep copies unless all of them are atomic (the usual case: ids, names, flags), which
    the new dict can share. A context is made for every run and every delegated task."""
    copied = dict(attributes)
    atomic = _ATOMIC
    for value in copied.values():
        if type(value) not in atomic:
            return copy.deepcopy(copied)
    return copied


@dataclass(frozen=True)
class TrustingRunContext(RunContext):
    """The context schema of a served graph whose clients may state the identity.

    For a front end that authenticates users itself and calls the server with
    one service credential; never for clients users control.
    """

    trust_client_identity: ClassVar[bool] = True


def run_context(runtime: Any) -> RunContext:
    """The run's `RunContext`, tolerating runtimes built without one (bare graphs).

    In a run LangGraph Server started, the identity is the authenticated user's
    (see `authenticated`) unless the graph's context schema trusts the client.
    """
    return _resolved(runtime, _config())[0]


def _resolved(runtime: Any, config: Mapping[str, Any]) -> tuple[RunContext, Mapping[str, Any]]:
    """(the run's `RunContext`, the config's configurable), computed once per run.

    Hooks ask for the context many times per run; the answer depends only on
    the runtime's context object and the server's auth user, so it is kept
    for that pair (by identity: a context dict changed after the run started
    does not change a decision, as `RunContext` copies its attributes).
    """
    raw = getattr(runtime, "context", None)
    configurable = config.get("configurable") or {}
    user = configurable.get(AUTH_USER_KEY, _NO_USER)
    if isinstance(raw, RunContext) and (user is _NO_USER or raw.trust_client_identity):
        return raw, configurable  # the common case: nothing to compute
    thread = configurable.get("thread_id")
    key = (id(raw), id(user), thread)
    cached = _RESOLVED.get(key)
    if cached is not None and cached[0] is raw and cached[1] is user:
        return cached[2], configurable
    if isinstance(raw, RunContext):
        context = raw
    elif isinstance(raw, Mapping):
        context = RunContext(**{k: v for k, v in raw.items()
                                if k in RunContext.__dataclass_fields__})
    else:
        context = RunContext()
    if user is not _NO_USER and not context.trust_client_identity:
        context = authenticated(context, configurable)
    _remember(key, (raw, user, context))
    return context, configurable


_NO_USER = object()
_RESOLVED: dict[tuple[int, int, Any], tuple[Any, Any, RunContext]] = {}
"""Recent computed contexts (with the objects their key's ids are of, which keeps
those ids from being reused while the entry lives)."""
_RESOLVED_MAX = 256


def _remember(key: tuple[int, int, Any], entry: tuple[Any, Any, RunContext]) -> None:
    _RESOLVED[key] = entry
    while len(_RESOLVED) > _RESOLVED_MAX:
        try:
            del _RESOLVED[next(iter(_RESOLVED))]
        except (KeyError, RuntimeError, StopIteration):  # another thread got there first
            break


def authenticated(context: RunContext, configurable: Mapping[str, Any]) -> RunContext:
    """`context` with the identity of the server's authenticated user, thread and run.

    The user id is the auth handler's `identity`; its roles and attributes are
    the user's `roles` and `attributes` fields, if it returned any; a run of
    the server is never internal. Without an auth handler the server has no
    user (None) and every run is the default user's. The thread id is the
    server's, not the client's; the run id (per-run bookkeeping, which a
    delegated task sets for its subagent) is kept.
    """
    user = configurable.get(AUTH_USER_KEY)
    identity = _user_field(user, "identity") or DEFAULT_USER
    roles = _user_field(user, "roles") or ()
    attributes = _user_field(user, "attributes") or {}
    return replace(
        context, user_id=str(identity),
        roles=tuple(str(role) for role in ([roles] if isinstance(roles, str) else roles)),
        attributes=dict(attributes) if isinstance(attributes, Mapping) else {},
        is_internal=False, thread_id=_text(configurable.get("thread_id")))


def _user_field(user: Any, name: str) -> Any:
    """A field of an auth user, which the server hands over as an object or a mapping."""
    if user is None:
        return None
    if isinstance(user, Mapping):
        return user.get(name)
    try:
        return user[name]
    except (KeyError, TypeError, IndexError):
        return getattr(user, name, None)


def _text(value: Any) -> str | None:
    return str(value) if value is not None else None


def _config() -> Mapping[str, Any]:
    """The running graph's config, or nothing outside a graph run."""
    global _get_config
    if _get_config is None:
        from langgraph.config import get_config

        _get_config = get_config
    try:
        return _get_config()
    except RuntimeError:  # called outside a running graph
        return {}


_get_config: Any = None


def thread_id_of(runtime: Any) -> str | None:
    """The thread id: from the run context, else from the checkpointer's configurable."""
    return run_key_of(runtime)[0]


def run_id_of(runtime: Any) -> str | None:
    """The run id: from the run context, else LangGraph's run id of the config."""
    return run_key_of(runtime)[1]


def run_key_of(runtime: Any) -> tuple[str | None, str | None]:
    """(thread id, run id) of the run `runtime` belongs to, the config read once."""
    config = _config()
    context, configurable = _resolved(runtime, config)
    thread = context.thread_id or _text(configurable.get("thread_id"))
    run = context.run_id or _text(config.get("run_id")
                                  or (config.get("metadata") or {}).get("run_id"))
    return thread, run
