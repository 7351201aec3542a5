"""SandboxMiddleware: the thread's sandbox lifecycle around a run.

The sandbox itself is acquired by the sandbox tools (``bash``, ``ls``,
``read_file``, ``glob``, ``grep``, ``write_file``, ``str_replace``; see `tools.py`) on their first
use in a thread: that is when the thread's three directories are created and
the provider hands out the thread's sandbox, whose id the tool records in state
``sandbox``. A chat turn that calls no tool writes nothing and acquires no
sandbox; its start only lets the provider get ready (`warm`: the bwrap provider
starts a spare namespace, if it has none and a thread of the base directory has
files, for the next first command to adopt). This middleware releases the sandbox when the run ends,
and, when the operator sets ``sandbox: {lazy: false}``, acquires it eagerly when a
run starts.

One provider instance serves the whole agent: the factory takes it from the
build's services (``SANDBOX_PROVIDER``) or loads it by name and registers it
there, so the tools use the same one and the agent shuts it down on close.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import OmitFromInput
from langgraph.runtime import Runtime

from antler.plugin_api import (
    PATHS,
    SANDBOX_LOADER,
    SANDBOX_PROVIDER,
    AntlerError,
    BuildContext,
    MissingThreadIdError,
    PathLayout,
    SandboxNotFoundError,
    SandboxProvider,
    Services,
    ThreadPaths,
)

from .config import SandboxConfig

__all__ = [
    "SandboxMiddleware",
    "SandboxRecord",
    "SandboxState",
    "SandboxThreadError",
    "build",
    "recorded_sandbox_id",
    "sandbox_provider",
    "thread_paths",
]

logger = logging.getLogger(__name__)


class SandboxThreadError(AntlerError, ValueError):
    """The run has no usable thread, so it has no sandbox."""


class SandboxRecord(TypedDict):
    """What state remembers about the thread's sandbox."""

    sandbox_id: str


def _latest(current: SandboxRecord | None, update: SandboxRecord | None) -> SandboxRecord | None:
    # Two tool calls of one model turn run in parallel and may both record the
    # (same) freshly acquired sandbox in the same step: last write wins.
    return update


class SandboxState(AgentState):
    # Written only by the tools and this middleware (OmitFromInput): a caller
    # cannot hand a run someone else's sandbox id through the graph input.
    sandbox: NotRequired[Annotated[SandboxRecord | None, OmitFromInput, _latest]]


def recorded_sandbox_id(state: Any) -> str | None:
    """The sandbox id recorded in a run's state, if any."""
    record = state.get("sandbox") if isinstance(state, dict) else None
    sandbox_id = record.get("sandbox_id") if isinstance(record, dict) else None
    return sandbox_id if isinstance(sandbox_id, str) and sandbox_id else None


def sandbox_provider(services: Services, config: SandboxConfig) -> SandboxProvider:
    """The build's sandbox provider: the one in ``services``, else load and register one.

    Registering it means the middleware, the tools and the agent (which shuts it
    down on close) share one instance.
    """
    return services.shared(SANDBOX_PROVIDER, SandboxProvider,
                           lambda: services.get(SANDBOX_LOADER)(config))


def thread_paths(layout: PathLayout, runtime: Any) -> ThreadPaths:
    """The run's thread paths (`ThreadPaths.for_run`: user from the `RunContext`); ids are
    validated."""
    try:
        return ThreadPaths.for_run(layout, runtime)
    except MissingThreadIdError:
        raise SandboxThreadError(
            "This run has no thread id, so it has no sandbox or files. Pass one: "
            "agent.invoke(..., thread_id='t1') or RunContext(thread_id=...)."
        ) from None


class SandboxMiddleware(AgentMiddleware[SandboxState]):
    """Releases the thread's sandbox after each run; acquires it up front only when not lazy.

    Hooks:

    ``before_agent`` / ``abefore_agent``
        Lazy (the default): tells the provider a run started (``warm``: the
        bwrap provider starts a spare namespace when it has none, a few
        milliseconds); the first sandbox tool call of the thread creates the
        directories and acquires the sandbox. With
        ``lazy: false``: creates the thread's directories, acquires its
        sandbox and records ``{"sandbox_id": ...}`` in state ``sandbox``.

    ``after_agent`` / ``aafter_agent``
        When state records a sandbox, releases the thread's own (the one the
        provider handed out for the thread's paths; the id in state is never
        trusted, see `_release_own`). Releasing tells the provider this run is done with
        it; once nothing of it runs, the provider drops it and makes it again from the
        thread's paths for the thread's next run (the files stay). A run that ends
        without this hook (it failed, was cancelled or its stream was closed) is let
        go of by the built-in providers when the run ends. Every sandbox still held
        goes when the agent closes (provider shutdown).

    The async forms run provider calls in a worker thread: a provider may
    block on a container or a remote service.

    Why here: after thread_data (the sandbox belongs to the thread whose id and paths it
    validated) and after uploads, as in the layer order of
    docs/chain.md#layer-dependencies. As the environment layer's only ``after_agent``
    hook it runs once the run is over, whatever other plugins did.
    """

    state_schema = SandboxState

    def __init__(self, provider: SandboxProvider, layout: PathLayout, *, lazy: bool = True) -> None:
        super().__init__()
        self.provider = provider
        self.layout = layout
        self.lazy = lazy

    def before_agent(self, state: SandboxState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if self.lazy:
            self.provider.warm(self.layout)
            return None
        return self._acquire(state, runtime)

    async def abefore_agent(
        self, state: SandboxState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if self.lazy:
            # A few milliseconds at most, but it looks at the base directory and may
            # start a process: never on the event loop.
            await asyncio.to_thread(self.provider.warm, self.layout)
            return None
        return await asyncio.to_thread(self._acquire, state, runtime)

    def after_agent(self, state: SandboxState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if recorded_sandbox_id(state) is not None:
            self._release_own(runtime)
        return None

    async def aafter_agent(
        self, state: SandboxState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if recorded_sandbox_id(state) is not None:
            await asyncio.to_thread(self._release_own, runtime)
        return None

    # The hook forms share these helpers rather than calling one another: the chain
    # compiler's fused nodes run hooks on a proxy whose node hooks are the base
    # class's no-ops, so `self.before_agent` would do nothing there.
    def _acquire(self, state: SandboxState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        paths = thread_paths(self.layout, runtime)
        paths.ensure_directories()
        sandbox_id = self.provider.acquire(paths)
        if recorded_sandbox_id(state) == sandbox_id:
            return None
        return {"sandbox": {"sandbox_id": sandbox_id}}

    def _release_own(self, runtime: Runtime[Any]) -> None:
        """Release the thread's own sandbox, the one the provider handed out for its paths.

        Never the id state names: the thread's owner can write state
        (`update_state`), and releasing ends what a sandbox runs in the
        background, so a forged id would stop another thread's work.
        """
        sandbox_id = self.provider.existing_sandbox_id(thread_paths(self.layout, runtime))
        if sandbox_id is None:
            return  # the thread has no sandbox (in this process): nothing runs for it
        try:
            self.provider.release(sandbox_id)
        except SandboxNotFoundError:
            logger.info("sandbox %r was already gone when the run ended", sandbox_id)


def build(ctx: BuildContext) -> SandboxMiddleware:
    """Factory named in the manifest: shares one provider through the build's services."""
    config = ctx.plugin_config(SandboxConfig)
    provider = sandbox_provider(ctx.services, config)
    return SandboxMiddleware(provider, ctx.services.typed(PATHS, PathLayout), lazy=config.lazy)
