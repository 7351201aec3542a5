"""Member proxies: each middleware's fused hooks hidden from `create_agent`.

A proxy is an object of a subclass of the member's own class that shares the
instance's attribute dictionary and hides the fused hooks behind a class-level
descriptor (`_HiddenHook`), so LangChain makes no node for them while the fused
node still reaches them. This module also reads what a class declares: which
hooks it overrides, the jumps it declares, and whether a hook may `interrupt()`.
"""

from __future__ import annotations

import types
from collections.abc import Collection, Sequence
from typing import Any

from .fusionplan import NODE_HOOKS, UNFUSABLE_ATTRIBUTE, WRAP_HOOKS, Member


def interrupting_wrap(middlewares: Sequence[Any], members: Sequence[Member]) -> str:
    """The label of a middleware whose model-call wrapper may interrupt ("" if none)."""
    for middleware, member in zip(middlewares, members, strict=True):
        cls = type(middleware)
        if any(_mentions_interrupt(getattr(cls, variant)) for variant in
               ("wrap_model_call", "awrap_model_call") if overrides(cls, variant)):
            return member.label
    return ""


def first_member(members: Sequence[Member], kind: str) -> int | None:
    return next((i for i, m in enumerate(members) if kind in m.hooks), None)


def overrides(cls: type, variant: str) -> bool:
    from langchain.agents.middleware import AgentMiddleware

    mine = getattr(cls, variant, None)
    return mine is not None and mine is not getattr(AgentMiddleware, variant)


def make_member(middleware: Any, label: str, unfusable: Collection[str]) -> Member:
    cls = type(middleware)
    hooks = frozenset(kind for kind in (*NODE_HOOKS, *WRAP_HOOKS)
                      if overrides(cls, kind) or overrides(cls, "a" + kind))
    alone: dict[str, str] = {}
    can_jump: dict[str, tuple[str, ...]] = {}
    for kind in hooks:
        if label in unfusable:
            alone[kind] = "fusable: false"
        elif not hasattr(middleware, "__dict__"):
            alone[kind] = "instance has no __dict__ for its proxy"
        elif getattr(cls, UNFUSABLE_ATTRIBUTE, True) is False:
            alone[kind] = f"{UNFUSABLE_ATTRIBUTE} = False"
        elif kind in WRAP_HOOKS:
            continue  # a wrapper's interrupt works the same in a shared layer; it jumps nowhere
        elif any(_mentions_interrupt(getattr(cls, v)) for v in (kind, "a" + kind)
                 if overrides(cls, v)):
            alone[kind] = "may call interrupt()"
        can_jump[kind] = _declared_jumps(cls, kind)
    return Member(label, middleware.name, hooks, alone, can_jump,
                  getattr(middleware, "trace_policy", None))


def _declared_jumps(cls: type, kind: str) -> tuple[str, ...]:
    # LangChain's rule (factory._get_can_jump_to): the sync hook's declaration if it
    # is overridden, else the async one's.
    for variant in (kind, "a" + kind):
        if overrides(cls, variant):
            declared = getattr(getattr(cls, variant), "__can_jump_to__", None)
            if declared:
                return tuple(declared)
    return ()


def _mentions_interrupt(function: Any) -> bool:
    """Whether `function`, or one it wraps or closes over, names `interrupt`.

    Decorators reach the user's function through `__wrapped__` or a closure
    (LangChain's `@after_model` makes a class whose hook calls the function).
    """
    seen: set[int] = set()
    pending = [function]
    while pending:
        function = pending.pop()
        if function is None or id(function) in seen:
            continue
        seen.add(id(function))
        code = getattr(function, "__code__", None)
        if code is not None and _code_mentions(code, "interrupt"):
            return True
        pending.append(getattr(function, "__wrapped__", None))
        pending.append(getattr(function, "__func__", None))
        for cell in getattr(function, "__closure__", None) or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(content):
                pending.append(content)
    return False


def _code_mentions(code: types.CodeType, name: str) -> bool:
    if name in code.co_names:
        return True
    return any(isinstance(c, types.CodeType) and _code_mentions(c, name) for c in code.co_consts)


_PROXY_CLASSES: dict[tuple[type, str, frozenset[str]], type] = {}


class _HiddenHook:
    """A hook the proxy class hides from `create_agent`, which an instance still reaches.

    `create_agent` looks a hook up on the class to decide whether a node is
    needed: there it finds `AgentMiddleware`'s no-op. The member's own code
    (an async hook that delegates to the sync one, say) and the fused node look
    it up on the instance and get the real hook, bound to it.
    """

    __slots__ = ("base", "function")

    def __init__(self, function: Any, base: Any) -> None:
        self.function = function
        self.base = base

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self.base
        bind = getattr(self.function, "__get__", None)
        return bind(instance, owner) if bind is not None else self.function


def make_proxy(middleware: Any, kinds: frozenset[str]) -> Any:
    """The middleware under a class that no longer shows `create_agent` the given hooks.

    The proxy shares the middleware's instance dictionary, so the two are one
    object as far as state goes: what a hook stores on `self` is on the
    caller's instance, and what the caller changes there the hooks see.
    """
    from langchain.agents.middleware import AgentMiddleware

    cls, name = type(middleware), middleware.name
    key = (cls, name, kinds)
    proxy_class = _PROXY_CLASSES.get(key)
    if proxy_class is None:
        body: dict[str, Any] = {"name": property(lambda self: name),
                                "__antler_fused_kinds__": kinds,
                                "__module__": cls.__module__}
        for kind in kinds:
            for variant in (kind, "a" + kind):
                base = getattr(AgentMiddleware, variant)
                body[variant] = (_HiddenHook(getattr(cls, variant), base)
                                 if overrides(cls, variant) else base)
        proxy_class = type(cls.__name__, (cls,), body)
        _PROXY_CLASSES[key] = proxy_class
    proxy: Any = object.__new__(proxy_class)
    proxy.__dict__ = middleware.__dict__
    return proxy
