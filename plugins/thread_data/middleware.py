"""ThreadDataMiddleware: where the current thread's files live, computed once per run.

Every conversation thread owns three host directories (workspace, uploads,
outputs) under the user's bucket, ``{base}/users/{user}/threads/{thread}/user-data``.
This middleware works out those paths at the start of each run and publishes
them in state as ``thread_data``; the uploads plugin and the sandbox tools read
them from there.

It never touches the disk: a pure chat turn costs no filesystem writes. The
directories are created together, on the first tool call that needs them, by
`ThreadPaths.ensure_directories` (the sandbox tools call it).
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import OmitFromInput
from langgraph.runtime import Runtime

from antler.plugin_api import (
    PATHS,
    BuildContext,
    MissingThreadIdError,
    PathLayout,
    ThreadPaths,
)

__all__ = [
    "MissingThreadIdError",
    "ThreadDataMiddleware",
    "ThreadDataRecord",
    "ThreadDataState",
    "build",
    "thread_paths_for",
]


class ThreadDataRecord(TypedDict):
    """The thread's host directories, as `ThreadPaths.as_state` writes them."""

    workspace_path: str
    uploads_path: str
    outputs_path: str


class ThreadDataState(AgentState):
    # OmitFromInput: only this middleware writes the paths. A caller putting
    # `thread_data` in the graph input cannot point the tools at another directory.
    thread_data: NotRequired[Annotated[ThreadDataRecord | None, OmitFromInput]]


def thread_paths_for(layout: PathLayout, runtime: Any) -> ThreadPaths:
    """The `ThreadPaths` of the run's user and thread (`ThreadPaths.for_run`).

    Raises:
        MissingThreadIdError: when the run has no thread id at all.
        InvalidIdentifierError: when the user or thread id cannot be a directory
            name (``..``, separators, control characters, ...).
    """
    return ThreadPaths.for_run(layout, runtime)


class ThreadDataMiddleware(AgentMiddleware[ThreadDataState]):
    """Publishes the thread's directory paths in state ``thread_data``; writes nothing to disk.

    Hooks:

    ``before_agent`` / ``abefore_agent``
        Runs once per run, before anything else of the environment layer.
        Validates the user and thread ids (a hostile id such as ``../x`` is
        refused with `InvalidIdentifierError`, a missing thread id with
        `MissingThreadIdError`) and writes ``ThreadPaths.as_state()`` into
        ``thread_data``. When the state already holds exactly these paths (a
        later turn of the same thread) it returns nothing, so the checkpoint is
        not rewritten for no change.

    Why here: it sits first among the environment plugins because the uploads
    plugin needs ``thread_data.uploads_path`` and the sandbox tools need the
    whole record; ``before_agent`` hooks run in list order, so they see it.
    It is a ``before_agent`` hook, not ``before_model``: the paths cannot change
    within a run, so computing them once is enough.
    """

    state_schema = ThreadDataState

    def __init__(self, layout: PathLayout) -> None:
        super().__init__()
        self.layout = layout

    def before_agent(self, state: ThreadDataState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._record(state, runtime)

    async def abefore_agent(
        self, state: ThreadDataState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        # Pure computation, no I/O: nothing to hand to a worker thread.
        return self._record(state, runtime)

    # Both hook forms share this helper instead of one calling the other: the chain
    # compiler's fused nodes run hooks on a proxy whose node hooks are the base
    # class's no-ops, so `self.before_agent` would do nothing there.
    def _record(self, state: ThreadDataState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        record = thread_paths_for(self.layout, runtime).as_state()
        if state.get("thread_data") == record:
            return None
        return {"thread_data": record}


def build(ctx: BuildContext) -> ThreadDataMiddleware:
    """Factory named in the manifest: the middleware over the build's `PATHS` service."""
    return ThreadDataMiddleware(ctx.services.typed(PATHS, PathLayout))
