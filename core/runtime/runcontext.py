"""Server-owned facts about one run, handed to the graph as LangGraph runtime context.

Identity (user, roles, internal provenance, attributes) comes only from here:
never from message text, tool arguments or `additional_kwargs`, which a user or
a model can write. Middlewares read it from `runtime.context`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_USER = "default"


@dataclass(frozen=True)
class RunContext:
    """The `context_schema` of every Antler agent."""

    thread_id: str | None = None
    user_id: str = DEFAULT_USER
    run_id: str | None = None
    is_internal: bool = False
    roles: tuple[str, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.roles, str):
            raise TypeError(
                f"RunContext.roles must be a list of role names, not the string {self.roles!r} "
                f"(write roles=[{self.roles!r}])"
            )
        # A caller mutating its dict after the run started must not change a decision.
        object.__setattr__(self, "attributes", copy.deepcopy(dict(self.attributes)))
        object.__setattr__(self, "roles", tuple(self.roles))


def run_context(runtime: Any) -> RunContext:
    """The run's `RunContext`, tolerating runtimes built without one (bare graphs)."""
    context = getattr(runtime, "context", None)
    if isinstance(context, RunContext):
        return context
    if isinstance(context, Mapping):
        known = {k: v for k, v in context.items() if k in RunContext.__dataclass_fields__}
        return RunContext(**known)
    return RunContext()


def thread_id_of(runtime: Any) -> str | None:
    """The thread id: from the run context, else from the checkpointer's configurable."""
    context = run_context(runtime)
    if context.thread_id:
        return context.thread_id
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable", {})
    except RuntimeError:  # called outside a running graph
        return None
    value = configurable.get("thread_id")
    return str(value) if value is not None else None


def run_id_of(runtime: Any) -> str | None:
    context = run_context(runtime)
    if context.run_id:
        return context.run_id
    try:
        from langgraph.config import get_config

        value = get_config().get("run_id") or get_config().get("metadata", {}).get("run_id")
    except RuntimeError:
        return None
    return str(value) if value is not None else None
