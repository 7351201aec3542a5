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
layer returns the model response and leaves its commands in a list the layer
outside it holds, each layer's handler is the next layer bound to its place (one
frame per layer), and the usual result, a `ModelResponse`, is recognised by its
class before any `isinstance` test (an `AIMessage` test goes through pydantic's
metaclass).
`tests/compiler/test_compiler_wraps.py` runs each composition beside
LangChain's nested layers. The members' wrap hooks are hidden from
`create_agent` by their proxies, as fused node hooks are. When LangSmith traces
the call (the fused layer runs under a run tree), each member runs under its own
`traceable` span named as LangChain names it (`<name>.wrap_model_call`), nested
in the fused layer's span, so a trace still shows every plugin's wrapper.

A run of wrappers is split where the members' `trace_policy` differs (the fused
layer's own span uses its first member's) and around a member that must keep
its own layer (manifest `fusable: false`).

LangChain puts even the fused layer under `traceable`, which costs tens of
microseconds on every call when nothing traces it (it looks for a parent run in
the context and in the config's callbacks, asks whether tracing is on, copies
the context). Where the layer is the agent's only one of its kind,
`skip_idle_tracing` (called by `FusedChain.install`) makes the graph call it
directly when `traceable` could not trace the call: no LangSmith run in the
context, no callback handler in the config (a LangChain tracer is one) and
tracing not enabled; it then runs in a copy of the context, as `traceable`
runs it. Otherwise `traceable` is called as before.

Whether the call could be traced is `antler.plugin_api.tracing.trace_check`'s
answer, which a quiet node (`quietnodes`) gives its steps from what it found
when it started (`UNTRACED`).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Sequence
from typing import Any

from antler.compat import composed_model_response, wrap_composers, wrap_trace_kwargs
from antler.plugin_api.tracing import trace_check


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
    LangChain's `_chain_model_call_handlers` composes them (see the module docs).

    The handler a layer is given is the next layer itself, bound to its place
    (`functools.partial`, made in C): one frame per layer, not a closure calling a
    function. A layer leaves the commands it and the layers inside it returned in
    the list it is given, clearing it first (a retry keeps the commands of its last
    call only); the usual result, a `ModelResponse` with no command, adds none.
    """
    Composed = composed_model_response()
    split = _result_splitter()
    plain = _plain_response_type()
    last = len(hooks) - 1
    partial = functools.partial

    def layer(index: int, handler: Any, commands: list[Any], request: Any) -> Any:
        commands.clear()
        hook = hooks[index]
        if index == last:
            result = hook(request, handler)
            if type(result) is plain:
                return result
            response, own = split(result, None)
        else:
            inner: list[Any] = []
            result = hook(request, partial(layer, index + 1, handler, inner))
            if type(result) is plain and not inner:
                return result
            response, own = split(result, inner)
        commands.extend(own)
        return response

    def chain(request: Any, handler: Any) -> Any:
        commands: list[Any] = []
        response = layer(0, handler, commands, request)
        return Composed(model_response=response, commands=commands)

    return chain


def amodel_chain(hooks: Sequence[Any]) -> Any:
    """`model_chain` of async `awrap_model_call` hooks."""
    Composed = composed_model_response()
    split = _result_splitter()
    plain = _plain_response_type()
    last = len(hooks) - 1
    partial = functools.partial

    async def layer(index: int, handler: Any, commands: list[Any], request: Any) -> Any:
        commands.clear()
        hook = hooks[index]
        if index == last:
            result = await hook(request, handler)
            if type(result) is plain:
                return result
            response, own = split(result, None)
        else:
            inner: list[Any] = []
            result = await hook(request, partial(layer, index + 1, handler, inner))
            if type(result) is plain and not inner:
                return result
            response, own = split(result, inner)
        commands.extend(own)
        return response

    async def chain(request: Any, handler: Any) -> Any:
        commands: list[Any] = []
        response = await layer(0, handler, commands, request)
        return Composed(model_response=response, commands=commands)

    return chain


@functools.cache
def _plain_response_type() -> type:
    """LangChain's `ModelResponse`, the usual result of a layer (nothing to unwrap)."""
    from langchain.agents.middleware.types import ModelResponse

    return ModelResponse


@functools.cache
def _result_splitter() -> Any:
    """A function taking a layer's result to (its model response, the commands so far).

    `extra` are the commands of the layers inside it; the result's own follow them,
    as LangChain's `_to_composed_result` lists them.
    """
    from langchain.agents.middleware.types import ExtendedModelResponse, ModelResponse
    from langchain_core.messages import AIMessage

    Composed: Any = composed_model_response()

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


_MODEL_HANDLER_CELLS = ("wrap_model_call_handler", "awrap_model_call_handler")
"""The names LangChain's model node functions (sync, async) hold their composed
`wrap_model_call` handler under."""


def skip_idle_tracing(graph: Any, middlewares: Sequence[Any]) -> int:
    """Call each fused layer that is `graph`'s only wrap layer of its kind without
    `traceable` when nothing could trace the call (see the module docs).

    A layer qualifies when LangChain's handler is `traceable` over the layer's own
    hook and nothing else (LangChain's composition of one handler). Returns how many
    handlers were replaced (a graph LangChain built otherwise keeps its own).
    """
    from .fusionplan import MODEL_NODE, TOOLS_NODE

    layers = {id(hook): layer for layer in middlewares if isinstance(layer, FusedWraps)
              for hook in (layer.__dict__.get(layer.kind), layer.__dict__.get("a" + layer.kind))}
    replaced = 0
    model = getattr(graph.nodes.get(MODEL_NODE), "bound", None)
    for function, name in ((getattr(model, "func", None), _MODEL_HANDLER_CELLS[0]),
                           (getattr(model, "afunc", None), _MODEL_HANDLER_CELLS[1])):
        cell = closure_cell(function, name)
        handler = getattr(cell, "cell_contents", None)
        single = closure_cell(handler, "single_handler")
        layer = layers.get(id(getattr(getattr(single, "cell_contents", None), "__wrapped__",
                                      None)))
        if cell is None or layer is None:
            continue
        is_async = name == _MODEL_HANDLER_CELLS[1]
        cell.cell_contents = _when_traced(handler, layer._aplain if is_async else layer._plain,
                                          is_async)
        replaced += 1
    tools = getattr(graph.nodes.get(TOOLS_NODE), "bound", None)
    for attribute, is_async in (("_wrap_tool_call", False), ("_awrap_tool_call", True)):
        traced = getattr(tools, attribute, None)
        layer = layers.get(id(getattr(traced, "__wrapped__", None)))
        if layer is None:
            continue
        setattr(tools, attribute, _when_traced(
            traced, layer._aplain if is_async else layer._plain, is_async))
        replaced += 1
    return replaced


def closure_cell(function: Any, name: str) -> Any:
    """The cell of `function`'s closure holding its free variable `name` (None if none)."""
    code = getattr(function, "__code__", None)
    closure = getattr(function, "__closure__", None)
    if code is None or not closure or name not in code.co_freevars:
        return None
    return closure[code.co_freevars.index(name)]


def _when_traced(traced: Any, plain: Any, is_async: bool) -> Any:
    """`traced` (LangChain's handler) when the call could be traced, else `plain` in a
    copy of the context (for an async `plain`, a task in that copy, as `traceable`
    awaits its function)."""
    may_trace = trace_check()
    if is_async:
        import asyncio

        async def ahandler(request: Any, handler: Any) -> Any:
            if may_trace():
                return await traced(request, handler)
            return await asyncio.create_task(plain(request, handler),
                                             context=contextvars.copy_context())
        return ahandler

    def handler_(request: Any, handler: Any) -> Any:
        if may_trace():
            return traced(request, handler)
        return contextvars.copy_context().run(plain, request, handler)
    return handler_


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
