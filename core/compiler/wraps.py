"""Wrap-hook fusion: consecutive `wrap_model_call` (or `wrap_tool_call`) layers in one frame.

LangChain nests every middleware's `wrap_model_call` around the model call and
every `wrap_tool_call` around each tool execution, and puts each layer under
LangSmith's `traceable`. Untraced, that decorator still costs about a tenth of
a millisecond per layer and call (it works out whether to trace, copies the
context and reads the hook's signature), so a chain of a dozen wrappers pays
it a dozen times on every model call and every tool call.

`fusionplan.plan_wraps` finds the runs of consecutive wrappers of one kind that can
share a layer, and `fused_wraps` makes one middleware per run that composes its
members as LangChain does and calls them directly. Tool wrappers are composed by
LangChain's own composition function. Model-call wrappers are composed by
`model_chain`, which keeps LangChain's rules (a retry keeps the commands of the
last call only, a short circuit keeps inner members out, an `ExtendedModelResponse`'s
command joins the list inner first) without its per-layer result objects: a
layer hands the layer outside it the model response and its commands as a pair,
and the usual result, a `ModelResponse`, is recognised by its class before any
`isinstance` test (an `AIMessage` test goes through pydantic's metaclass).
`tests/compiler/test_compiler_wraps.py` runs each composition beside
LangChain's nested layers. The members' wrap hooks are hidden from
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

from antler.compat import composed_model_response, wrap_composers, wrap_trace_kwargs


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
        if kind == "wrap_model_call":
            self._plain = model_chain([getattr(p, kind) for p in proxies])
            self._aplain = amodel_chain([getattr(p, "a" + kind) for p in proxies])
        else:
            self._plain = sync_compose([getattr(p, kind) for p in proxies])
            self._aplain = async_compose([getattr(p, "a" + kind) for p in proxies])
        # The hook as LangChain's `create_agent` finds it on the instance: a function
        # with its signature given, which LangSmith's `traceable` (around every wrap
        # layer) reads on every call; for a bound method it would build one anew.
        hook, ahook = _layer_hooks(self)
        self.__dict__[kind], self.__dict__["a" + kind] = hook, ahook
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


def _layer_hooks(layer: FusedWraps) -> tuple[Any, Any]:
    """The layer's sync and async hooks as plain functions with their signatures set."""
    call, acall = layer._call, layer._acall

    def hook(request: Any, handler: Any) -> Any:
        return call(request, handler)

    async def ahook(request: Any, handler: Any) -> Any:
        return await acall(request, handler)

    hook.__name__, ahook.__name__ = layer.kind, "a" + layer.kind
    hook.__qualname__ = f"FusedWraps.{layer.kind}"
    ahook.__qualname__ = f"FusedWraps.a{layer.kind}"
    hook.__signature__, ahook.__signature__ = _HOOK_SIGNATURES  # type: ignore[attr-defined]
    return hook, ahook


def _signatures() -> tuple[inspect.Signature, inspect.Signature]:
    def hook(request: Any, handler: Any) -> Any: ...

    return inspect.signature(hook), inspect.signature(hook)


_HOOK_SIGNATURES = _signatures()


def model_chain(hooks: Sequence[Any]) -> Any:
    """`hooks` (sync `wrap_model_call` hooks, outermost first) as one handler, composed as
    LangChain's `_chain_model_call_handlers` composes them (see the module docs)."""
    Composed = composed_model_response()
    split = _result_splitter()
    last = len(hooks) - 1

    def level(index: int, request: Any, handler: Any) -> tuple[Any, list[Any]]:
        hook = hooks[index]
        if index == last:
            return split(hook(request, handler), None)
        inner_commands: list[Any] = []

        def inner(inner_request: Any) -> Any:
            inner_commands.clear()  # a retry keeps the commands of its last call only
            response, commands = level(index + 1, inner_request, handler)
            inner_commands.extend(commands)
            return response

        return split(hook(request, inner), inner_commands)

    def chain(request: Any, handler: Any) -> Any:
        response, commands = level(0, request, handler)
        return Composed(model_response=response, commands=commands)

    return chain


def amodel_chain(hooks: Sequence[Any]) -> Any:
    """`model_chain` of async `awrap_model_call` hooks."""
    Composed = composed_model_response()
    split = _result_splitter()
    last = len(hooks) - 1

    async def level(index: int, request: Any, handler: Any) -> tuple[Any, list[Any]]:
        hook = hooks[index]
        if index == last:
            return split(await hook(request, handler), None)
        inner_commands: list[Any] = []

        async def inner(inner_request: Any) -> Any:
            inner_commands.clear()
            response, commands = await level(index + 1, inner_request, handler)
            inner_commands.extend(commands)
            return response

        return split(await hook(request, inner), inner_commands)

    async def chain(request: Any, handler: Any) -> Any:
        response, commands = await level(0, request, handler)
        return Composed(model_response=response, commands=commands)

    return chain


@functools.cache
def _result_splitter() -> Any:
    """A function taking a layer's result to (its model response, the commands so far).

    `extra` are the commands of the layers inside it; the result's own follow them,
    as LangChain's `_to_composed_result` lists them.
    """
    from langchain.agents.middleware.types import ExtendedModelResponse, ModelResponse
    from langchain_core.messages import AIMessage

    Composed = composed_model_response()

    def split(result: Any, extra: list[Any] | None) -> tuple[Any, list[Any]]:
        commands = list(extra) if extra else []
        if type(result) is ModelResponse:  # the usual result: nothing to unwrap
            return result, commands
        if isinstance(result, Composed):
            commands.extend(result.commands)
            return result.model_response, commands
        if isinstance(result, ExtendedModelResponse):
            if result.command is not None:
                commands.append(result.command)
            return result.model_response, commands
        if isinstance(result, AIMessage):
            return ModelResponse(result=[result], structured_response=None), commands
        return result, commands

    return split


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
