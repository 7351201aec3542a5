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
    from antler.chain import ChainPlan

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

    ordering: bool = True
    """False for constraints that do not order (`requires`)."""

    @property
    def label(self) -> str:
        return f"{self.side} ({self.kind} {self.slot})" if self.slot else self.kind

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
    """Nodes and declared edges of `plan`, with every point where the resolver reached it."""
    resolution = plan.resolution
    present = set(plan.order) | set(resolution.point_positions)
    edges: dict[tuple[str, str, str], Edge] = {}
    for c in resolution.constraints:
        if c.owner in present and c.target in present:
            edges.setdefault((c.owner, c.kind, c.target), Edge(
                c.owner, c.target, c.kind, str(c.provenance), slot=c.slot, side=c.side,
                ordering=c.list_order() is not None))
    graph = ChainGraph(plan.chain, list(plan.order), dict(resolution.point_positions),
                       list(edges.values()))
    graph.summaries = {name: resolution.placements[name].spec.summary for name in plan.order}
    graph.summaries.update({"@" + p.name: p.summary for p in plan.registry.points.values()})
    return graph


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
        arrow = "-->" if edge.ordering else "-.->"
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
        style = "" if edge.ordering else ", style=dashed"
        lines.append(f"    {_dot_quote(edge.source)} -> {_dot_quote(edge.target)} "
                     f"[label={_dot_quote(edge.label)}, constraint=false{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
