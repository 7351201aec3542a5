"""The fusion plan (`FusionPlan`): which hooks of a chain share which graph node.

From the hooks each member implements (or its manifest declares), in chain
order, `plan_members` groups consecutive node hooks of one kind into runs that
one node can carry, `absorbable` says which kinds can run inside the model node,
and `FusionPlan` records the result: every fused node, its members, why a hook
stands alone, and which unfused node each hook stands for. Nothing here imports
LangChain: `antler chain show` plans from specs alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

NODE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")
"""The hooks LangChain turns into graph nodes, in the order one turn reaches them."""


WRAP_HOOKS = ("wrap_model_call", "wrap_tool_call")
"""The hooks LangChain nests around the model call and around each tool execution."""


_REVERSED = frozenset({"after_model", "after_agent"})


JUMP_KEY = "jump_to"


DESTINATIONS = ("model", "tools", "end")


FUSED_EVENT = "antler_fused_node"
"""Key of the `custom` stream payload a fused node emits with its members' updates."""

HOOK_EVENTS_KEY = "antler_hook_events"
"""`configurable` key asking fused nodes for their members' updates: the plan's token.

The events hold every hook's update, private channels included, so a fused
node writes them only for a run whose config carries its plan's token, which
never leaves the process: `AntlerAgent.stream` asks for them to show per-hook
`updates`; a client of LangGraph Server, whatever it puts in its config or
stream modes, never receives them.
"""


def hook_events_asked(config: Any, token: str) -> bool:
    """Whether the run of `config` asked for the hook events of the plan with `token`."""
    configurable = config.get("configurable") if isinstance(config, dict) else None
    return isinstance(configurable, dict) and configurable.get(HOOK_EVENTS_KEY) == token


UNFUSABLE_ATTRIBUTE = "antler_fusable"
"""Class attribute; `antler_fusable = False` keeps every node hook of the class alone."""


MODEL_NODE = "model"
"""LangChain's model node, where `into_model` compilation runs the model-call hooks."""


TOOLS_NODE = "tools"
"""LangChain's tools node, which also runs the `after_agent` hooks when a lone tool call ends
the run."""


MODEL_HOOKS = ("before_model", "after_model")
"""The hook kinds that run once per model call and can run inside the model node."""


START_NODE = "__start__"
"""LangGraph's input step, where `into_model` compilation runs the `before_agent` hooks."""


START_HOOKS = ("before_agent",)
"""The hook kind that runs once per run and can run inside the input step."""


END_HOOKS = ("after_agent",)
"""The hook kind that also runs inside the model node when the model node ends the run."""


def host_node(kind: str) -> str:
    """The existing graph node an absorbed hook of `kind` runs inside."""
    return START_NODE if kind in START_HOOKS else MODEL_NODE


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
    """The hooks run inside an existing node (`node`): the model node around the model
    call (`before_model`, `after_model`), or the input step (`before_agent`)."""

    @property
    def fused(self) -> bool:
        return len(self.members) > 1 and not self.absorbed


@dataclass(frozen=True)
class WrapLayer:
    """Several plugins' wrap hooks of one kind run as one layer (see `antler.compiler.wraps`)."""

    kind: str
    name: str
    """The layer's middleware name (LangSmith names its span `<name>.<kind>`)."""
    members: tuple[str, ...]
    """Plugin labels, outermost first."""


@dataclass
class FusionPlan:
    """Which node hooks were fused into which graph nodes (for `antler chain show`)."""

    nodes: list[HookNode] = field(default_factory=list)
    wraps: list[WrapLayer] = field(default_factory=list)
    """Runs of wrap hooks that share one layer."""
    enabled: bool = True
    note: str = ""
    """Why fusion is off or did not apply, when it is or did not."""
    ends_in_model: tuple[str, ...] = ()
    """The `after_agent` hooks (labels, in execution order) that also run inside the model
    node when the model node ends the run; their nodes remain for the other ways a run
    ends (parallel `return_direct` tools, a `before_agent` jump)."""
    ends_in_tools: tuple[str, ...] = ()
    """The same hooks, when they also run inside the tools node when a lone
    `return_direct` tool call ends the run (`ToolsEnd`)."""
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def fused(self) -> list[HookNode]:
        return [node for node in self.nodes if node.fused]

    @property
    def absorbed(self) -> list[HookNode]:
        """The hook kinds that run inside an existing node (the model node, the input step)."""
        return [node for node in self.nodes if node.absorbed]

    @property
    def streamed_nodes(self) -> set[str]:
        """Graph nodes that report their members' updates on the `custom` stream."""
        names = {node.node for node in self.fused} | {node.node for node in self.absorbed}
        if self.ends_in_model:
            names.add(MODEL_NODE)
        if self.ends_in_tools:
            names.add(TOOLS_NODE)
        return names

    @property
    def node_count(self) -> int:
        """Hook nodes in the compiled graph (hooks run inside existing nodes are not nodes)."""
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
            "wrap_layers": [{"kind": w.kind, "name": w.name, "members": list(w.members)}
                            for w in self.wraps],
            "after_agent_in_model": list(self.ends_in_model),
            "after_agent_in_tools": list(self.ends_in_tools),
        }

    def render(self) -> str:
        """A few lines: the fused nodes and the hooks that stand alone, and why."""
        if not self.enabled:
            return f"node fusion: off{' (' + self.note + ')' if self.note else ''}"
        lines = [f"node fusion: {self.unfused_node_count} hook nodes -> {self.node_count}"
                 + (f" ({self.note})" if self.note else "")]

        def other_end(node: HookNode) -> str:
            """After_agent hooks run in one place per run: say when it is this node."""
            ends_elsewhere = node.kind == "after_agent" and (self.ends_in_model
                                                              or self.ends_in_tools)
            return " (when the run ends any other way)" if ends_elsewhere else ""

        for node in self.nodes:
            if node.absorbed:
                where = "the input step" if node.node == START_NODE else "the model node"
                lines.append(f"  {node.node} ({node.kind}, inside {where}): "
                             f"{' -> '.join(node.members)}")
            elif node.fused:
                lines.append(f"  {node.node}: {' -> '.join(node.members)}{other_end(node)}")
            elif node.alone:
                lines.append(f"  {node.node}: alone ({node.alone}){other_end(node)}")
        if self.ends_in_model:
            lines.append(f"  {MODEL_NODE} (after_agent, inside the model node when the model "
                         f"ends the run): {' -> '.join(self.ends_in_model)}")
        if self.ends_in_tools:
            lines.append(f"  {TOOLS_NODE} (after_agent, inside the tools node when a lone "
                         f"return_direct call ends the run): {' -> '.join(self.ends_in_tools)}")
        for layer in self.wraps:
            lines.append(f"  {layer.kind} (one layer): {' -> '.join(layer.members)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Member:
    """What planning needs to know about one middleware of the chain."""

    label: str
    name: str
    """The middleware's `name` (LangChain's node names are `<name>.<hook>`)."""
    hooks: frozenset[str]
    """Its node hooks and wrap hooks (`NODE_HOOKS`, `WRAP_HOOKS`)."""
    alone: dict[str, str] = field(default_factory=dict)
    """Hook kind -> why that hook must keep its own node (or wrap layer)."""
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


def plan_wraps(members: Sequence[Member]) -> list[tuple[str, list[int]]]:
    """Runs of two or more wrap hooks of one kind that one layer carries: (kind, indexes).

    Adjacency is within one kind's chain (LangChain nests only the middlewares
    that have that hook), outermost first. A run splits where the `trace_policy`
    changes (the layer's own LangSmith span uses its first member's) and around
    a member whose hook must stand alone (`fusable: false`).
    """
    groups: list[tuple[str, list[int]]] = []
    for kind in WRAP_HOOKS:
        run: list[int] = []
        runs = [run]
        for index, member in enumerate(members):
            if kind not in member.hooks:
                continue
            if kind in member.alone:
                run = []
                runs.append(run)
                continue
            if run and members[run[0]].trace_policy != member.trace_policy:
                run = []
                runs.append(run)
            run.append(index)
        groups.extend((kind, group) for group in runs if len(group) > 1)
    return groups


def wrap_layers(members: Sequence[Member], groups: list[tuple[str, list[int]]],
                 taken: Collection[str]) -> list[WrapLayer]:
    layers = []
    for number, (kind, group) in enumerate(groups, start=1):
        name = f"fused_wraps_{number}"
        while name in taken:
            name += "_"
        layers.append(WrapLayer(kind, name, tuple(members[i].label for i in group)))
    return layers


Entry = tuple[str, list[int], bool]
"""(hook kind, member indexes in execution order, whether they run inside the model node)."""


def absorbable(members: Sequence[Member], groups: list[tuple[str, list[int]]],
               interrupting_wrap: str = "") -> tuple[set[str], str]:
    """Which hook kinds can run inside an existing node, and why others cannot.

    `before_model` and `after_model` hooks can run inside the model node,
    `before_agent` hooks inside the input step (`START_NODE`), and `after_agent`
    hooks inside the model node as well, for runs the model node ends (`END_HOOKS`:
    they keep their nodes too; `plan_entries` leaves them there). A kind qualifies
    when none of its hooks must stand alone (an interrupt, a `fusable: false`)
    and none sets a LangSmith `trace_policy` of its own. `before_model` also
    needs `after_model` to qualify (or to be absent): a `before_model` jump
    skips the `after_model` hooks, which only works when they run in the same
    node. `interrupting_wrap` names a `wrap_model_call` that may interrupt:
    resuming would re-run the hooks inside the model node, so none go there.
    """
    kinds_all = (*START_HOOKS, *MODEL_HOOKS, *END_HOOKS)
    present = {kind: [i for k, group in groups if k == kind for i in group]
               for kind in kinds_all}
    problems: dict[str, str] = {}
    if interrupting_wrap:
        problems = dict.fromkeys((*MODEL_HOOKS, *END_HOOKS),
                                 f"{interrupting_wrap}.wrap_model_call may call "
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
    kinds = {kind for kind in kinds_all if present[kind] and kind not in problems}
    if "before_model" in kinds and present["after_model"] and "after_model" not in kinds:
        kinds.discard("before_model")
        problems["before_model"] = "its jumps must skip after_model hooks that keep their nodes"
    if "after_agent" in kinds and present["after_model"] and "after_model" not in kinds:
        kinds.discard("after_agent")
        problems["after_agent"] = "the run's end is decided after after_model nodes"
    note = "; ".join(f"{kind} hooks keep their nodes: {why}"
                     for kind, why in problems.items() if present[kind])
    return kinds, note


def end_members(groups: list[tuple[str, list[int]]], kinds: Collection[str]) -> list[int]:
    """The `after_agent` members (execution order) that run inside the model node too."""
    return [i for kind, group in groups if kind in END_HOOKS and kind in kinds for i in group]


def plan_entries(groups: list[tuple[str, list[int]]], into_model: Collection[str],
                 ) -> list[Entry]:
    """`groups` with every group of an `into_model` kind merged into one model-node entry."""
    entries: list[Entry] = []
    for kind, group in groups:
        if kind not in into_model or kind in END_HOOKS:
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
    jump to `model` found at build time keeps a hook alone; an `after_agent` hook
    that may jump keeps the hooks out of the tools node). Unknown hooks (None)
    are planned as if the plugin had none. `into_model`: plan the model-call
    hooks inside the model node where they qualify (see `absorbable`).
    """
    kinds_known = {*NODE_HOOKS, *WRAP_HOOKS}
    members = [Member(label=label, name=label, hooks=frozenset(hooks or ()) & kinds_known,
                      alone={} if fusable else dict.fromkeys(kinds_known, "fusable: false"))
               for label, hooks, fusable in rows]
    groups = plan_members(members)
    kinds, note = absorbable(members, groups) if into_model else (set(), "")
    entries = plan_entries(groups, kinds)
    plan = make_plan(members, entries, fused_names(entries, ()), note=note)
    plan.ends_in_model = tuple(members[i].label for i in end_members(groups, kinds))
    plan.ends_in_tools = plan.ends_in_model  # unless a hook turns out to jump (at build)
    plan.wraps = wrap_layers(members, plan_wraps(members), ())
    return plan


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


def fused_names(entries: list[Entry], taken: Collection[str]) -> list[str]:
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


def make_plan(members: Sequence[Member], entries: list[Entry],
          names: list[str], *, note: str = "") -> FusionPlan:
    nodes = []
    for (kind, group, absorbed), name in zip(entries, names, strict=True):
        if absorbed:
            nodes.append(HookNode(kind, host_node(kind), tuple(members[i].label for i in group),
                                  absorbed=True))
        elif len(group) > 1:
            nodes.append(HookNode(kind, f"{name}.{kind}",
                                  tuple(members[i].label for i in group)))
        else:
            member = members[group[0]]
            nodes.append(HookNode(kind, f"{member.name}.{kind}", (member.label,),
                                  member.alone.get(kind, "")))
    return FusionPlan(nodes, note=note)
