"""The `before_agent` hooks inside LangGraph's input step (`AgentStart`).

A run's input (the caller's messages) is written by LangGraph's input step, the
`__start__` node, in a superstep and checkpoint of its own. LangChain then runs
the `before_agent` hooks in a node after it, in another superstep and
checkpoint, before the first model call. Here the input step does both: it
applies the input to its view of the state, runs the `before_agent` hooks on
that view (each seeing what it would have seen as its own node) and writes the
input and the hooks' updates together.

What changes by construction:

- One superstep and one checkpoint fewer per run. With a saver that stores
  every checkpoint whole (SQLite), that is one copy of the message list fewer.
- The input and what the `before_agent` hooks made of it are saved together or
  not at all. When a hook fails, the run's input is not written to the thread:
  the checkpoint holds the state before the run plus the pending input, and
  resuming (`invoke(None, config)`) runs the input step again. No run ever
  starts from messages that the hooks (the caller-input boundary above all)
  have not seen.
- A hook's jump routes from the input step as LangChain's edge after the
  `before_agent` nodes would have: `end` to the first `after_agent` node (or
  the end), `model` to the loop's entry, `tools` to the tools node.

Hooks that may interrupt, or are declared `fusable: false`, keep every
`before_agent` hook in its own nodes (`fusionplan.absorbable`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from antler.compat import channel_writes, runnable_callable

from .fusionplan import DESTINATIONS, START_NODE
from .steps import Channel, Run, Step, StepRunner, command_type

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig


class AgentStart(StepRunner):
    """LangGraph's input step with the `before_agent` hooks run inside it.

    `install` rewires the compiled graph's `__start__` node: it reads the state
    as well as the input, applies the input through the original input mapping
    (so whatever the core added to it, such as the record of arrived message
    ids, is there for the hooks), runs the hooks, and routes to the node
    LangChain's edge from the input step led to, or where a hook jumped.
    """

    def __init__(self, steps: list[Step], channels: dict[str, Channel], token: str, *,
                 exit_node: str) -> None:
        targets = {t for step in steps for t in step.can_jump}
        super().__init__(channels, token, node=START_NODE, loop_exit=False,
                         can_jump=tuple(t for t in DESTINATIONS if t in targets))
        self.steps = steps
        self.exit_node = exit_node
        self.entry = ""
        self.input_writes: list[Any] = []

    def _steps(self) -> Iterable[Step]:
        return self.steps

    def problem_with(self, graph: Any) -> str:
        """Why the hooks cannot run in `graph`'s input step ("" when they can)."""
        ChannelWrite, ChannelWriteEntry, _ = channel_writes()
        node = getattr(graph, "nodes", {}).get(START_NODE)
        if node is None or len(node.writers) != 2 or not all(
                isinstance(w, ChannelWrite) for w in node.writers):
            return "the input step is not the one LangGraph builds"
        edge = node.writers[1].writes
        if len(edge) != 1 or not isinstance(edge[0], ChannelWriteEntry) or \
                not edge[0].channel.startswith("branch:to:"):
            return "the input step has no plain edge to the agent's first node"
        missing = set(self.channels) - set(graph.channels)
        if missing:
            return f"the graph lacks state channels {sorted(missing)}"
        return ""

    def install(self, graph: Any) -> None:
        """Make `graph`'s input step run the hooks after writing the input."""
        from antler.errors import FusionError

        ChannelWrite = channel_writes()[0]

        problem = self.problem_with(graph)
        if problem:
            raise FusionError(f"cannot run before_agent hooks inside the input step: "
                              f"{problem}; compile with into_model=False")
        RunnableCallable = runnable_callable()
        node = graph.nodes[START_NODE]
        inputs, edge = node.writers
        self.input_writes = list(inputs.writes)
        self.entry = edge.writes[0].channel.removeprefix("branch:to:")
        # Writes of the node's output as every other node's: state updates, then gotos.
        output = next(w for w in graph.nodes[self.entry].writers if isinstance(w, ChannelWrite))
        # It reads the state as well as its input (the `__start__` channel).
        # `recurse=False`: the node returns its writes, never a runnable (see `ModelHooks`).
        graph.nodes[START_NODE] = node.copy({
            "channels": [*self.channels, START_NODE],
            "bound": RunnableCallable(self.run, self.arun, trace=False, recurse=False),
            "writers": [ChannelWrite(output.writes, tags=output.tags)],
        })

    def run(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        run = self._start(state, config)
        return self._route(run, super()._continue(run, runtime, config))

    async def arun(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        run = self._start(state, config)
        return self._route(run, await super()._acontinue(run, runtime, config))

    def _start(self, state: dict[str, Any], config: RunnableConfig) -> Run:
        run = Run(self, state, config)
        value = run.view.pop(START_NODE)
        pairs: list[tuple[str, Any]] = []
        for entry in self.input_writes:
            mapped = entry.mapper(value) if entry.mapper is not None else None
            pairs.extend(mapped or ())
        run.write(pairs)
        return run

    def _route(self, run: Run, result: Any) -> Any:
        """The node's writes and the goto LangChain's edge would have taken."""
        goto = self.entry
        if run.jumped:
            goto = {"end": self.exit_node, "tools": "tools", "model": self.entry}.get(
                run.view.get("jump_to") or "", self.entry)
        written = [] if result is None else result if isinstance(result, list) else [result]
        return [*written, command_type()(goto=goto)]
