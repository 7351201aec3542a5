"""The constraint graph of a planned chain, and its Mermaid and Graphviz renderings.

Nodes are the chain's plugins in order plus the synchronization points; edges
are the declared constraints, drawn from the plugin (or point) that declared
them to the one they name and labelled with their kind, so `a --after--> b`
reads "a declares after: b". The resolver records every constraint that placed
a plugin (`Placement.constraints`); the points' own ordering comes from their
specs. Points have no position of their own in a resolution, so each is shown
right after the last node that must precede it, which is where the resolver
reaches it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .chain import ChainPlan

OWNER_FIRST = frozenset({"before", "outer_of", "after_model_after", "immediately_before"})
OWNER_LAST = frozenset({"after", "inner_of", "after_model_before", "immediately_after"})
"""Kinds whose declaring plugin comes first (last) in list order; mirrors the resolver."""

SLOT_KINDS = frozenset({"slot", "default slot"})
_SLOT_TARGET = re.compile(r"^(?P<slot>\S+) \((?P<side>after|before) (?P<point>@\S+)\)$")


@dataclass(frozen=True)
class Edge:
    """One declared constraint: `source` declares `kind` about `target`."""

    source: str
    target: str
    kind: str
    declared_at: str
    slot: str | None = None
    side: str | None = None
    """For slot constraints: 'after' the slot's start point or 'before' its end point."""

    @property
    def label(self) -> str:
        return f"{self.side} ({self.kind} {self.slot})" if self.slot else self.kind

    def list_order(self) -> tuple[str, str] | None:
        """(earlier, later) in the chain list, or None when it does not order (requires)."""
        kind = self.side or self.kind
        if kind in OWNER_FIRST:
            return self.source, self.target
        if kind in OWNER_LAST:
            return self.target, self.source
        return None

    def as_json(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "kind": self.kind, "slot": self.slot,
                "side": self.side, "declared_at": self.declared_at}


@dataclass
class ChainGraph:
    chain: str
    plugins: list[str]
    points: dict[str, int]
    """'@point' -> how many plugins come before it."""
    edges: list[Edge] = field(default_factory=list)
    summaries: dict[str, str] = field(default_factory=dict)

    def spine(self) -> list[tuple[str, str]]:
        """Every node in chain order as ('plugin' | 'point', name)."""
        by_position: dict[int, list[str]] = {}
        for point, after in self.points.items():
            by_position.setdefault(after, []).append(point)
        nodes = [("point", p) for p in by_position.get(0, [])]
        for index, name in enumerate(self.plugins, start=1):
            nodes.append(("plugin", name))
            nodes += [("point", p) for p in by_position.get(index, [])]
        return nodes

    def as_json(self) -> dict[str, Any]:
        nodes = []
        for kind, name in self.spine():
            node: dict[str, Any] = {"id": name, "kind": kind,
                                    "summary": self.summaries.get(name, "")}
            if kind == "plugin":
                node["position"] = self.plugins.index(name) + 1
            else:
                node["after_position"] = self.points[name]
            nodes.append(node)
        return {"chain": self.chain, "nodes": nodes, "edges": [e.as_json() for e in self.edges]}


def chain_graph(plan: ChainPlan) -> ChainGraph:
    """Nodes and declared edges of `plan`, with every point placed."""
    from .spec import POINT_PREFIX

    registry = plan.registry
    points = {POINT_PREFIX + p.name: p for p in registry.points.values()}
    present = set(plan.order) | set(points)
    edges: dict[tuple[str, str, str], Edge] = {}
    for name in plan.order:
        for c in plan.resolution.placements[name].constraints:
            edge = _edge(c.owner, c.kind, c.target, str(c.provenance))
            if edge.source in present and edge.target in present:
                edges.setdefault((edge.source, edge.kind, edge.target), edge)
    for node, point in points.items():
        for kind, targets in (("after", point.after), ("before", point.before)):
            for target in targets:
                if target in present:
                    edges.setdefault((node, kind, target),
                                     Edge(node, target, kind, str(point.provenance)))
    graph = ChainGraph(plan.chain, list(plan.order), {}, list(edges.values()))
    graph.points = _point_positions(graph, list(points))
    graph.summaries = {name: plan.resolution.placements[name].spec.summary for name in plan.order}
    graph.summaries.update({node: point.summary for node, point in points.items()})
    return graph


def _edge(owner: str, kind: str, target: str, declared_at: str) -> Edge:
    if kind in SLOT_KINDS:
        match = _SLOT_TARGET.match(target)
        if match:
            return Edge(owner, match["point"], kind, declared_at, slot=match["slot"],
                        side=match["side"])
    return Edge(owner, target, kind, declared_at)


def _point_positions(graph: ChainGraph, points: list[str]) -> dict[str, int]:
    position = {name: index for index, name in enumerate(graph.plugins, start=1)}
    before: dict[str, set[str]] = {point: set() for point in points}
    for edge in graph.edges:
        pair = edge.list_order()
        if pair and pair[1] in before:
            before[pair[1]].add(pair[0])
    placed: dict[str, int] = {}

    def place(point: str, visiting: frozenset[str]) -> int:
        if point not in placed:
            earlier = [position[n] if n in position else place(n, visiting | {point})
                       for n in before[point] if n not in visiting]
            placed[point] = max(earlier, default=0)
        return placed[point]

    depth: dict[str, int] = {}

    def deep(point: str, visiting: frozenset[str]) -> int:
        if point not in depth:
            depth[point] = 1 + max((deep(n, visiting | {point}) for n in before[point]
                                    if n in before and n not in visiting), default=-1)
        return depth[point]

    for point in points:
        place(point, frozenset())
        deep(point, frozenset())
    # Points reached after the same plugin keep their own order (and then declaration order).
    return {point: placed[point]
            for point in sorted(points, key=lambda p: (placed[p], depth[p]))}


# -- renderings ------------------------------------------------------------------------------


def _mermaid_id(kind: str, name: str) -> str:
    # Prefixes keep a plugin and a point of the same name apart and dodge reserved words.
    return ("pt_" if kind == "point" else "pl_") + re.sub(r"\W", "_", name.lstrip("@"))


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


def to_mermaid(graph: ChainGraph) -> str:
    spine = graph.spine()
    ids = {name: _mermaid_id(kind, name) for kind, name in spine}
    lines = [
        "flowchart TD",
        f"    %% antler {graph.chain} chain: plugins in list order (numbered), points as "
        "hexagons;",
        "    %% an edge points from the declaring node to the one it names, labelled with "
        "the constraint kind",
    ]
    for kind, name in spine:
        if kind == "point":
            lines.append(f'    {ids[name]}{{{{"{_mermaid_text(name)}"}}}}')
        else:
            label = f"{graph.plugins.index(name) + 1}. {name}"
            lines.append(f'    {ids[name]}["{_mermaid_text(label)}"]')
    if len(spine) > 1:
        # Invisible links keep the drawing in chain order without claiming a constraint.
        lines.append("    " + " ~~~ ".join(ids[name] for _, name in spine))
    for edge in graph.edges:
        arrow = "-.->" if edge.list_order() is None else "-->"
        lines.append(f'    {ids[edge.source]} {arrow}|"{_mermaid_text(edge.label)}"| '
                     f"{ids[edge.target]}")
    return "\n".join(lines) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(graph: ChainGraph) -> str:
    spine = graph.spine()
    lines = [
        f"digraph {_dot_quote(f'antler {graph.chain} chain')} {{",
        "    // plugins in list order (numbered), points as hexagons; an edge points from",
        "    // the declaring node to the one it names, labelled with the constraint kind",
        "    rankdir=TB;",
        '    node [shape=box, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
    ]
    for kind, name in spine:
        if kind == "point":
            lines.append(f"    {_dot_quote(name)} [shape=hexagon, style=dashed];")
        else:
            label = f"{graph.plugins.index(name) + 1}. {name}"
            lines.append(f"    {_dot_quote(name)} [label={_dot_quote(label)}];")
    for (_, a), (_, b) in itertools.pairwise(spine):
        lines.append(f"    {_dot_quote(a)} -> {_dot_quote(b)} [style=invis, weight=100];")
    for edge in graph.edges:
        style = ", style=dashed" if edge.list_order() is None else ""
        lines.append(f"    {_dot_quote(edge.source)} -> {_dot_quote(edge.target)} "
                     f"[label={_dot_quote(edge.label)}, constraint=false{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
