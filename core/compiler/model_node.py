"""Model-call hooks inside LangChain's model node (`ModelHooks`).

The `before_model` hooks, LangChain's own model node (every `wrap_model_call`
and the model) and the `after_model` hooks run in one superstep. A model answer
of a node that failed afterwards is kept for the retry of the same task
(`_SavedAnswers`), so a failing `after_model` hook costs no second model call
in one process.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from antler.compat import runnable_callable, task_config_keys
from antler.errors import FusionError

from .nodes import END_MARK, _arun_steps, _Channel, _Run, _run_steps, _Step, _StepRunner
from .plan import _DESTINATIONS, MODEL_NODE

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig


class ModelHooks(_StepRunner):
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
    model's answer is kept for that retry (`_SavedAnswers`, this process
    only), so the model is not called twice. Hooks that may
    interrupt, or are declared `fusable: false`, keep every hook of their
    kind in its own nodes (see `absorbable`).
    """

    def __init__(self, before: list[_Step], after: list[_Step], channels: dict[str, _Channel],
                 token: str, *, loop_entry: str, end: list[_Step] | None = None,
                 exit_node: str = "__end__") -> None:
        targets = {t for step in (*before, *after, *(end or ())) for t in step.can_jump}
        # The model node is the loop's exit: LangChain's edge after it reads `jump_to`.
        super().__init__(channels, token, node=MODEL_NODE, loop_exit=True,
                         can_jump=tuple(t for t in _DESTINATIONS if t in targets))
        self.before = before
        self.after = after
        self.end = end or []
        self.exit_node = exit_node
        self.loop_entry = loop_entry
        self.model: _Step | None = None
        self.route: Any = None
        """LangChain's edge after the model node (its path), when `end` hooks run inside."""
        self.answers = _SavedAnswers()
        self.routes = _SavedAnswers()
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
        if _edge_writer(graph) is None:
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
        self.model = _Step(MODEL_NODE, MODEL_NODE, _ModelCall(node.bound, self.answers), ())
        update: dict[str, Any] = {"bound": RunnableCallable(self.run, self.arun, trace=False)}
        if self.end:
            update["writers"], self.route = ending_edge(graph, MODEL_NODE, self.routes)
        graph.nodes[MODEL_NODE] = node.copy(update)

    def _continue(self, run: _Run, runtime: Any, config: RunnableConfig) -> Any:
        _run_steps(run, self._steps(), runtime, config)
        if self._ends(run, config):
            run.jumped = False
            _run_steps(run, self.end, runtime, config)
            self._mark(run)
        return run.finish(runtime, config)

    async def _acontinue(self, run: _Run, runtime: Any, config: RunnableConfig) -> Any:
        await _arun_steps(run, self._steps(), runtime, config)
        if self._ends(run, config):
            run.jumped = False
            await _arun_steps(run, self.end, runtime, config)
            self._mark(run)
        return run.finish(runtime, config)

    @staticmethod
    def _mark(run: _Run) -> None:
        """Tell the edge whether the run ends here.

        It does unless an `after_agent` hook jumped: then the edge routes the jump
        as LangChain's edges after the `after_agent` nodes would (`end` starts
        them again from the first, `model` goes back to the loop).
        """
        run.write([(END_MARK, not run.jumped)])

    def _ends(self, run: _Run, config: RunnableConfig) -> bool:
        """Whether LangChain's edge will end the run after this node (to `exit_node`).

        The edge is asked on the node's view, which is the state the node's writes
        make. When the run goes on, nothing changes the view after this, so the
        answer is kept for the edge itself (`ending_edge`): it then neither reads
        the state again (LangGraph copies every channel for that) nor routes twice.
        """
        if not self.end or self.route is None:
            return False
        result = self.route.invoke(dict(run.view), config)
        ends = result in (self.exit_node, [self.exit_node])
        if not ends:
            self.routes.put(_task_key(config), _Decided(result))
        return ends

    def run(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        result = super().run(state, runtime, config)
        self.answers.discard(_task_key(config))  # the node succeeded: nothing to retry
        return result

    async def arun(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        result = await super().arun(state, runtime, config)
        self.answers.discard(_task_key(config))
        return result

    def _steps(self) -> Iterable[_Step]:
        if self.model is None:
            raise FusionError("the model-call hooks were compiled to run inside the model "
                              "node, but FusedChain.install was never called on the graph")
        return itertools.chain(self.before, [self.model], self.after)


def _edge_writer(graph: Any, node: str = MODEL_NODE) -> Any:
    """The writer of LangChain's conditional edge after `node`, if it has one."""
    from langgraph.graph._branch import BranchSpec

    for writer in graph.nodes[node].writers:
        owner = getattr(getattr(writer, "func", None), "__self__", None)
        if isinstance(owner, BranchSpec):
            return writer
    return None


class _Decided:
    """Where the edge goes, as the node already worked it out (not a state: never a dict)."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


def _decided_or_read(decided: _SavedAnswers, read: Any) -> Any:
    """The edge's reader: the route the node left for this task, else the state as read."""
    def reader(config: RunnableConfig) -> Any:
        known = decided.take(_task_key(config))
        return known if known is not None else read(config)

    return reader


def ending_edge(graph: Any, node: str, decided: _SavedAnswers | None = None,
                ) -> tuple[list[Any], Any]:
    """(`node`'s writers with LangChain's edge ending the run when the node did, the edge's path).

    The edge sends a finished run to the first `after_agent` node; when the
    node ran those hooks itself (it wrote `END_MARK` true), the run ends here.
    A route the node left in `decided` for its task is taken as it is, without
    reading the state.
    """
    from langgraph.graph import END

    RunnableCallable = runnable_callable()
    edge = _edge_writer(graph, node)
    spec = edge.func.__self__
    route = spec.path
    read = edge.kwargs["reader"]
    if decided is not None and read is not None:
        read = _decided_or_read(decided, read)

    def ending(state: Any, config: RunnableConfig) -> Any:
        if isinstance(state, _Decided):
            return state.result
        # The node decided on the state before its after_agent hooks changed it.
        return END if state.get(END_MARK) else route.invoke(state, config)

    ends = None if spec.ends is None else {**spec.ends, END: END}
    routed = spec._replace(path=RunnableCallable(ending, trace=False), ends=ends)
    replaced = routed.run(edge.kwargs["writer"], read)
    return [replaced if writer is edge else writer for writer in graph.nodes[node].writers], route


class _SavedAnswers:
    """The model's writes of model-node runs not finished yet, by task, for their retry.

    When an `after_model` hook fails, LangGraph keeps nothing of the node, and
    the retry (a resume, or a retry policy) runs the same task again from the
    same checkpoint. Taking the model's writes from here, the retry does not
    call the model a second time, as LangChain's graph would not: it saved the
    answer before its `after_model` nodes ran. In this process only: a resume
    elsewhere calls the model again. Entries of runs never retried age out.
    """

    def __init__(self, size: int = 64) -> None:
        self._items: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def put(self, key: tuple[Any, ...] | None, value: Any) -> None:
        if key is None:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def take(self, key: tuple[Any, ...] | None) -> Any:
        if key is None:
            return None
        with self._lock:
            return self._items.pop(key, None)

    def discard(self, key: tuple[Any, ...] | None) -> None:
        self.take(key)


def _task_key(config: RunnableConfig) -> tuple[Any, ...] | None:
    """The LangGraph task running `config` (stable when the same task is run again)."""
    thread_key, namespace_key, task_key = task_config_keys()
    configurable = config.get("configurable") or {}
    task = configurable.get(task_key)
    if not task:
        return None
    return (configurable.get(thread_key), configurable.get(namespace_key),
            task)


class _ModelCall:
    """LangChain's model node, answering a retried task from `_SavedAnswers`."""

    def __init__(self, model: Any, answers: _SavedAnswers) -> None:
        self.model = model
        self.answers = answers

    def invoke(self, state: Any, config: RunnableConfig) -> Any:
        key = _task_key(config)
        saved = self.answers.take(key)
        if saved is not None:
            return saved
        result = self.model.invoke(state, config)
        self.answers.put(key, result)
        return result

    async def ainvoke(self, state: Any, config: RunnableConfig) -> Any:
        key = _task_key(config)
        saved = self.answers.take(key)
        if saved is not None:
            return saved
        result = await self.model.ainvoke(state, config)
        self.answers.put(key, result)
        return result
