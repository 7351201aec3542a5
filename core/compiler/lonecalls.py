"""A tools node's lone tool call, run in the node's own thread (`inline_lone_calls`).

LangChain's `ToolNode` runs the calls of its input through a thread pool it
makes for the run (`get_executor_for_config`): a new executor and a new thread
each time, about 0.1 ms of CPU, even for one call. And one call is what it gets
in `create_agent`'s graph: the edge after the model sends each tool call of a
reply to the tools node as a task of its own (LangGraph runs parallel tasks in
threads of its own already), so every tool call paid for a thread that only
waited for it.

`inline_lone_calls` gives a graph's `ToolNode` a copy of its own sync body
whose executor (`LoneCallExecutor`) runs a lone call in the calling thread, in
a copy of the context, as the pool runs each call; several calls go to
LangChain's pool as before. Nothing else of the body changes: the same
parsing, the same `ToolRuntime`, the same wrap layers and error handling
(`_run_one`), the same result. A body that does not take its executor that way
(another LangGraph version) is left as it is. The async body runs its calls as
tasks, never in threads, and is not touched.

`antler.agent.create_agent` does this for every graph it builds, fused or not;
`create_fused_agent` too.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .fusionplan import TOOLS_NODE

__all__ = ["LoneCallExecutor", "inline_lone_calls"]

_EXECUTOR = "get_executor_for_config"
"""The name `ToolNode`'s sync body takes its executor by (LangChain's function)."""


class LoneCallExecutor:
    """`get_executor_for_config(config)` for a `ToolNode`: one call runs here, in a copy of
    the context; more go to LangChain's pool, made when first needed."""

    __slots__ = ("_config", "_made", "_pool")

    def __init__(self, config: Any = None) -> None:
        self._config = config
        self._made: Any = None
        self._pool: Any = None

    def __enter__(self) -> LoneCallExecutor:
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        made, self._made, self._pool = self._made, None, None
        return made.__exit__(*exc_info) if made is not None else None

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any], **kwargs: Any,
            ) -> Iterator[Any]:
        columns = [list(items) for items in iterables]
        if kwargs or not columns or any(len(column) != 1 for column in columns):
            return self._pooled().map(fn, *columns, **kwargs)
        return iter((contextvars.copy_context().run(fn, *(column[0] for column in columns)),))

    def __getattr__(self, name: str) -> Any:
        # Anything but `map` (a later body's `submit`, say): LangChain's pool.
        return getattr(self._pooled(), name)

    def _pooled(self) -> Any:
        if self._pool is None:
            from langchain_core.runnables.config import get_executor_for_config

            self._made = get_executor_for_config(self._config)
            self._pool = self._made.__enter__()
        return self._pool


def inline_lone_calls(graph: Any) -> bool:
    """Give `graph`'s tools node (LangChain's `ToolNode`) the body that runs a lone call in
    its own thread (see the module docs); whether it did."""
    from langchain_core.runnables.config import get_executor_for_config
    from langgraph.prebuilt import ToolNode

    found = getattr(graph.nodes.get(TOOLS_NODE), "bound", None)
    if not isinstance(found, ToolNode):
        return False
    node: Any = found
    bound = node.func
    function: Any = getattr(bound, "__func__", None)
    code = getattr(function, "__code__", None)
    if getattr(bound, "__self__", None) is not node or code is None or \
            _EXECUTOR not in code.co_names or \
            function.__globals__.get(_EXECUTOR) is not get_executor_for_config:
        return False
    body = types.FunctionType(code, {**function.__globals__, _EXECUTOR: LoneCallExecutor},
                              function.__name__, function.__defaults__, function.__closure__)
    body.__kwdefaults__ = function.__kwdefaults__
    body.__qualname__ = function.__qualname__
    body.__wrapped__ = function  # type: ignore[attr-defined]
    node.func = types.MethodType(body, node)  # type: ignore[union-attr]
    return True
