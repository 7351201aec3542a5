"""Graph nodes that skip LangChain's callback run when nothing could observe it.

LangGraph runs a node with a body and writers (every node of an agent's graph,
and the input step once its `before_agent` hooks run inside it) as a
`RunnableSeq`: it opens a callback run for the node (`on_chain_start`), makes a
child callback manager for each of its steps (the body, then each writer), runs
the body in a copy of the context with the step's config as the one runnables
inherit, and closes the run (`on_chain_end`). When no callback handler listens
and LangSmith could not trace, nobody receives any of it, and it costs about 20
microseconds per node and superstep: a run of the demo pays it a dozen times,
and a bare agent's input step (a writer alone) never pays it.

`quiet_nodes` gives every such node a `QuietSeq`, a `RunnableSeq` that, when
nothing could observe the run (no callback handler in the node's config, no
LangSmith run current, tracing not enabled; `antler.plugin_api.tracing`), runs the
same steps the same way without the callback run: the body in a copy of the
context with the config set as the inherited one (for async, a task in that
copy), each writer after it, all given the node's config without `run_name`, as
the steps' configs are. When something could observe it, it is a `RunnableSeq`
and runs as one, so traces and the `messages` stream see the node's run as
before. What a hook can tell apart: `config["callbacks"]` is the node's manager
rather than a child of the node's run (neither has a handler). A quiet node
tells its steps that LangSmith's tracing was off when it started
(`tracing.UNTRACED`), so the checks inside it skip asking again; an observed
node inside a quiet one (a subagent's, given a handler) clears that for its
own steps.

`antler.agent.create_agent` makes every graph it builds quiet;
`create_fused_agent` too. A node LangGraph rebuilds (a `PregelNode` copied, or
its cached `node` dropped) is a plain `RunnableSeq` again: that costs the
bookkeeping, never a behaviour.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from antler.compat import langgraph_private

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = ["quiet_nodes", "quiet_seq_class"]


@functools.cache
def quiet_seq_class() -> type[Any]:
    """The `QuietSeq` class (LangGraph is imported on first use, not with Antler)."""
    from antler.plugin_api.tracing import UNTRACED, trace_check

    base = langgraph_private("langgraph._internal._runnable", "RunnableSeq")
    in_context = langgraph_private("langgraph._internal._runnable", "set_config_context")
    may_trace = trace_check()
    untraced = UNTRACED

    def observed(config: RunnableConfig) -> bool:
        """Whether a handler could receive the node's callback run (see the module docs)."""
        callbacks: Any = config.get("callbacks")
        if callbacks is not None and getattr(callbacks, "handlers", callbacks):
            return True
        # A run id asked for the node's run is kept for it, as LangGraph keeps it.
        return "run_id" in config or may_trace()

    def step_config(config: RunnableConfig) -> RunnableConfig:
        """The config each step gets: the node's, without its run's name."""
        child = config.copy()
        child.pop("run_name", None)
        return child

    class QuietSeq(base):  # type: ignore[misc,valid-type]
        """A node's `RunnableSeq` that runs its steps without a callback run when nothing
        could observe one (see the module docs)."""

        def invoke(self, input: Any, config: RunnableConfig | None = None,
                   **kwargs: Any) -> Any:
            if config is None or observed(config):
                if not untraced.get():
                    return super().invoke(input, config, **kwargs)
                token = untraced.set(False)  # observed: its steps ask LangSmith again
                try:
                    return super().invoke(input, config, **kwargs)
                finally:
                    untraced.reset(token)
            config = step_config(config)
            body, *writers = self.steps
            with in_context(config, None) as context:
                context.run(untraced.set, True)
                input = context.run(body.invoke, input, config, **kwargs)
            for writer in writers:
                input = writer.invoke(input, config)
            return input

        async def ainvoke(self, input: Any, config: RunnableConfig | None = None,
                          **kwargs: Any) -> Any:
            if config is None or observed(config):
                if not untraced.get():
                    return await super().ainvoke(input, config, **kwargs)
                token = untraced.set(False)
                try:
                    return await super().ainvoke(input, config, **kwargs)
                finally:
                    untraced.reset(token)
            config = step_config(config)
            body, *writers = self.steps
            with in_context(config, None) as context:
                context.run(untraced.set, True)
                input = await asyncio.create_task(body.ainvoke(input, config, **kwargs),
                                                  context=context)
            for writer in writers:
                input = await writer.ainvoke(input, config)
            return input

    return QuietSeq


def quiet_nodes(graph: Any) -> list[str]:
    """Make each node of compiled `graph` that LangGraph runs as a `RunnableSeq` a
    `QuietSeq` (see the module docs); the names of the nodes made quiet."""
    base = langgraph_private("langgraph._internal._runnable", "RunnableSeq")
    quiet = quiet_seq_class()
    made = []
    for name, node in graph.nodes.items():
        seq = node.node  # LangGraph's own, cached on the node
        if type(seq) is not base:
            continue
        node.__dict__["node"] = quiet(*seq.steps, name=seq.name,
                                      trace_inputs=seq.trace_inputs,
                                      trace_policy=seq.trace_policy)
        made.append(name)
    return made
