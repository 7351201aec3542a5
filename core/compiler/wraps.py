"""Wrap-hook fusion: consecutive `wrap_model_call` (or `wrap_tool_call`) layers in one frame.

LangChain nests every middleware's `wrap_model_call` around the model call and
every `wrap_tool_call` around each tool execution, and puts each layer under
LangSmith's `traceable`. Untraced, that decorator still costs about a tenth of
a millisecond per layer and call (it works out whether to trace, copies the
context and reads the hook's signature), so a chain of a dozen wrappers pays
it a dozen times on every model call and every tool call.

`fusionplan.plan_wraps` finds the runs of consecutive wrappers of one kind that can
share a layer, and `fused_wraps` makes one middleware per run that composes its
members exactly as LangChain does (its own composition functions, so retries,
short circuits and the commands an `ExtendedModelResponse` carries behave the
same) and calls them directly. The members' wrap hooks are hidden from
`create_agent` by their proxies, as fused node hooks are. When LangSmith traces
the call (the fused layer runs under a run tree), each member runs under its own
`traceable` span named as LangChain names it (`<name>.wrap_model_call`), nested
in the fused layer's span, so a trace still shows every plugin's wrapper.

A run of wrappers is split where the members' `trace_policy` differs (the fused
layer's own span uses its first member's) and around a member that must keep
its own layer (manifest `fusable: false`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

from antler.compat import wrap_composers, wrap_trace_kwargs


def _traced(middleware: Any, hook: str) -> Any:
    """The member's hook under `traceable`, exactly as LangChain's `create_agent` puts it."""
    from langsmith import traceable

    return traceable(name=f"{middleware.name}.{hook}", **wrap_trace_kwargs(middleware))(
        getattr(middleware, hook))


class FusedWraps:
    """One wrap layer that runs several plugins' wrappers of one kind, outermost first.

    Mixed into `AgentMiddleware` by `fused_wraps`; see the module docs.
    """

    tools: Sequence[Any] = ()

    def __init__(self, name: str, kind: str, labels: list[str], proxies: list[Any]) -> None:
        sync_compose, async_compose = wrap_composers()[kind]
        self._name = name
        self.kind = kind
        self.labels = labels
        self.tools = []
        self.trace_policy = getattr(proxies[0], "trace_policy", None)
        self._plain = sync_compose([getattr(p, kind) for p in proxies])
        self._aplain = async_compose([getattr(p, "a" + kind) for p in proxies])
        self._traced = sync_compose([_traced(p, kind) for p in proxies])
        self._atraced = async_compose([_traced(p, "a" + kind) for p in proxies])

    @property
    def name(self) -> str:
        return self._name

    def _call(self, request: Any, handler: Any) -> Any:
        chain = self._traced if _tracing() else self._plain
        return chain(request, handler)

    async def _acall(self, request: Any, handler: Any) -> Any:
        chain = self._atraced if _tracing() else self._aplain
        return await chain(request, handler)


def _tracing() -> bool:
    # LangChain's `traceable` around the fused layer decided already: it runs the
    # layer under a run tree when it traces, and under none when it does not.
    return _run_tree_reader()() is not None


@functools.cache
def _run_tree_reader() -> Any:
    """LangSmith's `get_current_run_tree`, imported once (no langsmith import at load)."""
    from langsmith.run_helpers import get_current_run_tree

    return get_current_run_tree


@functools.cache
def _fused_wraps_class(base: type, kind: str) -> type:
    def hook(self: FusedWraps, request: Any, handler: Any) -> Any:
        return self._call(request, handler)

    async def ahook(self: FusedWraps, request: Any, handler: Any) -> Any:
        return await self._acall(request, handler)

    hook.__name__, ahook.__name__ = kind, "a" + kind
    # LangChain puts the layer under LangSmith's `traceable`, which reads the hook's
    # signature on every call: given here, it is not worked out again each time.
    hook.__signature__ = inspect.signature(hook)  # type: ignore[attr-defined]
    ahook.__signature__ = inspect.signature(ahook)  # type: ignore[attr-defined]
    return type("FusedWraps", (FusedWraps, base), {
        kind: hook, "a" + kind: ahook, "__module__": __name__})


def fused_wraps(base: type, name: str, kind: str, labels: list[str], proxies: list[Any]) -> Any:
    """The middleware (a subclass of `base`, LangChain's `AgentMiddleware`) for one run."""
    return _fused_wraps_class(base, kind)(name, kind, labels, proxies)
