"""What LangChain redoes on every tool call, done once: the runtime's dump, the type hints.

LangChain validates a tool's input with its argument schema and then dumps the
validated model to a dict. A tool that takes a `ToolRuntime` (``runtime:
ToolRuntime``) has the runtime in that schema, and dumping it serializes the
runtime's state: every message of the thread, on every call, only for the dict
to be thrown away (the injected value itself is passed on from the input). It
also checks the runtime against the annotation: a bare ``ToolRuntime``, as
LangChain documents it, declares a context of type None, so Antler's
`RunContext` made pydantic warn on every call of such a tool.
`without_runtime_dump` marks the runtime fields excluded from the dump, so a
tool call costs the same on a thread of two thousand messages as on an empty
one and checks nothing it would throw away; the agent applies it to every tool
it is given. What the model sees of the tool (`tool_call_schema`) and what the
tool receives do not change.

LangChain also reads a tool function's type hints and signature on every call,
to find a `RunnableConfig` or `callbacks` parameter to fill in. A function
defined in a module with postponed annotations (`from __future__ import
annotations`) holds strings there, which `typing.get_type_hints` compiles and
evaluates again each time (tens of microseconds a call), and `inspect.signature`
is worked out anew. It does the same with the tool class's own `_run` and
`_arun` (LangChain's, defined with postponed annotations: five annotations
compiled and evaluated on every call of every tool, about a tenth of a
millisecond). `with_resolved_signatures` evaluates the annotations and records
the signature once, when the agent is built; both are what LangChain would
have computed, so nothing it reads changes.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field, create_model


def without_runtime_dump(tool: Any) -> Any:
    """`tool` with its `ToolRuntime` arguments left out of the validated input's dump.

    A field counts when its type is `ToolRuntime` (parameterized or not), which
    LangGraph's tools node injects and LangChain passes on from the input. A
    tool whose schema is no pydantic model, or has no such field left to
    exclude, is returned as it is; so is one already done.
    """
    schema = tool.args_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return tool
    fields = {name: (field.annotation, Field(exclude=True))
              for name, field in schema.model_fields.items()
              if not field.exclude and _is_runtime(field.annotation)}
    if not fields:
        return tool
    tool.args_schema = create_model(schema.__name__, __base__=schema, __doc__=schema.__doc__,
                                    **fields)  # type: ignore[call-overload]
    return tool


def _is_runtime(annotation: Any) -> bool:
    from langgraph.prebuilt import ToolRuntime

    origin = typing.get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, ToolRuntime)


def with_resolved_signatures(tools: Iterable[Any]) -> list[Any]:
    """`tools`, each function's string annotations evaluated and its signature recorded.

    Only a tool's own `func` and `coroutine` (unwrapped from a `functools.partial`
    or a bound method) and its class's `_run` and `_arun` are touched (a class's
    once: after that its annotations are no strings and its signature is recorded).
    Annotations are replaced only when one is a string and all of them resolve;
    the signature (`__signature__`, which `inspect.signature` returns as it is)
    only on a plain function that has none.
    """
    tools = list(tools)
    for tool in tools:
        for name in ("func", "coroutine"):
            _resolve(getattr(tool, name, None))
        for name in ("_run", "_arun"):
            _resolve(getattr(type(tool), name, None))
    return tools


def _resolve(function: Any) -> None:
    if isinstance(function, functools.partial):
        function = function.func
    function = getattr(function, "__func__", function)  # a bound method's function
    if not inspect.isfunction(function):
        return
    annotations = function.__annotations__
    if any(isinstance(value, str) for value in annotations.values()):
        try:
            resolved = typing.get_type_hints(function, include_extras=True)
        except Exception:  # unresolvable: LangChain then reads no hints either
            resolved = {}
        if resolved.keys() == annotations.keys():
            function.__annotations__ = resolved
    if "__signature__" not in function.__dict__ and not hasattr(function, "__wrapped__"):
        function.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
