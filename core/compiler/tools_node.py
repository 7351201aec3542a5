"""The `after_agent` hooks inside the tools node, when a lone tool call ends the run (`ToolsEnd`).

A run whose last model reply makes one call to a `return_direct` tool (the
clarification tool, say) ends after the tools node: LangChain's edge after it
goes to the first `after_agent` node, one more superstep and checkpoint. Here
the tools node runs those hooks itself when its edge is about to end the run,
as the model node does for a reply without tool calls (`ModelHooks`), and its
edge then ends the run (`END_MARK`). Their nodes stay for every other way a
run ends.

Only a lone call qualifies. LangChain runs each tool call of a reply as a task
of its own, all in one superstep; with two of them, both edges would end the
run and the hooks would run twice, where the graph runs their node once. Nor
does a hook that may jump: LangChain's edge after the tools node does not read
`jump_to`, so `compile_fusion` leaves the hooks to their nodes then.

The hooks see what their node would have seen: the state the superstep started
with and the tool's writes applied through the channels. When a hook fails,
the tools node fails as a whole and nothing of it is checkpointed; the tool's
result is kept for the retry of the same task (`SavedAnswers`, this process
only), so the tool does not run twice in one process.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from antler.compat import runnable_callable, task_state_reader

from .fusionplan import TOOLS_NODE

# The model node takes much the same list: both run their hooks as steps of `steps`.
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
    from collections.abc import Iterable

    from langchain_core.runnables import RunnableConfig

class ToolsEnd(StepRunner):
    """LangChain's tools node, running the `after_agent` hooks when a lone call ends the run."""

    def __init__(self, end: list[Step], channels: dict[str, Channel], token: str, *,
                 exit_node: str) -> None:
        super().__init__(channels, token, node=TOOLS_NODE, loop_exit=False, can_jump=())
        self.end = end
        self.exit_node = exit_node
        self.tools: Any = None
        """LangChain's tools node (a `ToolNode`), once installed."""
        self.route: Any = None
        """LangChain's edge after the tools node (its path)."""
        self.ask_route: Any = None
        """`self.route.invoke`, or the routing function itself (`route_caller`)."""
        self.step = Step(TOOLS_NODE, TOOLS_NODE, None, ())
        self.results = SavedAnswers()
        self.routes = SavedAnswers()
        """Where the edge goes after each task, as the node worked it out (see `_ending`)."""

    def _steps(self) -> Iterable[Step]:
        return self.end

    def problem_with(self, graph: Any) -> str:
        """Why the hooks cannot also run in `graph`'s tools node ("" when they can)."""
        nodes = getattr(graph, "nodes", None)
        if not isinstance(nodes, dict) or TOOLS_NODE not in nodes:
            return "the agent has no tools node"
        if self.tools is not None:
            return "the hooks already run inside a tools node"
        if not hasattr(nodes[TOOLS_NODE].bound, "tools_by_name"):
            return "the tools node is not the one LangChain's create_agent builds"
        if edge_writer(graph, TOOLS_NODE) is None:
            return "the tools node has no conditional edge to end the run by"
        missing = ({END_MARK} | set(self.channels)) - set(graph.channels)
        if missing:
            return f"the graph lacks state channels {sorted(missing)}"
        return ""

    def install(self, graph: Any) -> None:
        RunnableCallable = runnable_callable()
        node = graph.nodes[TOOLS_NODE]
        self.tools = node.bound
        writers, self.route = ending_edge(graph, TOOLS_NODE, self.routes)
        self.ask_route = route_caller(self.route)
        # `recurse=False`: the node returns its writes, never a runnable (see `ModelHooks`).
        graph.nodes[TOOLS_NODE] = node.copy({
            "bound": RunnableCallable(self.run, self.arun, trace=False, recurse=False),
            "writers": writers})

    def run(self, input: Any, runtime: Any, config: RunnableConfig) -> Any:
        key = task_key(config)
        result = self.results.take(key)
        if result is None:
            result = self.tools.invoke(input, config)
        run = self._ending(input, result, key, config)
        if run is None:
            return result
        run_steps(run, self.end, runtime, config)
        return self._finish(run, runtime, key, config)

    async def arun(self, input: Any, runtime: Any, config: RunnableConfig) -> Any:
        key = task_key(config)
        result = self.results.take(key)
        if result is None:
            result = await self.tools.ainvoke(input, config)
        run = self._ending(input, result, key, config)
        if run is None:
            return result
        await arun_steps(run, self.end, runtime, config)
        return self._finish(run, runtime, key, config)

    def _ending(self, input: Any, result: Any, key: Any, config: RunnableConfig) -> Run | None:
        """The view the hooks run on when the edge will end the run after this call; else None.

        The edge is asked here, on the state it would read (the superstep's start with
        this task's writes applied, as the channels apply them), and its answer is left
        for it (`DecidedRoute`): it then does not copy every channel to read the state
        again. A result the view does not take (a `Command` to the parent graph, a
        shape LangGraph rejects) leaves the edge to read the state itself.
        """
        read = task_state_reader(config)
        if read is None:
            return None
        state = read(list(self.channels), False)  # as the superstep started
        run = Run(self, state, config)
        if self._may_end(input, state):
            run.absorb(self.step, result, time.perf_counter())
            route = self.ask_route(dict(run.view), config)
            if route in (self.exit_node, [self.exit_node]):
                self.results.put(key, result)  # for a retry, should a hook fail
                return run
        else:
            try:
                if run.absorb(self.step, result, time.perf_counter()):
                    return None
            except Exception:  # LangGraph reports what it rejects, as before
                return None
            route = self.ask_route(dict(run.view), config)
        self.routes.put(key, DecidedRoute(route))
        return None

    def _may_end(self, input: Any, state: dict[str, Any]) -> bool:
        """Whether this task is a lone call the run may end after: the reply's only call
        pending, to a `return_direct` tool (or one the tools node does not know)."""
        calls = _calls_of(input)
        if calls is None or len(calls) != 1:
            return False
        tool = self.tools.tools_by_name.get(calls[0].get("name"))
        if tool is not None and not tool.return_direct:
            return False  # the edge goes back to the model
        return _pending_calls(state) == 1  # no other call of the reply runs beside it

    def _finish(self, run: Run, runtime: Any, key: Any, config: RunnableConfig) -> Any:
        run.write([(END_MARK, True)])
        writes = run.finish(runtime, config)
        self.results.discard(key)  # the node succeeded: nothing to retry
        self.routes.put(key, DecidedRoute(END))  # the edge ends the run (`END_MARK`)
        return writes


def _calls_of(input: Any) -> list[dict[str, Any]] | None:
    """The tool calls one task of the tools node runs (LangChain sends them as a list)."""
    if isinstance(input, list) and input and all(
            isinstance(call, dict) and call.get("type") == "tool_call" for call in input):
        return input
    if isinstance(input, dict) and input.get("__type") == "tool_call_with_context":
        return [input["tool_call"]]
    return None


def _pending_calls(state: dict[str, Any]) -> int:
    """Calls of the last assistant reply without a result yet (each runs as a task)."""
    messages = state.get("messages") or []
    answered: set[str] = set()
    for message in reversed(messages):
        if message.type == "tool":
            answered.add(message.tool_call_id)
        elif message.type == "ai":
            return sum(1 for call in message.tool_calls if call.get("id") not in answered)
    return 0
