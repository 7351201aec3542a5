"""Whether a call made now could be traced, and the quiet steps' flag.

LangChain and LangSmith trace a call when a LangSmith run is current, when the
config a runnable called now inherits has a callback handler (a LangChain
tracer is one; it gives LangSmith its parent run), or when tracing is enabled
(the context's `tracing_context` setting, else the process's `configure`,
else the environment). `could_trace` answers that before a call, so the call
can skip the bookkeeping nobody would receive: the compiler's quiet nodes and
wrap layers, quiet tool calls, and a plugin's side call to a model (a title,
memory's facts).

Whether tracing is enabled is LangSmith's answer (`tracing_is_enabled`), a few
microseconds a call, asked last.

A quiet node (`antler.compiler.quietnodes`) asks when it starts and, when
tracing is off, says so for the steps it runs (`UNTRACED`): `could_trace`
inside that node then looks only for a run tree and a callback handler, which
is how tracing turned on inside a node reaches its steps (LangChain gives a
runnable invoked under `tracing_context(enabled=True)` its tracer). A
process-wide `langsmith.configure(enabled=True)` made while a node runs takes
effect from the next node on, for the node's side calls as for its hooks.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable

__all__ = ["UNTRACED", "could_trace", "trace_check"]

UNTRACED: contextvars.ContextVar[bool] = contextvars.ContextVar("antler_untraced",
                                                               default=False)
"""True in the context a quiet node runs its steps in: LangSmith's tracing setting was
off when the node started (`could_trace` then asks only for a run tree and a handler)."""


def could_trace() -> bool:
    """Whether LangSmith or a callback handler could trace a call made now (see the module
    docs); inside a quiet node's steps, tracing's setting as the node found it."""
    return trace_check()()


@functools.cache
def trace_check() -> Callable[[], bool]:
    """`could_trace` as a function of no arguments, its imports done (for a caller that
    asks on every call)."""
    from langchain_core.runnables.config import var_child_runnable_config
    from langsmith.run_helpers import get_current_run_tree
    from langsmith.utils import tracing_is_enabled

    untraced = UNTRACED

    def may_trace() -> bool:
        if get_current_run_tree() is not None:
            return True
        config = var_child_runnable_config.get()
        callbacks = config.get("callbacks") if config else None
        if getattr(callbacks, "handlers", callbacks):
            return True
        if untraced.get():
            return False  # asked when the node started (see the module docs)
        return bool(tracing_is_enabled())

    return may_trace
