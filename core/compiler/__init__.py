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
`antler.create_agent`; `chain.fuse_into_model` in the operator config). Even
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
(`_SavedAnswers`), so in one process a failing `after_model` hook costs no
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
`--trace` timeline (`antler.tracing`, instrumented before fusion) still lists
every plugin's hook with its own time. When a callback handler listens (a
tracer, LangGraph's `messages` stream), each member runs as a run of its own
named as its unfused node, with that name as `langgraph_node` in its
metadata: the messages it writes and the chat models it calls stream under
its name (only the agent's model streams as `model`). Each fused
node, and the model node with hooks inside, also reports what each member
(and the model) returned on LangGraph's `custom` stream (`{FUSED_EVENT: node,
"hooks": [...]}`), and `expand_fused_updates` turns the node's `updates`
chunk back into one chunk per member hook, named as the unfused graph names
its nodes (`AntlerAgent.stream` does this).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import threading
import time
import types
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_type_hints

from antler.errors import FusionError

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.runnables import RunnableConfig

NODE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")
"""The hooks LangChain turns into graph nodes, in the order one turn reaches them."""

_REVERSED = frozenset({"after_model", "after_agent"})
_JUMP_KEY = "jump_to"
_DESTINATIONS = ("model", "tools", "end")

FUSED_EVENT = "antler_fused_node"
"""Key of the `custom` stream payload a fused node emits with its members' updates."""

UNFUSABLE_ATTRIBUTE = "antler_fusable"
"""Class attribute; `antler_fusable = False` keeps every node hook of the class alone."""

MODEL_NODE = "model"
"""LangChain's model node, where `into_model` compilation runs the model-call hooks."""

MODEL_HOOKS = ("before_model", "after_model")
"""The hook kinds that run once per model call and can run inside the model node."""


# -- the plan: which hooks share which node ------------------------------------------------


@dataclass(frozen=True)
class HookNode:
    """One graph node of one hook kind after compilation."""

    kind: str
    node: str
    members: tuple[str, ...]
    """Plugin labels in the order their hooks run inside the node."""
    alone: str = ""
    """Why a single member stands alone ("" when nothing kept it apart)."""
    absorbed: bool = False
    """The hooks run inside the model node (`node` is "model"), around the model call."""

    @property
    def fused(self) -> bool:
        return len(self.members) > 1 and not self.absorbed


@dataclass
class FusionPlan:
    """Which node hooks were fused into which graph nodes (for `antler chain show`)."""

    nodes: list[HookNode] = field(default_factory=list)
    enabled: bool = True
    note: str = ""
    """Why fusion is off or did not apply, when it is or did not."""
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def fused(self) -> list[HookNode]:
        return [node for node in self.nodes if node.fused]

    @property
    def absorbed(self) -> list[HookNode]:
        """The hook kinds that run inside the model node (before_model, after_model)."""
        return [node for node in self.nodes if node.absorbed]

    @property
    def streamed_nodes(self) -> set[str]:
        """Graph nodes that report their members' updates on the `custom` stream."""
        names = {node.node for node in self.fused}
        return names | {MODEL_NODE} if self.absorbed else names

    @property
    def node_count(self) -> int:
        """Hook nodes in the compiled graph (hooks run inside the model node are not nodes)."""
        return sum(1 for node in self.nodes if not node.absorbed)

    @property
    def unfused_node_count(self) -> int:
        """Hook nodes the graph would have without fusion."""
        return sum(len(node.members) for node in self.nodes)

    def node_of(self, label: str, kind: str) -> str | None:
        """The graph node that runs `label`'s `kind` hook."""
        for node in self.nodes:
            if node.kind == kind and label in node.members:
                return node.node
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled, "note": self.note,
            "hook_nodes": self.node_count, "hook_nodes_unfused": self.unfused_node_count,
            "nodes": [{"kind": n.kind, "node": n.node, "members": list(n.members),
                       "fused": n.fused, "alone": n.alone, "absorbed": n.absorbed}
                      for n in self.nodes],
        }

    def render(self) -> str:
        """A few lines: the fused nodes and the hooks that stand alone, and why."""
        if not self.enabled:
            return f"node fusion: off{' (' + self.note + ')' if self.note else ''}"
        lines = [f"node fusion: {self.unfused_node_count} hook nodes -> {self.node_count}"
                 + (f" ({self.note})" if self.note else "")]
        for node in self.nodes:
            if node.absorbed:
                lines.append(f"  {MODEL_NODE} ({node.kind}, inside the model node): "
                             f"{' -> '.join(node.members)}")
            elif node.fused:
                lines.append(f"  {node.node}: {' -> '.join(node.members)}")
            elif node.alone:
                lines.append(f"  {node.node}: alone ({node.alone})")
        return "\n".join(lines)


@dataclass(frozen=True)
class Member:
    """What planning needs to know about one middleware of the chain."""

    label: str
    name: str
    """The middleware's `name` (LangChain's node names are `<name>.<hook>`)."""
    hooks: frozenset[str]
    alone: dict[str, str] = field(default_factory=dict)
    """Hook kind -> why that hook must keep its own node."""
    can_jump: dict[str, tuple[str, ...]] = field(default_factory=dict)
    trace_policy: Any = None


def plan_members(members: Sequence[Member]) -> list[tuple[str, list[int]]]:
    """Groups of member indexes, per hook kind in graph order, each group one node.

    A group's indexes are in execution order (`after_*` kinds run in reverse
    list order).
    """
    groups: list[tuple[str, list[int]]] = []
    for kind in NODE_HOOKS:
        order = [i for i, member in enumerate(members) if kind in member.hooks]
        if kind in _REVERSED:
            order.reverse()
        kind_groups: list[list[int]] = []
        run: list[int] = []
        for index in order:
            member = members[index]
            if kind in member.alone:
                if run:
                    kind_groups.append(run)
                kind_groups.append([index])
                run = []
                continue
            if run and members[run[0]].trace_policy != member.trace_policy:
                kind_groups.append(run)
                run = []
            run.append(index)
        if run:
            kind_groups.append(run)
        if kind == "before_model" and kind_groups and len(kind_groups[0]) > 1:
            # The loop-entry node has no edge to itself, so a later member's jump to
            # `model` (back to the loop entry) needs the entry to be another node.
            first = kind_groups[0]
            if any("model" in members[i].can_jump.get(kind, ()) for i in first[1:]):
                kind_groups[0:1] = [[first[0]], first[1:]]
        groups.extend((kind, group) for group in kind_groups)
    return groups


Entry = tuple[str, list[int], bool]
"""(hook kind, member indexes in execution order, whether they run inside the model node)."""


def absorbable(members: Sequence[Member], groups: list[tuple[str, list[int]]],
               interrupting_wrap: str = "") -> tuple[set[str], str]:
    """Which model-call hook kinds can run inside the model node, and why others cannot.

    A kind qualifies when none of its hooks must stand alone (an interrupt, a
    `fusable: false`) and none sets a LangSmith `trace_policy` of its own.
    `before_model` also needs `after_model` to qualify (or to be absent): a
    `before_model` jump skips the `after_model` hooks, which only works when
    they run in the same node. `interrupting_wrap` names a `wrap_model_call`
    that may interrupt: resuming would re-run the hooks inside the model node,
    so none go there.
    """
    present = {kind: [i for k, group in groups if k == kind for i in group]
               for kind in MODEL_HOOKS}
    problems: dict[str, str] = {}
    if interrupting_wrap:
        problems = dict.fromkeys(MODEL_HOOKS, f"{interrupting_wrap}.wrap_model_call may call "
                                              "interrupt(), which re-runs the model node")
    for kind, indexes in present.items():
        for index in indexes if kind not in problems else ():
            member = members[index]
            if kind in member.alone:
                problems[kind] = f"{member.label}.{kind} stands alone ({member.alone[kind]})"
                break
            if member.trace_policy is not None:
                problems[kind] = f"{member.label} sets its own trace_policy"
                break
    kinds = {kind for kind in MODEL_HOOKS if present[kind] and kind not in problems}
    if "before_model" in kinds and present["after_model"] and "after_model" not in kinds:
        kinds.discard("before_model")
        problems["before_model"] = "its jumps must skip after_model hooks that keep their nodes"
    note = "; ".join(f"{kind} hooks keep their nodes: {why}"
                     for kind, why in problems.items() if present[kind])
    return kinds, note


def plan_entries(groups: list[tuple[str, list[int]]], into_model: Collection[str],
                 ) -> list[Entry]:
    """`groups` with every group of an `into_model` kind merged into one model-node entry."""
    entries: list[Entry] = []
    for kind, group in groups:
        if kind not in into_model:
            entries.append((kind, group, False))
        elif entries and entries[-1][0] == kind and entries[-1][2]:
            entries[-1][1].extend(group)
        else:
            entries.append((kind, list(group), True))
    return entries


def plan_from_hooks(rows: Iterable[tuple[str, Sequence[str] | None, bool]], *,
                    into_model: bool = False) -> FusionPlan:
    """The fusion plan from declarations alone: (plugin, hooks or None, fusable) rows.

    This is what `antler chain show` can say without importing any middleware;
    the compiled graph may fuse less (a class attribute, an `interrupt` call or a
    jump to `model` found at build time keeps a hook alone). Unknown hooks (None)
    are planned as if the plugin had none. `into_model`: plan the model-call
    hooks inside the model node where they qualify (see `absorbable`).
    """
    members = [Member(label=label, name=label, hooks=frozenset(hooks or ()) & set(NODE_HOOKS),
                      alone={} if fusable else dict.fromkeys(NODE_HOOKS, "fusable: false"))
               for label, hooks, fusable in rows]
    groups = plan_members(members)
    kinds, note = absorbable(members, groups) if into_model else (set(), "")
    entries = plan_entries(groups, kinds)
    return _plan(members, entries, _fused_names(entries, ()), note=note)


def plan_for_specs(specs: Iterable[Any], *, enabled: bool = True, into_model: bool = False,
                   hooks: Callable[[Any], Sequence[str] | None] | None = None) -> FusionPlan:
    """What `antler chain show` prints: the plan for a chain's specs, in list order.

    `enabled` is the config's `chain.fuse`, `into_model` its `chain.fuse_into_model`;
    `hooks` finds a spec's hooks when its manifest does not declare them
    (default: the declaration only).
    """
    if not enabled:
        return FusionPlan(enabled=False, note="chain.fuse: false")
    return plan_from_hooks(((spec.name, hooks(spec) if hooks else spec.hooks, spec.fusable)
                            for spec in specs), into_model=into_model)


def _fused_names(entries: list[Entry], taken: Collection[str]) -> list[str]:
    names, number = [], 0
    for _kind, group, absorbed in entries:
        if len(group) < 2 or absorbed:
            names.append("")
            continue
        number += 1
        name = f"fused_{number}"
        while name in taken:
            name += "_"
        names.append(name)
    return names


def _plan(members: Sequence[Member], entries: list[Entry],
          names: list[str], *, note: str = "") -> FusionPlan:
    nodes = []
    for (kind, group, absorbed), name in zip(entries, names, strict=True):
        if absorbed:
            nodes.append(HookNode(kind, MODEL_NODE, tuple(members[i].label for i in group),
                                  absorbed=True))
        elif len(group) > 1:
            nodes.append(HookNode(kind, f"{name}.{kind}",
                                  tuple(members[i].label for i in group)))
        else:
            member = members[group[0]]
            nodes.append(HookNode(kind, f"{member.name}.{kind}", (member.label,),
                                  member.alone.get(kind, "")))
    return FusionPlan(nodes, note=note)


# -- compiling middleware lists ------------------------------------------------------------


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

    def install(self, graph: Any) -> Any:
        """Run the absorbed hooks inside `graph`'s model node; return `graph`.

        Raises `FusionError` when the graph cannot route their jumps (see
        `ModelHooks.problem_with`); the graph is then unchanged, and unusable
        with these middlewares: build it again with `into_model=False`.
        """
        if self.model_hooks is not None:
            self.model_hooks.install(graph)
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
                   state_schema: type | None = None, into_model: bool = False) -> FusedChain:
    """Like `fuse`, but also return the `FusionPlan`.

    `into_model` also takes the `before_model` and `after_model` hooks out of
    their nodes, where they qualify (`absorbable`), for `FusedChain.install`
    to run inside the model node.
    """
    from langchain.agents.middleware import AgentMiddleware, AgentState

    middlewares = list(middlewares)
    members = [_member(m, labels[i] if labels and i < len(labels) else m.name,
                       unfusable) for i, m in enumerate(middlewares)]
    groups = plan_members(members)
    channels, problem = _state_channels(middlewares, state_schema or AgentState)
    if problem:
        single: list[Entry] = [(kind, [i], False) for kind, group in groups for i in group]
        plan = _plan(members, single, [""] * len(single), note=problem)
        return FusedChain(middlewares, plan)
    kinds, note = (absorbable(members, groups, _interrupting_wrap(middlewares, members))
                   if into_model else (set(), ""))
    entries = plan_entries(groups, kinds)
    names = _fused_names(entries, {m.name for m in middlewares})
    plan = _plan(members, entries, names, note=note)

    taken_kinds: dict[int, set[str]] = {}
    for kind, group, absorbed in entries:
        if len(group) > 1 or absorbed:
            for index in group:
                taken_kinds.setdefault(index, set()).add(kind)
    proxies = {index: _proxy(middlewares[index], frozenset(kinds))
               for index, kinds in taken_kinds.items()}
    result: list[Any] = [proxies.get(i, m) for i, m in enumerate(middlewares)]

    loop_exit = _first(members, "after_model")
    inserts: dict[int, list[Any]] = {}
    steps_inside: dict[str, list[_Step]] = {}
    for (kind, group, absorbed), name, node in zip(entries, names, plan.nodes, strict=True):
        if absorbed:
            steps_inside[kind] = [_step(middlewares[i], proxies[i], members[i], kind)
                                  for i in group]
            if kind == "after_model":
                last = steps_inside[kind][-1]
                steps_inside[kind][-1] = dataclasses.replace(last, loop_exit=True)
            continue
        if len(group) < 2:
            continue
        steps = [_step(middlewares[i], proxies[i], members[i], kind) for i in group]
        exits = kind == "after_model" and loop_exit in group
        if exits:  # the loop exit runs last among the after_model hooks
            steps[-1] = dataclasses.replace(steps[-1], loop_exit=True)
        fused = _fused_middleware(
            AgentMiddleware, name, kind, steps, channels, plan.token,
            loop_exit=exits, node=node.node)
        fused.trace_policy = members[group[0]].trace_policy  # the group shares one
        inserts.setdefault(min(group), []).append(fused)
    ordered: list[Any] = []
    for index, middleware in enumerate(result):
        ordered.extend(inserts.get(index, ()))
        ordered.append(middleware)
    if "after_model" in steps_inside and not any(
            _overrides(type(m), v) for m in middlewares
            for v in ("wrap_model_call", "awrap_model_call")):
        # LangChain gives the edge after the model node a way back to the model only
        # when something wraps the model call; the after_model nodes it replaces had one.
        ordered.append(_model_edge_class()())
    model_hooks = None
    if steps_inside:
        entry = next((n.node for n in plan.nodes if n.kind == "before_model"), MODEL_NODE)
        model_hooks = ModelHooks(steps_inside.get("before_model", []),
                                 steps_inside.get("after_model", []), channels, plan.token,
                                 loop_entry=entry)
    return FusedChain(ordered, plan, model_hooks)


def create_fused_agent(middleware: Sequence[AgentMiddleware], *,
                       labels: Sequence[str] | None = None, unfusable: Collection[str] = (),
                       into_model: bool = True, **create_agent_kwargs: Any,
                       ) -> tuple[Any, FusionPlan]:
    """LangChain's `create_agent` over the compiled chain: (graph, plan).

    With `into_model` (the default) the model-call hooks run inside the model
    node where they qualify. Should the built graph be unable to route their
    jumps (no tools, so the model node has no conditional edge), the graph is
    built again with those hooks in their own nodes, and the plan says why.
    """
    from langchain.agents import create_agent

    def build(absorb: bool) -> tuple[Any, FusedChain]:
        compiled = compile_fusion(middleware, labels=labels, unfusable=unfusable,
                                  state_schema=create_agent_kwargs.get("state_schema"),
                                  into_model=absorb)
        return create_agent(middleware=compiled.middlewares, **create_agent_kwargs), compiled

    graph, compiled = build(into_model)
    if compiled.model_hooks is not None:
        problem = compiled.model_hooks.problem_with(graph)
        if problem:
            graph, compiled = build(False)
            compiled.plan.note = "; ".join(
                filter(None, [compiled.plan.note, f"model-call hooks keep their nodes: {problem}"]))
        else:
            compiled.install(graph)
    return graph, compiled.plan


def _interrupting_wrap(middlewares: Sequence[Any], members: Sequence[Member]) -> str:
    """The label of a middleware whose model-call wrapper may interrupt ("" if none)."""
    for middleware, member in zip(middlewares, members, strict=True):
        cls = type(middleware)
        if any(_mentions_interrupt(getattr(cls, variant)) for variant in
               ("wrap_model_call", "awrap_model_call") if _overrides(cls, variant)):
            return member.label
    return ""


def _first(members: Sequence[Member], kind: str) -> int | None:
    return next((i for i, m in enumerate(members) if kind in m.hooks), None)


def _overrides(cls: type, variant: str) -> bool:
    from langchain.agents.middleware import AgentMiddleware

    mine = getattr(cls, variant, None)
    return mine is not None and mine is not getattr(AgentMiddleware, variant)


def _member(middleware: Any, label: str, unfusable: Collection[str]) -> Member:
    cls = type(middleware)
    hooks = frozenset(kind for kind in NODE_HOOKS
                      if _overrides(cls, kind) or _overrides(cls, "a" + kind))
    alone: dict[str, str] = {}
    can_jump: dict[str, tuple[str, ...]] = {}
    for kind in hooks:
        if label in unfusable:
            alone[kind] = "fusable: false"
        elif not hasattr(middleware, "__dict__"):
            alone[kind] = "instance has no __dict__ for its proxy"
        elif getattr(cls, UNFUSABLE_ATTRIBUTE, True) is False:
            alone[kind] = f"{UNFUSABLE_ATTRIBUTE} = False"
        elif any(_mentions_interrupt(getattr(cls, v)) for v in (kind, "a" + kind)
                 if _overrides(cls, v)):
            alone[kind] = "may call interrupt()"
        can_jump[kind] = _declared_jumps(cls, kind)
    return Member(label, middleware.name, hooks, alone, can_jump,
                  getattr(middleware, "trace_policy", None))


def _declared_jumps(cls: type, kind: str) -> tuple[str, ...]:
    # LangChain's rule (factory._get_can_jump_to): the sync hook's declaration if it
    # is overridden, else the async one's.
    for variant in (kind, "a" + kind):
        if _overrides(cls, variant):
            declared = getattr(getattr(cls, variant), "__can_jump_to__", None)
            if declared:
                return tuple(declared)
    return ()


def _mentions_interrupt(function: Any) -> bool:
    """Whether `function`, or one it wraps or closes over, names `interrupt`.

    Decorators reach the user's function through `__wrapped__` or a closure
    (LangChain's `@after_model` makes a class whose hook calls the function).
    """
    seen: set[int] = set()
    pending = [function]
    while pending:
        function = pending.pop()
        if function is None or id(function) in seen:
            continue
        seen.add(id(function))
        code = getattr(function, "__code__", None)
        if code is not None and _code_mentions(code, "interrupt"):
            return True
        pending.append(getattr(function, "__wrapped__", None))
        pending.append(getattr(function, "__func__", None))
        for cell in getattr(function, "__closure__", None) or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(content):
                pending.append(content)
    return False


def _code_mentions(code: types.CodeType, name: str) -> bool:
    if name in code.co_names:
        return True
    return any(isinstance(c, types.CodeType) and _code_mentions(c, name) for c in code.co_consts)


_PROXY_CLASSES: dict[tuple[type, str, frozenset[str]], type] = {}


class _HiddenHook:
    """A hook the proxy class hides from `create_agent`, which an instance still reaches.

    `create_agent` looks a hook up on the class to decide whether a node is
    needed: there it finds `AgentMiddleware`'s no-op. The member's own code
    (an async hook that delegates to the sync one, say) and the fused node look
    it up on the instance and get the real hook, bound to it.
    """

    __slots__ = ("base", "function")

    def __init__(self, function: Any, base: Any) -> None:
        self.function = function
        self.base = base

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self.base
        bind = getattr(self.function, "__get__", None)
        return bind(instance, owner) if bind is not None else self.function


def _proxy(middleware: Any, kinds: frozenset[str]) -> Any:
    """The middleware under a class that no longer shows `create_agent` the given hooks.

    The proxy shares the middleware's instance dictionary, so the two are one
    object as far as state goes: what a hook stores on `self` is on the
    caller's instance, and what the caller changes there the hooks see.
    """
    from langchain.agents.middleware import AgentMiddleware

    cls, name = type(middleware), middleware.name
    key = (cls, name, kinds)
    proxy_class = _PROXY_CLASSES.get(key)
    if proxy_class is None:
        body: dict[str, Any] = {"name": property(lambda self: name),
                                "__antler_fused_kinds__": kinds,
                                "__module__": cls.__module__}
        for kind in kinds:
            for variant in (kind, "a" + kind):
                base = getattr(AgentMiddleware, variant)
                body[variant] = (_HiddenHook(getattr(cls, variant), base)
                                 if _overrides(cls, variant) else base)
        proxy_class = type(cls.__name__, (cls,), body)
        _PROXY_CLASSES[key] = proxy_class
    proxy: Any = object.__new__(proxy_class)
    proxy.__dict__ = middleware.__dict__
    return proxy


# -- the fused node ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Channel:
    kind: str  # "reduce" | "last" | "ephemeral"
    template: Any
    messages: bool = False


def _state_channels(middlewares: Sequence[Any], base: type
                    ) -> tuple[dict[str, _Channel], str]:
    """The merged state's channels, as `create_agent` merges the schemas; or why not."""
    from typing import TypedDict

    from langgraph.channels import (
        BinaryOperatorAggregate,
        EphemeralValue,
        LastValue,
        UntrackedValue,
    )
    from langgraph.graph import StateGraph

    hints: dict[type, dict[str, Any]] = {}
    for schema in [*(m.state_schema for m in middlewares), base]:
        hints.pop(schema, None)  # a schema listed twice counts at its last position
        hints[schema] = get_type_hints(schema, include_extras=True)
    merged: dict[str, Any] = {}
    for fields in hints.values():
        merged.update(fields)
    graph = StateGraph(TypedDict("FusionView", merged))  # type: ignore[operator]
    channels: dict[str, _Channel] = {}
    for key, channel in graph.channels.items():
        if isinstance(channel, BinaryOperatorAggregate):
            channels[key] = _Channel("reduce", channel, _is_add_messages(channel.operator))
        elif isinstance(channel, EphemeralValue):
            channels[key] = _Channel("ephemeral", channel)
        elif type(channel) in (LastValue, UntrackedValue):
            channels[key] = _Channel("last", channel)
        else:
            return {}, (f"state key {key!r} uses a {type(channel).__name__} channel, which "
                        "the fused node cannot replay; fusion skipped")
    return channels, ""


def _is_add_messages(operator: Any) -> bool:
    from langgraph.graph.message import add_messages

    if operator is add_messages:
        return True
    inner = operator.func if isinstance(operator, functools.partial) else None
    return getattr(inner, "__name__", "") == "add_messages" and \
        getattr(inner, "__module__", "") == "langgraph.graph.message"


def _as_messages(value: Any) -> Any:
    """An `add_messages` write as message objects, so the view and the graph share ids."""
    from langchain_core.messages import BaseMessage, BaseMessageChunk, convert_to_messages
    from langchain_core.messages.utils import message_chunk_to_message

    if _is_overwrite(value):
        return value
    items = value if isinstance(value, list) else [value]
    if all(isinstance(m, BaseMessage) and not isinstance(m, BaseMessageChunk) for m in items):
        return value
    # `add_messages` turns a chunk into a new message (and gives an id-less one a
    # fresh id): done once here, the view and the graph hold the same message.
    return [message_chunk_to_message(m) for m in convert_to_messages(items)]


def _is_overwrite(value: Any) -> bool:
    from langgraph.types import Overwrite

    return isinstance(value, Overwrite) or (isinstance(value, dict) and (
        "__overwrite__" in value or value.get("type") == "__overwrite__"))


@dataclass(frozen=True)
class _Step:
    label: str
    node: str  # the member's own node name in an unfused graph
    call: Any  # a RunnableCallable, built exactly as create_agent builds a hook node
    can_jump: tuple[str, ...]
    traced: Any = None
    """The same hook as a run of its own, named as its node (used when callbacks listen)."""
    loop_exit: bool = False
    """The last `after_model` hook of a turn: LangChain's edge routes whatever it writes
    to `jump_to`, declared or not."""


def _step(original: Any, proxy: Any, member: Member, kind: str) -> _Step:
    from langgraph._internal._runnable import RunnableCallable

    cls = type(original)
    sync = getattr(proxy, kind) if _overrides(cls, kind) else None
    async_ = getattr(proxy, "a" + kind) if _overrides(cls, "a" + kind) else None
    node = f"{member.name}.{kind}"
    return _Step(member.label, node, RunnableCallable(sync, async_, trace=False),
                 member.can_jump.get(kind, ()),
                 traced=RunnableCallable(sync, async_, name=node, trace=True))


def _fused_middleware(base: type, name: str, kind: str, steps: list[_Step],
                      channels: dict[str, _Channel], token: str, *, loop_exit: bool,
                      node: str) -> Any:
    targets = {t for step in steps for t in step.can_jump}
    can_jump = [t for t in _DESTINATIONS if t in targets]

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
def _model_edge_class() -> type:
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
def _fused_class(base: type) -> type:
    # Defined lazily so that importing this module does not import langchain.
    return type("FusedHooks", (FusedHooks, base), {"__module__": __name__})


class _StepRunner:
    """A graph node that runs steps (hooks, or the model node) one after another.

    Each step sees the state the earlier ones left (`_Run`); the node returns
    their writes as one update.
    """

    def __init__(self, channels: dict[str, _Channel], token: str, *, node: str,
                 loop_exit: bool, can_jump: tuple[str, ...]) -> None:
        self.channels = channels
        self.token = token
        self.node = node
        self.loop_exit = loop_exit
        self.can_jump = can_jump
        self.ephemeral = tuple(k for k, c in channels.items() if c.kind == "ephemeral")

    def _steps(self) -> Iterable[_Step]:
        raise NotImplementedError

    def run(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        run = _Run(self, state)
        for step in self._steps():
            started = time.perf_counter()
            if run.absorb(step, _invoke(step, run.member_state(), config), started):
                break
        return run.finish(runtime)

    async def arun(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        run = _Run(self, state)
        for step in self._steps():
            started = time.perf_counter()
            if run.absorb(step, await _ainvoke(step, run.member_state(), config), started):
                break
        return run.finish(runtime)


class FusedHooks(_StepRunner):
    """One graph node that runs several plugins' hooks of one kind in LangChain's order.

    Mixed into `AgentMiddleware` when a chain is compiled; see the module docs.
    """

    tools: Sequence[Any] = ()

    def __init__(self, name: str, kind: str, steps: list[_Step],
                 channels: dict[str, _Channel], token: str, *, loop_exit: bool, node: str,
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

    def _steps(self) -> Iterable[_Step]:
        return self.steps


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
                 token: str, *, loop_entry: str) -> None:
        targets = {t for step in (*before, *after) for t in step.can_jump}
        # The model node is the loop's exit: LangChain's edge after it reads `jump_to`.
        super().__init__(channels, token, node=MODEL_NODE, loop_exit=True,
                         can_jump=tuple(t for t in _DESTINATIONS if t in targets))
        self.before = before
        self.after = after
        self.loop_entry = loop_entry
        self.model: _Step | None = None
        self.answers = _SavedAnswers()

    def problem_with(self, graph: Any) -> str:
        """Why the absorbed hooks cannot run in `graph`'s model node ("" when they can)."""
        from langgraph._internal._runnable import RunnableCallable

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
        return ""

    def install(self, graph: Any) -> None:
        """Make `graph`'s model node run the hooks around LangChain's model node."""
        from langgraph._internal._runnable import RunnableCallable

        problem = self.problem_with(graph)
        if problem:
            raise FusionError(f"cannot run before_model/after_model hooks inside the model "
                              f"node: {problem}; compile with into_model=False")
        node = graph.nodes[MODEL_NODE]
        self.model = _Step(MODEL_NODE, MODEL_NODE, _ModelCall(node.bound, self.answers), ())
        graph.nodes[MODEL_NODE] = node.copy(
            {"bound": RunnableCallable(self.run, self.arun, trace=False)})

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
    from langgraph._internal._constants import (
        CONFIG_KEY_CHECKPOINT_NS,
        CONFIG_KEY_TASK_ID,
        CONFIG_KEY_THREAD_ID,
    )

    configurable = config.get("configurable") or {}
    task = configurable.get(CONFIG_KEY_TASK_ID)
    if not task:
        return None
    return (configurable.get(CONFIG_KEY_THREAD_ID), configurable.get(CONFIG_KEY_CHECKPOINT_NS),
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


def _member_config(step: _Step, config: RunnableConfig) -> RunnableConfig:
    """The node's config, with `langgraph_node` naming the member's own (unfused) node.

    Chat models and runnables a hook calls inherit this metadata, so their
    streamed messages and traces say which plugin's hook made them, as in
    LangChain's graph: a consumer that keeps the `model` node's tokens (the
    answer) does not get a summary or title model's tokens with them.
    """
    if step.node == MODEL_NODE:
        return config
    metadata = {**(config.get("metadata") or {}), "langgraph_node": step.node}
    return {**config, "metadata": metadata}


def _listened(config: RunnableConfig) -> bool:
    """Whether a callback handler (a tracer, LangGraph's `messages` stream) is listening."""
    callbacks = config.get("callbacks")
    handlers = getattr(callbacks, "handlers", callbacks)
    return bool(handlers)


def _runnable(step: _Step, config: RunnableConfig) -> Any:
    # With a listener, each hook is a run of its own named as its unfused node, as
    # LangGraph makes each node a run: traces nest under it and the `messages`
    # stream reports what the hook wrote under its name, in its place. Without
    # one, that bookkeeping is skipped.
    return step.traced if step.traced is not None and _listened(config) else step.call


def _invoke(step: _Step, state: dict[str, Any], config: RunnableConfig) -> Any:
    from langchain_core.runnables.config import var_child_runnable_config

    member = _member_config(step, config)
    token = var_child_runnable_config.set(member)
    try:
        return _runnable(step, member).invoke(state, member)
    finally:
        var_child_runnable_config.reset(token)


async def _ainvoke(step: _Step, state: dict[str, Any], config: RunnableConfig) -> Any:
    from langchain_core.runnables.config import var_child_runnable_config

    member = _member_config(step, config)
    token = var_child_runnable_config.set(member)
    try:
        return await _runnable(step, member).ainvoke(state, member)
    finally:
        var_child_runnable_config.reset(token)


class _Run:
    """One execution of a fused node: the members' view of the state and their writes."""

    __slots__ = ("events", "extra", "jumped", "last_writer", "node", "step", "view", "writes")

    def __init__(self, node: _StepRunner, state: Any) -> None:
        self.node = node
        self.view: dict[str, Any] = dict(state)
        self.writes: dict[str, list[Any]] = {}
        self.last_writer: dict[str, int] = {}
        self.extra: list[Any] = []
        self.events: list[dict[str, Any]] = []
        self.step = -1
        self.jumped = False

    def member_state(self) -> dict[str, Any]:
        # Each hook node gets a fresh dict from LangGraph; so does each member here.
        return dict(self.view)

    def absorb(self, step: _Step, result: Any, started: float) -> bool:
        """Apply one member's result to the view; True when the group ends here."""
        self.step += 1
        took = (time.perf_counter() - started) * 1000
        if result is None:  # the common case: nothing to apply, a superstep passes
            self.events.append({"plugin": step.label, "node": step.node, "update": None,
                                "duration_ms": took})
            for key in self.node.ephemeral:
                self.view.pop(key, None)
            return False
        pairs, extra, stop = _updates_of(result, step.label)
        channels = self.node.channels
        # As LangGraph's `updates` stream shows a node's write: keys the state has.
        self.events.append({"plugin": step.label, "node": step.node,
                            "update": _shown([p for p in pairs if p[0] in channels]),
                            "duration_ms": took})
        self.extra.extend(extra)
        grouped: dict[str, list[Any]] = {}
        for key, value in pairs:
            channel = channels.get(key)
            if channel is None:
                continue  # LangGraph drops keys the state does not have, silently
            grouped.setdefault(key, []).append(_as_messages(value) if channel.messages
                                               else value)
        view = self.view
        for key, values in grouped.items():
            template = channels[key].template
            live = template.from_checkpoint(view[key]) if key in view else template.copy()
            live.update(values)
            if live.is_available():
                view[key] = live.get()
            else:
                view.pop(key, None)
            self.writes.setdefault(key, []).extend(values)
            self.last_writer[key] = self.step
        for key in self.node.ephemeral:
            if key not in grouped:
                view.pop(key, None)  # a superstep passed: an ephemeral value is gone
        if _JUMP_KEY in grouped and view.get(_JUMP_KEY) in _DESTINATIONS:
            target = view[_JUMP_KEY]
            if target in step.can_jump:
                self.jumped = True
                return True
            if step.can_jump and not step.loop_exit:
                raise _jump_error(step, target)
        return stop

    def finish(self, runtime: Any) -> Any:
        node, view = self.node, self.view
        emitted: dict[str, list[Any]] = {}
        for key, values in self.writes.items():
            channel = node.channels[key]
            if channel.kind == "reduce":
                emitted[key] = ([_overwrite(view[key])] if any(_is_overwrite(v) for v in values)
                                else values)
            elif channel.kind == "last":
                emitted[key] = [values[-1]]
            elif self.last_writer[key] == self.step and key in view:
                if (key == _JUMP_KEY and not self.jumped and not node.loop_exit
                        and node.can_jump and view[key] in _DESTINATIONS):
                    continue  # see the module docs: an undeclared jump is not routed
                emitted[key] = [view[key]]
        writer = getattr(runtime, "stream_writer", None)
        if writer is not None:
            writer({FUSED_EVENT: node.node, "token": node.token, "hooks": self.events})
        if not self.extra and all(len(values) == 1 for values in emitted.values()):
            return {key: values[0] for key, values in emitted.items()} or None
        from langgraph.types import Command

        rounds = max((len(values) for values in emitted.values()), default=0)
        commands: list[Any] = [
            Command(update={k: v[i] for k, v in emitted.items() if i < len(v)})
            for i in range(rounds)
        ]
        return commands + self.extra


def _overwrite(value: Any) -> Any:
    from langgraph.types import Overwrite

    return Overwrite(value)


def _jump_error(step: _Step, target: str) -> Exception:
    from langgraph.errors import InvalidUpdateError

    return InvalidUpdateError(
        f"{step.node} (plugin {step.label!r}) set jump_to={target!r} but its hook declares "
        f"can_jump_to={list(step.can_jump)}; declare the destination with "
        "@hook_config(can_jump_to=[...])"
    )


def _updates_of(result: Any, label: str) -> tuple[list[tuple[str, Any]], list[Any], bool]:
    """(state writes, Commands to pass on, whether the group ends) from a hook's result."""
    from langgraph.types import Command

    if result is None:
        return [], [], False
    if isinstance(result, dict):
        return list(result.items()), [], False
    if isinstance(result, Command):
        if result.graph == Command.PARENT:
            return [], [result], True
        update = result.update
        pairs = (list(update.items()) if isinstance(update, dict)
                 else [tuple(p) for p in update] if isinstance(update, (list, tuple))
                 else [] if update is None else None)
        if pairs is None:
            raise _invalid(update, label)
        extra = [Command(goto=result.goto)] if result.goto else []
        return pairs, extra, False
    if isinstance(result, (list, tuple)) and result and \
            any(isinstance(r, Command) for r in result):
        pairs_all: list[tuple[str, Any]] = []
        extra_all: list[Any] = []
        stop = False
        for item in result:
            pairs, extra, ends = _updates_of(item, label)
            pairs_all.extend(pairs)
            extra_all.extend(extra)
            stop = stop or ends
        return pairs_all, extra_all, stop
    from langgraph._internal._fields import get_cached_annotated_keys, get_update_as_tuples

    keys = get_cached_annotated_keys(type(result))
    if keys:  # a dataclass or model instance, as LangGraph accepts from a node
        return list(get_update_as_tuples(result, keys)), [], False
    raise _invalid(result, label)


def _invalid(value: Any, label: str) -> Exception:
    from langgraph.errors import InvalidUpdateError

    return InvalidUpdateError(f"a hook of plugin {label!r} returned {value!r}; expected a dict "
                              "of state updates, a Command or None")


def _shown(pairs: list[tuple[str, Any]]) -> Any:
    """A member's update as LangGraph's `updates` stream would show its node's."""
    if not pairs:
        return None
    keys = [key for key, _ in pairs]
    if len(set(keys)) == len(keys):
        return dict(pairs)
    return [{key: value} for key, value in pairs]


# -- streams -------------------------------------------------------------------------------


def expand_fused_updates(chunks: Iterable[Any], plan: FusionPlan, stream_mode: Any,
                         ) -> Iterator[Any]:
    """Turn each fused node's `updates` chunk back into one chunk per member hook.

    `chunks` must come from a stream that includes the `custom` mode (see
    `stream_modes_for`); `stream_mode` is what the caller asked for, so the
    output has the shape the caller expects. Custom events of this plan's fused
    nodes are dropped unless the caller asked for `custom`.
    """
    fused = plan.streamed_nodes
    single = isinstance(stream_mode, str)
    wanted = {stream_mode} if single else set(stream_mode)
    pending: dict[str, list[dict[str, Any]]] = {}
    for chunk in chunks:
        mode, payload = chunk if isinstance(chunk, tuple) and len(chunk) == 2 else (None, chunk)
        if mode == "custom" and isinstance(payload, dict) and \
                payload.get("token") == plan.token and payload.get(FUSED_EVENT) in fused:
            pending[payload[FUSED_EVENT]] = payload["hooks"]
            if "custom" not in wanted:
                continue
        elif mode == "updates" and isinstance(payload, dict) and len(payload) == 1:
            (node, _update), = payload.items()
            if node in pending:
                for event in pending.pop(node):
                    expanded = {event["node"]: event["update"]}
                    yield expanded if single else ("updates", expanded)
                continue
        if mode is None:
            yield payload
        elif mode in wanted:
            yield payload if single else (mode, payload)


def stream_modes_for(stream_mode: Any) -> Any:
    """The modes to ask LangGraph for so that `expand_fused_updates` can work."""
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    return modes if "custom" in modes else [*modes, "custom"]


def wants_expansion(plan: FusionPlan | None, stream_mode: Any) -> bool:
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    return plan is not None and bool(plan.streamed_nodes) and "updates" in modes


__all__ = [
    "FUSED_EVENT",
    "MODEL_HOOKS",
    "MODEL_NODE",
    "NODE_HOOKS",
    "UNFUSABLE_ATTRIBUTE",
    "FusedChain",
    "FusedHooks",
    "FusionPlan",
    "HookNode",
    "Member",
    "ModelHooks",
    "absorbable",
    "compile_fusion",
    "create_fused_agent",
    "expand_fused_updates",
    "fuse",
    "plan_for_specs",
    "plan_from_hooks",
    "plan_members",
    "stream_modes_for",
    "wants_expansion",
]
