"""The fused node: one middleware carrying a run of `before_*`/`after_*` hooks (`FusedHooks`).

Its node runs the members' hooks one after another on their own view of the
state (`steps.StepRunner`). This module also makes the two hook-less
middlewares the compiler adds to a chain: the pass-through `wrap_model_call`
that keeps the model node's route back to the model (`model_edge_class`) and
the declaration of the `END_MARK` channel (`agent_end_class`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .fusionplan import DESTINATIONS
from .steps import END_MARK, Channel, Step, StepRunner

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig


def fused_middleware(base: type, name: str, kind: str, steps: list[Step],
                      channels: dict[str, Channel], token: str, *, loop_exit: bool,
                      node: str) -> Any:
    targets = {t for step in steps for t in step.can_jump}
    can_jump = [t for t in DESTINATIONS if t in targets]

    def hook(self: FusedHooks, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        return self.run(state, runtime, config)

    async def ahook(self: FusedHooks, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        return await self.arun(state, runtime, config)

    hook.__name__, ahook.__name__ = kind, "a" + kind
    hook.__qualname__, ahook.__qualname__ = f"FusedHooks.{kind}", f"FusedHooks.a{kind}"
    if can_jump:
        hook.__can_jump_to__ = list(can_jump)  # type: ignore[attr-defined]
        ahook.__can_jump_to__ = list(can_jump)  # type: ignore[attr-defined]
    cls = _fused_class(base)
    subclass = type("FusedHooks", (cls,), {kind: hook, "a" + kind: ahook,
                                           "__module__": __name__})
    return subclass(name, kind, steps, channels, token, loop_exit=loop_exit, node=node,
                    can_jump=tuple(can_jump))


@functools.cache
def model_edge_class() -> type:
    """A pass-through `wrap_model_call` (defined lazily: no langchain import at load)."""
    from langchain.agents.middleware import AgentMiddleware

    class ModelEdge(AgentMiddleware):
        """Keeps the model node's route back to the model (see `compile_fusion`)."""

        @property
        def name(self) -> str:
            return "antler_model_edge"

        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            return handler(request)

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

    return ModelEdge


@functools.cache
def agent_end_class() -> type:
    """A hook-less middleware declaring `END_MARK` (defined lazily: no langchain import)."""
    from typing import Annotated, NotRequired

    from langchain.agents.middleware import AgentMiddleware, AgentState
    from langchain.agents.middleware.types import PrivateStateAttr
    from langgraph.channels import UntrackedValue

    # Never checkpointed (`UntrackedValue`): the mark lives for the rest of the run only,
    # and a finished thread's state does not carry it. Built with evaluated annotations:
    # this module's are strings (postponed), and the graph resolves a state schema's
    # hints in the schema's own module.
    fields = {END_MARK: NotRequired[Annotated[bool | None, UntrackedValue, PrivateStateAttr]]}
    typed_dict: Any = type(AgentState)  # TypedDict's metaclass
    state = typed_dict("AgentEndState", (AgentState,),
                       {"__annotations__": fields, "__module__": __name__})

    class AgentEnd(AgentMiddleware):
        """Declares the channel the model node's edge reads (see `ModelHooks`)."""

        state_schema = state

        @property
        def name(self) -> str:
            return "antler_agent_end"

    return AgentEnd


@functools.cache
def _fused_class(base: type) -> type:
    # Defined lazily so that importing this module does not import langchain.
    return type("FusedHooks", (FusedHooks, base), {"__module__": __name__})


class FusedHooks(StepRunner):
    """One graph node that runs several plugins' hooks of one kind in LangChain's order.

    Mixed into `AgentMiddleware` when a chain is compiled; see the module docs.
    """

    tools: Sequence[Any] = ()

    def __init__(self, name: str, kind: str, steps: list[Step],
                 channels: dict[str, Channel], token: str, *, loop_exit: bool, node: str,
                 can_jump: tuple[str, ...]) -> None:
        super().__init__(channels, token, node=node, loop_exit=loop_exit, can_jump=can_jump)
        self._name = name
        self.kind = kind
        self.steps = steps
        self.tools = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def members(self) -> list[str]:
        return [step.label for step in self.steps]

    def _steps(self) -> Iterable[Step]:
        return self.steps


