"""The chain compiler: consecutive node hooks of one kind run inside one graph node.

LangChain's `create_agent` makes every `before_agent`, `before_model`,
`after_model` and `after_agent` hook its own graph node, and every node is its
own LangGraph superstep with its own checkpoint. All node hooks of one kind
already run back to back (`before_*` in list order, `after_*` in reverse list
order; wrap hooks create no nodes), so `fuse` runs each such run of hooks inside
one node with the same result:

* Every member becomes a *proxy*: an object of a subclass of its own class
  that hides the fused hooks from `create_agent` (which looks them up on the
  class and finds `AgentMiddleware`'s no-ops, so it makes no node for them)
  while the instance still reaches them (`_HiddenHook`). Its wrap hooks,
  `tools`, `state_schema` and `name` stay as they were, and it shares the
  instance's attribute dictionary: what a hook stores on `self` is on the
  caller's instance.
* One `FusedHooks` middleware per run of hooks carries the members' hooks. It
  sits in the list where its first member sat, so the graph order is unchanged.
* Between members the fused node applies each update to its own view of the
  state through the channel's real LangGraph channel (so `add_messages` and any
  reducer a plugin's state schema declares run as in the graph, and
  `jump_to`, an ephemeral channel, is seen only by the next member). Each
  member sees the state it would have seen as its own node. The node returns
  writes whose effect equals the members' updates applied in sequence: every
  write of a reducer channel in order (collapsed to one `Overwrite` when a
  member overwrote), the last write of a plain channel, and the last member's
  write of an ephemeral one.
* `jump_to`: a member that jumps (writes a destination its hook declares with
  `@hook_config(can_jump_to=...)`) ends the group there, as the unfused graph
  skips the remaining nodes; the fused node declares the union of its members'
  destinations, and LangChain's edge routes the jump.

The model-call hooks inside the model node (`into_model`, on by default in
`antler.agent.create_agent`; `chain.fuse_into_model` in the operator config). Even
fused, `before_model` and `after_model` hooks cost two supersteps (and two
checkpoints) on every model call. `create_fused_agent` takes them out of
their nodes and makes LangChain's model node run them (`ModelHooks`): the
`before_model` hooks, then LangChain's own model node (every
`wrap_model_call`, the model) on the state they left, then the `after_model`
hooks, each seeing what it would have seen as its own node. A model call then
costs one superstep, as in a bare agent. A `before_model` jump ends the node
before the model is called, an `after_model` jump ends it there, and the
node's `jump_to` write is routed by LangChain's edge after the model node
(`ModelHooks.problem_with` checks that edge can reach every declared
destination; when it cannot, the hooks keep their nodes and the plan says
why). A kind with a member that must stand alone keeps its nodes; so does
`before_model` when `after_model` does (its jumps must skip them).

The run's own hooks inside the nodes around them (also `into_model`). The
`before_agent` hooks run inside LangGraph's input step (`start_node.AgentStart`),
which writes the run's input and their updates together; the `after_agent` hooks
also run inside the model node when its edge is about to end the run, which then
ends it there (`ModelHooks`), and inside the tools node when a lone
`return_direct` call ends it (`tools_node.ToolsEnd`); their node stays for runs
that end elsewhere. A compiled turn writes as many checkpoints as a bare agent's (docs/compiler.md,
"Checkpoints per turn").

Wrap layers. LangChain nests each middleware's `wrap_model_call` (and
`wrap_tool_call`) as a layer of its own under LangSmith's `traceable`, which
costs its bookkeeping on every call even untraced. A run of consecutive wrappers
of one kind becomes one layer (`wraps.FusedWraps`) that composes them as
LangChain does and calls them directly; traced, each still runs under its own
span. A layer that is the agent's only one of its kind skips `traceable` itself
when nothing could trace the call (`wraps.skip_idle_tracing`). The plan lists
these layers (`FusionPlan.wraps`).

Fusion boundaries. A member's hook of one kind stands alone (keeps its own
node) when its manifest entry says `fusable: false` (passed as `unfusable`),
when its class sets `antler_fusable = False`, or when that hook's code refers to
a name `interrupt` (LangGraph's `interrupt()`; conservative: a helper that
interrupts on its behalf is not seen, so declare such plugins unfusable).
Resuming after an interrupt re-runs the whole node that raised it, so a member
that can interrupt must not share a node with another member's side effects.
Members with different LangSmith `trace_policy` values are not fused together.
In the first `before_model` node (the loop's entry), a member other than the
first that may jump to `model` splits the first member off, because LangChain
gives the loop-entry node no edge to itself.

How failure differs from the unfused graph: the fused node is one superstep,
so when a member raises, the updates of the members before it in the same node
are not checkpointed separately: the last checkpoint is the one before the
fused node, and resuming (`invoke(None, config)`) runs the whole node again,
earlier members included. The state a resumed run ends in is the same when the
hooks are deterministic given their state (which LangGraph's own retries assume
too); a hook with outside side effects runs those again. Interrupt-capable
hooks stand alone for exactly this reason.
Inside the model node the model call is one of those members: when it or a
model-call hook fails, resuming runs the node again. The model's answer of a
node that failed after the model call is kept for the retry of the same task
(`SavedAnswers`), so in one process a failing `after_model` hook costs no
second model call, as in LangChain's graph, which checkpointed the answer; a
resume in another process calls the model again. Declare a plugin `fusable:
false` if its model-call hooks must not share that fate.

Other differences, by construction: LangGraph managed values (such as
`remaining_steps`) are read once per fused node, and a run takes fewer
supersteps, so a recursion limit is reached later. Node names differ (the
plan maps each hook to its node: `FusionPlan.node_of`), which matters for
`interrupt_before`/`interrupt_after`. A hook that writes a
resolvable `jump_to` without declaring it is not routed (as in the unfused
graph), but when its node is fused with members that do declare jumps the
write is dropped rather than shown to the next node. A hook returning
`Command(goto=...)` has its `goto` scheduled when the fused node ends.

Observability: the fused node calls each member's own hook methods, so the
`--trace` timeline (`antler.runtime.tracing`, instrumented before fusion) still lists
every plugin's hook with its own time. When a callback handler listens (a
tracer, LangGraph's `messages` stream), each member runs as a run of its own
named as its unfused node, with that name as `langgraph_node` in its
metadata: the messages it writes and the chat models it calls stream under
its name (only the agent's model streams as `model`). Each fused
node, and the model node with hooks inside, also reports what each member
(and the model) returned on LangGraph's `custom` stream (`{FUSED_EVENT: node,
"hooks": [...]}`) when the run asks with the plan's token
(`asking_for_hook_events`; never a server client), and `expand_fused_updates`
turns the node's `updates`
chunk back into one chunk per member hook, named as the unfused graph names
its nodes (`AntlerAgent.stream` does this).

Layout: `fusionplan` (which hooks share which node), `proxies` (hiding fused hooks
from `create_agent`), `steps` (running hooks inside a node, shared by every node
that does), `nodes` (the fused node), `model_node` (the
model-call hooks inside the model node), `start_node` (the `before_agent` hooks
inside the input step), `wraps` (wrap hooks in one layer),
`streams` (per-hook `updates`), `leanchannels` (reducer channels that copy
cheaply, which `antler.agent.create_agent` puts in every graph it builds),
`quietnodes` (nodes that skip LangChain's callback run when nothing could
observe it), `lonecalls` (a tools node's lone call run in the node's thread, not a
pool's), and this module, which compiles a middleware list and builds the
agent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .fusionplan import (
    END_HOOKS,
    FUSED_EVENT,
    MODEL_HOOKS,
    MODEL_NODE,
    NODE_HOOKS,
    START_HOOKS,
    UNFUSABLE_ATTRIBUTE,
    WRAP_HOOKS,
    Entry,
    FusionPlan,
    HookNode,
    Member,
    WrapLayer,
    absorbable,
    end_members,
    fused_names,
    make_plan,
    plan_entries,
    plan_for_specs,
    plan_from_hooks,
    plan_members,
    plan_wraps,
    wrap_layers,
)
from .lonecalls import inline_lone_calls
from .model_node import ModelHooks
from .nodes import FusedHooks, agent_end_class, fused_middleware, model_edge_class
from .proxies import first_member, interrupting_wrap, make_member, make_proxy, overrides
from .quietnodes import quiet_nodes
from .runscope import scope_runs
from .start_node import AgentStart
from .steps import Step, make_step, state_channels
from .streams import (
    aexpand_fused_updates,
    asking_for_hook_events,
    expand_fused_updates,
    stream_modes_for,
    wants_expansion,
)
from .tools_node import ToolsEnd
from .wraps import FusedWraps, fused_wraps, skip_idle_tracing

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware


@dataclass
class FusedChain:
    """`compile_fusion`'s full answer: the middleware list for `create_agent` and its plan.

    With `model_hooks`, the list no longer carries the model-call hooks: the
    graph `create_agent` builds from it must go through `install`, which puts
    them into its model node (`create_fused_agent` does both).
    """

    middlewares: list[Any]
    plan: FusionPlan
    model_hooks: ModelHooks | None = None
    agent_start: AgentStart | None = None
    tools_end: ToolsEnd | None = None
    """The `after_agent` hooks for the tools node too; dropped by `install` when the graph's
    tools node cannot run them (the hooks then keep to their nodes there)."""

    def problem_with(self, graph: Any) -> str:
        """Why the absorbed hooks cannot run inside `graph`'s nodes ("" when they can)."""
        problems = [part.problem_with(graph) for part in (self.agent_start, self.model_hooks)
                    if part is not None]
        return "; ".join(p for p in problems if p)

    def install(self, graph: Any) -> Any:
        """Run the absorbed hooks inside `graph`'s model node and input step; return `graph`.

        A fused wrap layer that is the graph's only one of its kind is also called
        without LangSmith's `traceable` when nothing could trace it (`skip_idle_tracing`).

        Raises `FusionError` when the graph cannot run them there (see
        `problem_with`); the graph is then unchanged, and unusable with these
        middlewares: build it again with `into_model=False`.
        """
        problem = self.problem_with(graph)
        if problem:
            from antler.errors import FusionError

            raise FusionError(f"cannot run hooks inside existing nodes: {problem}; compile "
                              "with into_model=False")
        skip_idle_tracing(graph, self.middlewares)
        if self.model_hooks is not None:
            self.model_hooks.install(graph)
        if self.agent_start is not None:
            self.agent_start.install(graph)
        if self.tools_end is not None and self.tools_end.problem_with(graph):
            self.tools_end = None
            self.plan.ends_in_tools = ()
        if self.tools_end is not None:
            self.tools_end.install(graph)
        return graph


def fuse(middlewares: Sequence[AgentMiddleware], *, labels: Sequence[str] | None = None,
         unfusable: Collection[str] = (), state_schema: type | None = None,
         ) -> list[AgentMiddleware]:
    """The middleware list with consecutive node hooks of one kind fused into one node.

    `labels` name the middlewares for the plan and the stream (default: their
    `name`; a shorter list leaves the rest to their `name`); `unfusable` holds
    the labels whose hooks must keep their own nodes (manifest `fusable:
    false`); `state_schema` is the `state_schema` passed to `create_agent`, if
    any. The input list and its instances are not changed. (Running the
    model-call hooks inside the model node needs the graph as well: see
    `create_fused_agent`.)
    """
    return compile_fusion(middlewares, labels=labels, unfusable=unfusable,
                          state_schema=state_schema).middlewares


def compile_fusion(middlewares: Sequence[AgentMiddleware], *,
                   labels: Sequence[str] | None = None, unfusable: Collection[str] = (),
                   state_schema: type | None = None, into_model: bool = False,
                   end_inside: bool = True) -> FusedChain:
    """Like `fuse`, but also return the `FusionPlan`.

    `into_model` also takes the `before_model` and `after_model` hooks out of
    their nodes, where they qualify (`absorbable`), for `FusedChain.install`
    to run inside the model node, and the `before_agent` hooks, to run inside
    the input step; the `after_agent` hooks keep their nodes and, unless
    `end_inside` is False, also run inside the model node when it ends the run.
    """
    from langchain.agents.middleware import AgentMiddleware, AgentState

    middlewares = list(middlewares)
    members = [make_member(m, labels[i] if labels and i < len(labels) else m.name,
                       unfusable) for i, m in enumerate(middlewares)]
    groups = plan_members(members)
    channels, problem = state_channels(middlewares, state_schema or AgentState)
    if problem:
        single: list[Entry] = [(kind, [i], False) for kind, group in groups for i in group]
        plan = make_plan(members, single, [""] * len(single), note=problem)
        return FusedChain(middlewares, plan)
    kinds, note = (absorbable(members, groups, interrupting_wrap(middlewares, members))
                   if into_model else (set(), ""))
    if not end_inside:
        kinds.discard(END_HOOKS[0])
    ends = end_members(groups, kinds)
    if ends:
        # The model node tells its edge that it ran them through a channel of its own.
        middlewares.append(agent_end_class()())
        members.append(make_member(middlewares[-1], middlewares[-1].name, unfusable))
        channels, _ = state_channels(middlewares, state_schema or AgentState)
    entries = plan_entries(groups, kinds)
    taken_names = {m.name for m in middlewares}
    names = fused_names(entries, taken_names)
    plan = make_plan(members, entries, names, note=note)
    plan.ends_in_model = tuple(members[i].label for i in ends)
    wraps = plan_wraps(members)
    plan.wraps = wrap_layers(members, wraps, taken_names)

    taken_kinds: dict[int, set[str]] = {}
    for kind, group, absorbed in entries:
        if len(group) > 1 or absorbed:
            for index in group:
                taken_kinds.setdefault(index, set()).add(kind)
    for kind, group in wraps:
        for index in group:
            taken_kinds.setdefault(index, set()).add(kind)
    proxies = {index: make_proxy(middlewares[index], frozenset(kinds))
               for index, kinds in taken_kinds.items()}
    result: list[Any] = [proxies.get(i, m) for i, m in enumerate(middlewares)]

    loop_exit = first_member(members, "after_model")
    inserts: dict[int, list[Any]] = {}
    steps_inside: dict[str, list[Step]] = {}
    for (kind, group, absorbed), name, node in zip(entries, names, plan.nodes, strict=True):
        if absorbed:
            steps_inside[kind] = [make_step(middlewares[i], proxies[i], members[i], kind)
                                  for i in group]
            if kind == "after_model":
                last = steps_inside[kind][-1]
                steps_inside[kind][-1] = dataclasses.replace(last, loop_exit=True)
            continue
        if len(group) < 2:
            continue
        steps = [make_step(middlewares[i], proxies[i], members[i], kind) for i in group]
        exits = kind == "after_model" and loop_exit in group
        if exits:  # the loop exit runs last among the after_model hooks
            steps[-1] = dataclasses.replace(steps[-1], loop_exit=True)
        fused = fused_middleware(
            AgentMiddleware, name, kind, steps, channels, plan.token,
            loop_exit=exits, node=node.node)
        fused.trace_policy = members[group[0]].trace_policy  # the group shares one
        inserts.setdefault(min(group), []).append(fused)
    for (kind, group), layer in zip(wraps, plan.wraps, strict=True):
        inserts.setdefault(group[0], []).append(fused_wraps(
            AgentMiddleware, layer.name, kind, list(layer.members),
            [proxies[i] for i in group]))
    ordered: list[Any] = []
    for index, middleware in enumerate(result):
        ordered.extend(inserts.get(index, ()))
        ordered.append(middleware)
    if "after_model" in steps_inside and not any(
            overrides(type(m), v) for m in middlewares
            for v in ("wrap_model_call", "awrap_model_call")):
        # LangChain gives the edge after the model node a way back to the model only
        # when something wraps the model call; the after_model nodes it replaces had one.
        ordered.append(model_edge_class()())
    model_hooks = agent_start = None
    from langgraph.graph import END

    # Where LangChain's edges send a jump to `end`: the first after_agent node.
    exit_node = next((n.node for n in plan.nodes if n.kind == "after_agent"), END)
    end_steps = [make_step(middlewares[i], proxies.get(i, middlewares[i]), members[i],
                           "after_agent") for i in ends]
    if steps_inside.keys() & set(MODEL_HOOKS) or end_steps:
        entry = next((n.node for n in plan.nodes if n.kind == "before_model"), MODEL_NODE)
        model_hooks = ModelHooks(steps_inside.get("before_model", []),
                                 steps_inside.get("after_model", []), channels, plan.token,
                                 loop_entry=entry, end=end_steps, exit_node=exit_node)
    if START_HOOKS[0] in steps_inside:
        agent_start = AgentStart(steps_inside[START_HOOKS[0]], channels, plan.token,
                                 exit_node=exit_node)
    tools_end = None
    if end_steps and not any(step.can_jump for step in end_steps):
        # LangChain's edge after the tools node does not route jumps: hooks that may
        # jump keep to their node there.
        tools_end = ToolsEnd(end_steps, channels, plan.token, exit_node=exit_node)
        plan.ends_in_tools = plan.ends_in_model
    return FusedChain(ordered, plan, model_hooks, agent_start, tools_end)


def create_fused_agent(middleware: Sequence[AgentMiddleware], *,
                       labels: Sequence[str] | None = None, unfusable: Collection[str] = (),
                       into_model: bool = True,
                       prepare_input: Callable[[Any], Any] | None = None,
                       **create_agent_kwargs: Any) -> tuple[Any, FusionPlan]:
    """LangChain's `create_agent` over the compiled chain: (graph, plan).

    With `into_model` (the default) the model-call hooks run inside the model
    node and the `before_agent` hooks inside the input step, where they
    qualify. Should the built graph be unable to run them there (no tools, so
    the model node has no conditional edge to route their jumps), the graph is
    built again with those hooks in their own nodes, and the plan says why.
    `prepare_input` is called with the built graph before the hooks move into
    its input step: what it adds to the input step's writes (the core's record
    of arrived messages) is then there for the `before_agent` hooks to read.
    """
    from langchain.agents import create_agent

    def build(absorb: bool, end_inside: bool = True) -> tuple[Any, FusedChain]:
        compiled = compile_fusion(middleware, labels=labels, unfusable=unfusable,
                                  state_schema=create_agent_kwargs.get("state_schema"),
                                  into_model=absorb, end_inside=end_inside)
        return create_agent(middleware=compiled.middlewares, **create_agent_kwargs), compiled

    graph, compiled = build(into_model)
    if compiled.model_hooks is not None and compiled.model_hooks.end_problem(graph):
        # The after_agent hooks keep to their nodes only (an agent without tools).
        graph, compiled = build(into_model, end_inside=False)
    problem = compiled.problem_with(graph)
    if problem:
        graph, compiled = build(False)
        compiled.plan.note = "; ".join(
            filter(None, [compiled.plan.note, f"hooks keep their nodes: {problem}"]))
    if prepare_input is not None:
        prepare_input(graph)
    inline_lone_calls(graph)  # before `install`: the tools node may be taken over there
    compiled.install(graph)
    quiet_nodes(graph)
    # Each run in a `RunScope` of its own: what a run holds (a thread's sandbox) is let
    # go when it ends, however it ends, as for a graph `antler.agent.create_agent` builds.
    scope_runs(graph)
    return graph, compiled.plan


__all__ = [
    "FUSED_EVENT",
    "MODEL_HOOKS",
    "MODEL_NODE",
    "NODE_HOOKS",
    "UNFUSABLE_ATTRIBUTE",
    "WRAP_HOOKS",
    "AgentStart",
    "FusedChain",
    "FusedHooks",
    "FusedWraps",
    "FusionPlan",
    "HookNode",
    "Member",
    "ModelHooks",
    "ToolsEnd",
    "WrapLayer",
    "absorbable",
    "aexpand_fused_updates",
    "asking_for_hook_events",
    "compile_fusion",
    "create_fused_agent",
    "expand_fused_updates",
    "fuse",
    "plan_for_specs",
    "plan_from_hooks",
    "plan_members",
    "quiet_nodes",
    "stream_modes_for",
    "wants_expansion",
]
