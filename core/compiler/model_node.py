"""Model-call hooks inside LangChain's model node (`ModelHooks`).

The `before_model` hooks, LangChain's own model node (every `wrap_model_call`
and the model) and the `after_model` hooks run in one superstep. A model answer
of a node that failed afterwards is kept for the retry of the same task
(`SavedAnswers`), so a failing `after_model` hook costs no second model call
in one process.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from antler.compat import runnable_callable
from antler.errors import FusionError

from .fusionplan import DESTINATIONS, MODEL_NODE
from .steps import (
    END,
    END_MARK,
    Channel,
    DecidedRoute,
    Run,
    SavedAnswers,
    Step,
    StepRunner,
    arun_steps,
    edge_writer,
    ending_edge,
    route_caller,
    run_steps,
    task_key,
)

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig


class ModelHooks(StepRunner):
    """The model node with the `before_model` and `after_model` hooks run inside it.

    LangChain runs one turn of the loop as the `before_model` nodes, the model
    node and the `after_model` nodes: with a checkpointer, one superstep and
    one checkpoint each, on every model call. Here the model node does all of
    it, in the same order: the `before_model` hooks (list order), the model
    call with every `wrap_model_call` (LangChain's own model node, given the
    state the hooks left), then the `after_model` hooks (reverse list order).
    Each sees the state it would have seen as its own node, as in a fused
    node, and the node's writes equal the sequence of theirs.

    Jumps: a `before_model` hook that jumps ends the node before the model is
    called (the unfused graph skips the model and the `after_model` nodes);
    an `after_model` hook that jumps ends it there. The node writes `jump_to`
    and LangChain's edge after the model node routes it. `install` checks
    that the edge can reach every destination the hooks declare.

    Failure: the node is one superstep, so when the model call or a hook
    fails, nothing of it is checkpointed and resuming runs it again. The
    model's answer is kept for that retry (`SavedAnswers`, this process
    only), so the model is not called twice. Hooks that may
    interrupt, or are declared `fusable: false`, keep every hook of their
    kind in its own nodes (see `absorbable`).
    """

    def __init__(self, before: list[Step], after: list[Step], channels: dict[str, Channel],
                 token: str, *, loop_entry: str, end: list[Step] | None = None,
                 exit_node: str = "__end__") -> None:
        targets = {t for step in (*before, *after, *(end or ())) for t in step.can_jump}
        # The model node is the loop's exit: LangChain's edge after it reads `jump_to`.
        super().__init__(channels, token, node=MODEL_NODE, loop_exit=True,
                         can_jump=tuple(t for t in DESTINATIONS if t in targets))
        self.before = before
        self.after = after
        self.end = end or []
        self.exit_node = exit_node
        self.loop_entry = loop_entry
        self.model: Step | None = None
        self.route: Any = None
        """LangChain's edge after the model node (its path), when `end` hooks run inside."""
        self.ask_route: Any = None
        """`self.route.invoke`, or the routing function itself (`route_caller`)."""
        self.answers = SavedAnswers()
        self.routes = SavedAnswers()
        """Where the edge goes after runs that do not end here, by task (see `_ends`)."""

    def problem_with(self, graph: Any) -> str:
        """Why the absorbed hooks cannot run in `graph`'s model node ("" when they can)."""
        RunnableCallable = runnable_callable()

        nodes = getattr(graph, "nodes", None)
        if not isinstance(nodes, dict) or MODEL_NODE not in nodes:
            return "the graph has no model node"
        if not isinstance(getattr(nodes[MODEL_NODE], "bound", None), RunnableCallable):
            return "the model node is not the one LangChain's create_agent builds"
        if self.model is not None:
            return "the hooks already run inside a model node"
        wanted = {"tools": "tools", "model": self.loop_entry}
        needed = [t for t in self.can_jump if t in wanted]
        if not needed:
            return ""
        branches = getattr(getattr(graph, "builder", None), "branches", {}).get(MODEL_NODE, {})
        if not branches:
            return (f"the model node has no conditional edge to route jumps to "
                    f"{', '.join(needed)} (the agent has no tools)")
        ends: set[str] = set()
        for branch in branches.values():
            if branch.ends is None:
                return ""  # the edge may go anywhere
            ends.update(branch.ends.values())
        missing = [t for t in needed if wanted[t] not in ends]
        if missing:
            return f"the model node's edge cannot reach {', '.join(missing)}"
        return self.end_problem(graph)

    def end_problem(self, graph: Any) -> str:
        """Why the `after_agent` hooks cannot also run here ("" when they can, or are none)."""
        if not self.end:
            return ""
        if edge_writer(graph) is None:
            return ("the model node has no conditional edge to end the run by (the agent "
                    "has no tools)")
        if END_MARK not in graph.channels:
            return f"the graph lacks the {END_MARK} channel"
        return ""

    def install(self, graph: Any) -> None:
        """Make `graph`'s model node run the hooks around LangChain's model node."""
        RunnableCallable = runnable_callable()

        problem = self.problem_with(graph)
        if problem:
            raise FusionError(f"cannot run before_model/after_model hooks inside the model "
                              f"node: {problem}; compile with into_model=False")
        node = graph.nodes[MODEL_NODE]
        self.model = Step(MODEL_NODE, MODEL_NODE, _ModelCall(node.bound, self.answers), ())
        # `recurse=False`: the node returns its writes, never a runnable to run in their place
        # (LangGraph would test every result against the `Runnable` ABC).
        bound = RunnableCallable(self.run, self.arun, trace=False, recurse=False)
        update: dict[str, Any] = {"bound": bound}
        if self.end:
            update["writers"], self.route = ending_edge(graph, MODEL_NODE, self.routes)
            self.ask_route = route_caller(self.route)
        graph.nodes[MODEL_NODE] = node.copy(update)

    def _continue(self, run: Run, runtime: Any, config: RunnableConfig) -> Any:
        run_steps(run, self._steps(), runtime, config)
        if self._ends(run, config):
            run.jumped = False
            run_steps(run, self.end, runtime, config)
            self._mark(run, config)
        return run.finish(runtime, config)

    async def _acontinue(self, run: Run, runtime: Any, config: RunnableConfig) -> Any:
        await arun_steps(run, self._steps(), runtime, config)
        if self._ends(run, config):
            run.jumped = False
            await arun_steps(run, self.end, runtime, config)
            self._mark(run, config)
        return run.finish(runtime, config)

    def _mark(self, run: Run, config: RunnableConfig) -> None:
        """Tell the edge whether the run ends here.

        It does unless an `after_agent` hook jumped: then the edge routes the jump
        as LangChain's edges after the `after_agent` nodes would (`end` starts
        them again from the first, `model` goes back to the loop). When it does,
        the edge is also told so directly (`DecidedRoute`): it would read the whole
        state (LangGraph copies every channel and applies the node's writes, the
        message list's included) only to find the mark.
        """
        ended = not run.jumped
        run.write([(END_MARK, ended)])
        if ended:
            self.routes.put(task_key(config), DecidedRoute(END))

    def _ends(self, run: Run, config: RunnableConfig) -> bool:
        """Whether LangChain's edge will end the run after this node (to `exit_node`).

        The edge is asked on the node's view, which is the state the node's writes
        make. When the run goes on, nothing changes the view after this, so the
        answer is kept for the edge itself (`ending_edge`): it then neither reads
        the state again (LangGraph copies every channel for that) nor routes twice.
        """
        if not self.end or self.ask_route is None:
            return False
        result = self.ask_route(dict(run.view), config)
        ends = result in (self.exit_node, [self.exit_node])
        if not ends:
            self.routes.put(task_key(config), DecidedRoute(result))
        return ends

    def run(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        result = super().run(state, runtime, config)
        self.answers.discard(task_key(config))  # the node succeeded: nothing to retry
        return result

    async def arun(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        result = await super().arun(state, runtime, config)
        self.answers.discard(task_key(config))
        return result

    def _steps(self) -> Iterable[Step]:
        if self.model is None:
            raise FusionError("the model-call hooks were compiled to run inside the model "
                              "node, but FusedChain.install was never called on the graph")
        return itertools.chain(self.before, [self.model], self.after)


class _ModelCall:
    """LangChain's model node, answering a retried task from `SavedAnswers`."""

    def __init__(self, model: Any, answers: SavedAnswers) -> None:
        self.model = model
        self.answers = answers

    def invoke(self, state: Any, config: RunnableConfig) -> Any:
        key = task_key(config)
        saved = self.answers.take(key)
        if saved is not None:
            return saved
        result = self.model.invoke(state, config)
        self.answers.put(key, result)
        return result

    async def ainvoke(self, state: Any, config: RunnableConfig) -> Any:
        key = task_key(config)
        saved = self.answers.take(key)
        if saved is not None:
            return saved
        result = await self.model.ainvoke(state, config)
        self.answers.put(key, result)
        return result
