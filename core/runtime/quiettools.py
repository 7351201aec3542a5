"""Tool calls that skip LangChain's tool run when nothing could observe it.

LangChain runs every tool call as a callback run: it configures a callback
manager, looks up the injected arguments a second time to show the handlers
the call's input, starts the run, gives the function a child manager of it,
and ends the run. When no callback handler is in the call's config or on the
tool, no run id is asked for and LangSmith could not trace
(`antler.plugin_api.tracing.trace_check`), nobody receives any of it, and it costs
about 90 us of a plugin tool's call (150 us in all, on a warm cache).

`quiet_call` makes such a call the way LangChain's run makes it, without the
callback run: the input validated by the tool's own `_to_args_and_kwargs` (the
same `ValidationError`), the tool's `_run` given the call's config, run in a
copy of the context whose inherited config is the call's (what the function
and the runnables it calls see; its callback manager is the node's, where
LangChain's run gives a child of the tool's run: neither has a handler), and
the output formatted by LangChain's own `_format_output` (a `ToolMessage` for
the call, a `Command` or message as it is). An exception propagates as
LangChain's run raises it. Only a plain `StructuredTool` called with a tool call
qualifies: a sync function, LangChain's `run` and `_run`, content responses, no
error handling flags; anything else, and every observed call, goes through
`invoke` as before.

Plugin tools (`antler.runtime.toolguard`) and the `task` tool
(`antler.runtime.delegation`) call through it; the application's, the config's and
the MCP servers' tools do through `quiet_tools`, which gives each tool whose class
qualifies a copy under a subclass whose `invoke` tries `quiet_call` first (its name,
schema, function and flags are the tool's own; `ainvoke` is LangChain's).
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from antler.compat import langchain_private
from antler.plugin_api.tracing import trace_check

__all__ = ["NOT_QUIET", "quiet_call", "quiet_class", "quiet_tools"]

NOT_QUIET: Any = object()
"""What `quiet_call` returns when the call must go through the tool's `invoke`."""


def quiet_call(tool: Any, input: Any, config: Any, kwargs: Mapping[str, Any]) -> Any:
    """`tool.invoke(input, config, **kwargs)`, made without LangChain's callback run, or
    `NOT_QUIET` when that call must be made as it is (see the module docs).

    The caller vouches with `quiet_class` that the tool's class runs calls LangChain's way.
    """
    if kwargs or type(input) is not dict or input.get("type") != "tool_call" \
            or tool.func is None or tool.response_format != "content" \
            or tool.handle_tool_error or tool.handle_validation_error:
        return NOT_QUIET
    from langchain_core.runnables.config import ensure_config, set_config_context

    config = ensure_config(config)  # the config LangChain's run gives the tool
    if _observed(tool, config):
        return NOT_QUIET
    call_id = input["id"]
    inherited = config.copy()
    inherited.pop("run_name", None)  # as LangChain's child config drops it
    with set_config_context(inherited) as context:
        args, kwargs = tool._to_args_and_kwargs(input["args"].copy(), call_id)
        response = context.run(tool._run, *args, config=config, run_manager=None, **kwargs)
    return _format_output()(response, None, call_id, tool.name, "success")


@functools.cache
def quiet_class(cls: type) -> bool:
    """Whether tool class `cls` runs a call as LangChain's `StructuredTool` does (its `run`,
    `_run` and `_arun` are LangChain's own), so `quiet_call` may make its calls."""
    from langchain_core.tools import BaseTool, StructuredTool

    return issubclass(cls, StructuredTool) and all(
        getattr(cls, name) is getattr(owner, name)
        for name, owner in (("run", BaseTool), ("invoke", BaseTool), ("_run", StructuredTool)))


def quiet_tools(tools: Sequence[Any]) -> list[Any]:
    """`tools` (same order), each tool of a class `quiet_class` vouches for a copy whose
    calls nothing observes are made by `quiet_call`; any other item is kept as it is, and
    so is a tool with no sync function (`quiet_call` would leave each call to `invoke`) or
    whose function takes LangChain's `callbacks` (its run's child manager, which only
    LangChain's run makes)."""
    quiet = []
    for item in tools:
        cls: type = type(item)
        if not quiet_class(cls) or getattr(cls, _QUIET_MARK, False) or item.func is None \
                or _takes_callbacks(item.func):
            quiet.append(item)
            continue
        clone = copy.copy(item)
        object.__setattr__(clone, "__class__", _quiet_subclass(cls))
        quiet.append(clone)
    return quiet


_QUIET_MARK = "_antler_quiet_invoke"


def _takes_callbacks(function: Any) -> bool:
    """Whether `function` takes a `callbacks` argument (or its parameters cannot be read)."""
    try:
        return "callbacks" in inspect.signature(function).parameters
    except (TypeError, ValueError, NameError):
        return True


@functools.cache
def _quiet_subclass(cls: type) -> type:
    """A subclass of tool class `cls` whose `invoke` makes an unobserved call quietly."""
    invoke: Callable[..., Any] = cls.invoke  # type: ignore[attr-defined]

    def quiet_invoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        result = quiet_call(self, input, config, kwargs)
        return invoke(self, input, config, **kwargs) if result is NOT_QUIET else result

    return type(cls.__name__, (cls,), {"invoke": quiet_invoke, _QUIET_MARK: True,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__,
                                       "__doc__": cls.__doc__})


def _observed(tool: Any, config: Mapping[str, Any]) -> bool:
    """Whether a handler could receive the tool's run: one in the call's config or on the
    tool, a verbose tool, a run id asked for, or LangSmith tracing."""
    callbacks: Any
    for callbacks in (config.get("callbacks"), tool.callbacks):
        if callbacks is not None and getattr(callbacks, "handlers", callbacks):
            return True
    return bool(tool.verbose) or config.get("run_id") is not None or trace_check()()


@functools.cache
def _format_output() -> Callable[..., Any]:
    """LangChain's formatting of a tool's output (`ToolMessage` for a call)."""
    format_output: Callable[..., Any] = langchain_private("langchain_core.tools.base",
                                                         "_format_output")
    return format_output
