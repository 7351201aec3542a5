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


HOOK_COLUMNS = (
    ("before_agent", "bA"),
    ("before_model", "bM"),
    ("wrap_model_call", "wM"),
    ("after_model", "aM"),
    ("wrap_tool_call", "wT"),
    ("after_agent", "aA"),
)
"""LangChain's hooks in the order a turn reaches them, with their short names (the
column headings of `chain show`, the hook lines of `chain graph`)."""

# The drawing's own view of a resolver `Constraint` (strings only, for printing), so it
# has the shape of that and of the other small records of the CLI's inputs.
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
    hooks: dict[str, list[str] | None] = field(default_factory=dict)
    """Plugin -> the hooks its manifest declares (None: not declared)."""

    def drawn_edges(self, point_edges: bool) -> list[Edge]:
        """The edges to draw: without `point_edges`, constraints naming a point are left
        out, since a plugin's place between two points already shows them."""
        if point_edges:
            return list(self.edges)
        return [e for e in self.edges if e.source in self.plugins and e.target in self.plugins]

    def label(self, name: str) -> str:
        """'3. name' plus the plugin's hooks in `chain show`'s short names."""
        text = f"{self.plugins.index(name) + 1}. {name}"
        hooks = self.hooks.get(name)
        if hooks:
            ordered = [short for hook, short in HOOK_COLUMNS if hook in hooks]
            text += "\n" + " ".join(ordered)
        return text

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
                node["hooks"] = self.hooks.get(name)
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
    for name in plan.order:
        hooks = resolution.placements[name].spec.hooks
        graph.hooks[name] = None if hooks is None else list(hooks)
    return graph


# -- renderings ------------------------------------------------------------------------------


def _mermaid_id(kind: str, name: str) -> str:
    # Prefixes keep a plugin and a point of the same name apart and dodge reserved words.
    return ("pt_" if kind == "point" else "pl_") + re.sub(r"\W", "_", name.lstrip("@"))


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


def to_mermaid(graph: ChainGraph, *, point_edges: bool = False) -> str:
    spine = graph.spine()
    ids = {name: _mermaid_id(kind, name) for kind, name in spine}
    legend = _legend(point_edges)
    legend[0] = f"antler {graph.chain} chain: {legend[0]}"
    lines = ["flowchart TD", *(f"    %% {line}" for line in legend)]
    for kind, name in spine:
        if kind == "point":
            lines.append(f'    {ids[name]}{{{{"{_mermaid_text(name)}"}}}}')
        else:
            label = _mermaid_text(graph.label(name)).replace("\n", "<br/>")
            lines.append(f'    {ids[name]}["{label}"]')
    if len(spine) > 1:
        # Invisible links keep the drawing in chain order without claiming a constraint.
        lines.append("    " + " ~~~ ".join(ids[name] for _, name in spine))
    for edge in graph.drawn_edges(point_edges):
        arrow = "-->" if edge.ordering else "-.->"
        lines.append(f'    {ids[edge.source]} {arrow}|"{_mermaid_text(edge.label)}"| '
                     f"{ids[edge.target]}")
    return "\n".join(lines) + "\n"


def _legend(point_edges: bool) -> list[str]:
    """The drawing's key, a comment line each (Mermaid and DOT put their own marks)."""
    return ["plugins in list order (numbered), points as hexagons;",
            "an edge points from the declaring node to the one it names, labelled with the "
            "constraint kind;",
            "under each plugin its hooks (bA before_agent, bM before_model, wM wrap_model_call, "
            "aM after_model, wT wrap_tool_call, aA after_agent)" + ("" if point_edges else ";"),
            *([] if point_edges else ["constraints naming a point are shown by where the "
                                      "plugin sits between points"])]


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(graph: ChainGraph, *, point_edges: bool = False) -> str:
    spine = graph.spine()
    lines = [
        f"digraph {_dot_quote(f'antler {graph.chain} chain')} {{",
        *(f"    // {line}" for line in _legend(point_edges)),
        "    rankdir=TB;",
        '    node [shape=box, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
    ]
    # The same walk as to_mermaid's, in DOT's syntax: each renderer spells its own nodes.
    for kind, name in spine:
        if kind == "point":
            lines.append(f"    {_dot_quote(name)} [shape=hexagon, style=dashed];")
        else:
            label = _dot_quote(graph.label(name)).replace("\n", "\\n")
            lines.append(f"    {_dot_quote(name)} [label={label}];")
    for (_, a), (_, b) in itertools.pairwise(spine):
        lines.append(f"    {_dot_quote(a)} -> {_dot_quote(b)} [style=invis, weight=100];")
    for edge in graph.drawn_edges(point_edges):
        style = "" if edge.ordering else ", style=dashed"
        lines.append(f"    {_dot_quote(edge.source)} -> {_dot_quote(edge.target)} "
                     f"[label={_dot_quote(edge.label)}, constraint=false{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
