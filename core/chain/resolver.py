"""The resolver: from declared constraints to one ordered chain.

It builds the constraint graph of one chain's participating plugins, glues
`immediately_*` pairs into atomic blocks, and sorts the blocks topologically.
Ties break by manifest rank, then name, so the same inputs give the same chain
whatever order the plugins were discovered in. It never reorders or drops
silently: every impossibility is an error naming the plugins, the constraint
and where it was declared, and every placement keeps the constraints that
fixed it, for `antler chain explain`.

Cost is O((V + E) log V): one heap operation per block, one pass per edge.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from antler.errors import (
    AdjacencyConflictError,
    CycleError,
    PositionConflictError,
    ResolutionError,
    UnknownReferenceError,
    UnmetRequirementError,
)
from antler.plugin_api.diagnostics import did_you_mean
from antler.plugin_api.spec import (
    POINT_PREFIX,
    Ordering,
    PluginSpec,
    PointSpec,
    Provenance,
    SlotSpec,
)

# What each hook-level intent means in list order, and why (shown by `explain`).
_LIST_ORDER_FIELDS: dict[str, tuple[bool, str]] = {
    # field: (this plugin comes first in the list?, explanation)
    "before": (True, ""),
    "after": (False, ""),
    "outer_of": (True, "the first wrap_* middleware in the list is the outermost wrapper"),
    "inner_of": (False, "the first wrap_* middleware in the list is the outermost wrapper"),
    "after_model_before": (False, "after_model hooks run in reverse list order"),
    "after_model_after": (True, "after_model hooks run in reverse list order"),
}


@dataclass(frozen=True, slots=True)
class Constraint:
    """One declared constraint, kept for error messages and `explain`."""

    owner: str
    kind: str
    target: str
    provenance: Provenance
    slot: str | None = None
    """For `slot` / `default slot` constraints: the slot; `target` is its boundary point."""

    @property
    def side(self) -> str | None:
        """'after' the slot's start point or 'before' its end point (slot constraints)."""
        if self.slot is None:
            return None
        return "after" if self.owner_first is False else "before"

    @property
    def owner_first(self) -> bool | None:
        """Whether the declaring node comes first in list order (None: no ordering)."""
        if self.kind in _LIST_ORDER_FIELDS:
            return _LIST_ORDER_FIELDS[self.kind][0]
        if self.kind == "immediately_before":
            return True
        if self.kind == "immediately_after":
            return False
        if self.slot is not None:
            return self._slot_owner_first
        return None

    _slot_owner_first: bool | None = None

    def list_order(self) -> tuple[str, str] | None:
        """(earlier, later) in the chain list, or None for `requires`."""
        first = self.owner_first
        if first is None:
            return None
        return (self.owner, self.target) if first else (self.target, self.owner)

    def describe(self) -> str:
        why = _LIST_ORDER_FIELDS.get(self.kind, (True, ""))[1]
        target = f"{self.slot} ({self.side} {self.target})" if self.slot else self.target
        text = f"{self.owner} declares {self.kind}: {target}"
        if why:
            text += f" ({why})"
        return f"{text} [{self.provenance}]"


@dataclass(slots=True)
class Placement:
    """Where one plugin landed and the constraints that put it there."""

    name: str
    position: int
    spec: PluginSpec
    constraints: list[Constraint] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    tie_break: str = ""

    def reasons(self) -> list[str]:
        lines = [c.describe() for c in self.constraints]
        lines += [f"ignored: {text}" for text in self.ignored]
        if self.tie_break:
            lines.append(self.tie_break)
        return lines


@dataclass
class Resolution:
    """The ordered chain plus the evidence for every placement."""

    chain: str
    order: list[str]
    placements: dict[str, Placement]
    point_positions: dict[str, int] = field(default_factory=dict)
    """'@point' -> how many plugins precede it, in the order points were reached."""
    constraints: list[Constraint] = field(default_factory=list)
    """Every constraint between nodes of this chain (plugins and points)."""

    def specs(self) -> list[PluginSpec]:
        return [self.placements[name].spec for name in self.order]


def resolve(
    plugins: Sequence[PluginSpec],
    *,
    chain: str = "lead",
    absent: Mapping[str, str] | None = None,
    points: Iterable[PointSpec] = (),
    slots: Iterable[SlotSpec] = (),
    default_slot: str | None = None,
) -> Resolution:
    """Order `plugins` (the participants of `chain`) by their constraints.

    `absent` maps every known plugin that does not take part in this chain to
    the reason; constraints that reference one are vacuous, not errors.
    """
    with _collector_paused():
        return _Resolver(plugins, chain, dict(absent or {}), list(points), list(slots),
                         default_slot).run()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while resolving.

    Resolving allocates many small objects (constraints, edge tuples) and creates
    no reference cycles, yet the allocations trigger full collections of the
    whole process heap: on 10,000 plugins that doubled the run time. The previous
    state is restored even on error.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Resolver:
    def __init__(self, plugins: Sequence[PluginSpec], chain: str, absent: dict[str, str],
                 points: list[PointSpec], slots: list[SlotSpec],
                 default_slot: str | None) -> None:
        self.chain = chain
        self.absent = absent
        self.specs: dict[str, PluginSpec] = {}
        for spec in sorted(plugins, key=_sort_key):
            if spec.name in self.specs:
                raise ResolutionError(
                    f"plugin {spec.name!r} is declared twice: at {self.specs[spec.name].provenance}"
                    f" and at {spec.provenance}; plugin names must be unique"
                )
            self.specs[spec.name] = spec
        self.points = {POINT_PREFIX + p.name: p for p in points}
        self.slots = {s.name: s for s in slots}
        self.default_slot = default_slot
        self.orderings = {name: spec.ordering_for(chain) for name, spec in self.specs.items()}
        self.edges: list[tuple[str, str, Constraint]] = []
        self.glue: list[tuple[str, str, Constraint]] = []
        self.involved: dict[str, list[Constraint]] = {name: [] for name in self.specs}
        self.ignored: dict[str, list[str]] = {name: [] for name in self.specs}
        self.point_positions: dict[str, int] = {}

    # -- graph construction -------------------------------------------------

    def run(self) -> Resolution:
        for point in self.points.values():
            self._point_edges(point)
        for slot in self.slots.values():
            for boundary in (slot.start, slot.end):
                if boundary not in self.points:
                    raise UnknownReferenceError(
                        f"slot {slot.name!r} [{slot.provenance}] is bounded by {boundary!r}, "
                        f"which no manifest declares{did_you_mean(boundary, self.points)}"
                    )
        for name, spec in self.specs.items():
            self._plugin_edges(name, spec, self.orderings[name])
        order = self._sort()
        placements = {}
        for index, name in enumerate(order, start=1):
            placements[name] = Placement(
                name=name, position=index, spec=self.specs[name],
                constraints=self.involved[name], ignored=self.ignored[name],
                tie_break=f"tie-break among ready plugins: rank {self.specs[name].rank}, "
                          f"then name",
            )
        constraints = [c for _, _, c in self.edges] + [c for _, _, c in self.glue] + [
            c for name in self.specs for c in self.involved[name] if c.kind == "requires"]
        return Resolution(self.chain, order, placements, self.point_positions, constraints)

    def _point_edges(self, point: PointSpec) -> None:
        node = POINT_PREFIX + point.name
        for kind, targets in (("after", point.after), ("before", point.before)):
            for target in targets:
                if self._reference(node, kind, target, point.provenance):
                    c = Constraint(node, kind, target, point.provenance)
                    self._edge(*((node, target) if kind == "before" else (target, node)), c)

    def _plugin_edges(self, name: str, spec: PluginSpec, order: Ordering) -> None:
        prov = spec.provenance
        specs = self.specs
        for kind, (self_first, _) in _LIST_ORDER_FIELDS.items():
            for target in getattr(order, kind):
                # Most targets are participating plugins: skip the full check for them.
                if (target in specs and target != name) or self._reference(name, kind,
                                                                           target, prov):
                    c = Constraint(name, kind, target, prov)
                    if self_first:
                        self._edge(name, target, c)
                    else:
                        self._edge(target, name, c)
        for target in order.requires:
            if target in self.points or target.startswith(POINT_PREFIX):
                raise UnknownReferenceError(
                    f"plugin {name!r} [{prov}] requires {target!r}, but `requires` takes plugin "
                    "names; use `after`/`before` to order against a point"
                )
            if target not in self.specs:
                if target in self.absent:
                    raise UnmetRequirementError(
                        f"plugin {name!r} requires {target!r} in the {self.chain} chain, but "
                        f"{target!r} is not there: {self.absent[target]} [requires declared at "
                        f"{prov}]. Enable {target!r} or disable {name!r}."
                    )
                self._unknown(name, "requires", target, prov)
            self.involved[name].append(Constraint(name, "requires", target, prov))
        if order.immediately_after and self._reference(
                name, "immediately_after", order.immediately_after, prov, adjacency=True):
            c = Constraint(name, "immediately_after", order.immediately_after, prov)
            self._glue(order.immediately_after, name, c)
        if order.immediately_before and self._reference(
                name, "immediately_before", order.immediately_before, prov, adjacency=True):
            c = Constraint(name, "immediately_before", order.immediately_before, prov)
            self._glue(name, order.immediately_before, c)
        slot_name = order.slot
        if slot_name is None and not order.places():
            slot_name = self.default_slot
        if slot_name is not None:
            slot = self.slots.get(slot_name)
            if slot is None:
                raise UnknownReferenceError(
                    f"plugin {name!r} [{prov}] asks for slot {slot_name!r}, which no manifest "
                    f"declares{did_you_mean(slot_name, self.slots)}; known slots: "
                    f"{', '.join(sorted(self.slots)) or 'none'}"
                )
            kind = "slot" if order.slot else "default slot"
            self._edge(slot.start, name, Constraint(name, kind, slot.start, prov, slot_name,
                                                    _slot_owner_first=False))
            self._edge(name, slot.end, Constraint(name, kind, slot.end, prov, slot_name,
                                                  _slot_owner_first=True))

    def _reference(self, owner: str, kind: str, target: str, prov: Provenance,
                   adjacency: bool = False) -> bool:
        """True when `target` takes part; False when it is known but absent."""
        if target == owner:
            raise ResolutionError(f"{owner} [{prov}] declares {kind}: itself; remove it")
        if target.startswith(POINT_PREFIX):
            if target not in self.points:
                raise UnknownReferenceError(
                    f"{owner} [{prov}] declares {kind}: {target!r}, but no manifest declares "
                    f"that point{did_you_mean(target, self.points)}"
                )
            if adjacency:
                raise AdjacencyConflictError(
                    f"{owner} [{prov}] declares {kind}: {target!r}; a point has no width, so "
                    "nothing can sit immediately next to it. Use after/before instead."
                )
            return True
        if target in self.specs:
            return True
        if target in self.absent:
            if owner in self.ignored:
                self.ignored[owner].append(
                    f"{kind}: {target} ({target} is not in the {self.chain} chain: "
                    f"{self.absent[target]})"
                )
            return False
        self._unknown(owner, kind, target, prov)
        return False  # pragma: no cover - _unknown raises

    def _unknown(self, owner: str, kind: str, target: str, prov: Provenance) -> None:
        known = [*self.specs, *self.absent]
        raise UnknownReferenceError(
            f"{owner} [{prov}] declares {kind}: {target!r}, but no installed plugin is named "
            f"{target!r}{did_you_mean(target, known)}"
        )

    def _edge(self, first: str, second: str, c: Constraint) -> None:
        self.edges.append((first, second, c))
        involved = self.involved
        if first in involved:
            involved[first].append(c)
        if second in involved:
            involved[second].append(c)

    def _glue(self, first: str, second: str, c: Constraint) -> None:
        self.glue.append((first, second, c))
        for node in (first, second):
            self.involved[node].append(c)

    # -- sorting --------------------------------------------------------------

    def _blocks(self) -> tuple[list[list[str]], dict[str, int]]:
        """Merge glued pairs into atomic blocks, detecting conflicting adjacency."""
        nxt: dict[str, tuple[str, Constraint]] = {}
        prv: dict[str, tuple[str, Constraint]] = {}
        for first, second, c in self.glue:
            for table, key, value, side in ((nxt, first, second, "followed"),
                                            (prv, second, first, "preceded")):
                held = table.get(key)
                if held and held[0] != value:
                    raise AdjacencyConflictError(
                        f"{key} cannot be immediately {side} by both {held[0]} and {value}: "
                        f"{held[1].describe()}; {c.describe()}"
                    )
                table[key] = (value, c)
        blocks: list[list[str]] = []
        block_of: dict[str, int] = {}
        nodes = [*self.points, *self.specs]
        for node in nodes:
            if node in prv:
                continue
            block = [node]
            while block[-1] in nxt:
                block.append(nxt[block[-1]][0])
            for member in block:
                block_of[member] = len(blocks)
            blocks.append(block)
        stranded = [node for node in nodes if node not in block_of]
        if stranded:
            ring = " -> ".join([*stranded, stranded[0]])
            details = "; ".join(prv[n][1].describe() for n in stranded)
            raise AdjacencyConflictError(f"adjacency constraints form a ring: {ring}: {details}")
        return blocks, block_of

    def _sort(self) -> list[str]:
        blocks, block_of = self._blocks()
        first, last = self._positions()
        index_in_block = {node: i for block in blocks for i, node in enumerate(block)}
        # Parallel edges between two blocks stay in `succ`: each counts once in the
        # in-degree and is released once, which is cheaper than deduplicating.
        succ: list[list[int]] = [[] for _ in blocks]
        indeg = [0] * len(blocks)
        pred_example: dict[int, Constraint] = {}
        for a, b, c in self.edges:
            ba, bb = block_of[a], block_of[b]
            if ba == bb:
                if index_in_block[a] > index_in_block[b]:
                    raise AdjacencyConflictError(
                        f"{c.describe()}, but adjacency constraints place {b} before {a}: "
                        + "; ".join(g.describe() for g in self._glue_of(blocks[ba]))
                    )
                continue
            succ[ba].append(bb)
            if not indeg[bb]:
                pred_example[bb] = c
            indeg[bb] += 1
        first_block = last_block = None
        if first is not None:
            first_block = block_of[first.name]
            if blocks[first_block][0] != first.name:
                raise AdjacencyConflictError(
                    f"{first.name} claims position: first [{first.provenance}] but an "
                    f"immediately_* constraint puts {blocks[first_block][0]} right before it"
                )
            if indeg[first_block]:
                raise PositionConflictError(
                    f"{first.name} claims position: first [{first.provenance}] but must come "
                    f"after another node: {pred_example[first_block].describe()}"
                )
        if last is not None:
            last_block = block_of[last.name]
            if blocks[last_block][-1] != last.name:
                raise AdjacencyConflictError(
                    f"{last.name} claims position: last [{last.provenance}] but an "
                    f"immediately_* constraint puts {blocks[last_block][-1]} right after it"
                )
            after_last = [b for b in succ[last_block] if any(n in self.specs
                                                             for n in blocks[b])]
            if after_last:
                culprit = next(c for a, b, c in self.edges
                               if block_of[a] == last_block and block_of[b] in after_last)
                raise PositionConflictError(
                    f"{last.name} claims position: last [{last.provenance}] but another plugin "
                    f"must come after it: {culprit.describe()}"
                )

        specs = self.specs

        def entry(block_id: int) -> tuple[int, int, str, int]:
            # Heads are unique, so the heap order never depends on push order.
            head = blocks[block_id][0]
            if block_id == first_block:
                return (-1, 0, head, block_id)
            if head in self.points:
                return (0, 0, head, block_id)  # points are reached as soon as they can be
            return (1, specs[head].rank or 0, head, block_id)

        heap = [entry(b) for b in range(len(blocks)) if indeg[b] == 0 and b != last_block]
        heapq.heapify(heap)
        order: list[str] = []
        emitted = 0
        last_ready = last_block is not None and indeg[last_block] == 0
        last_queued = False
        while heap or (last_ready and not last_queued):
            if not heap:
                # Everything else is placed: the `last` plugin goes now, and the points
                # that only follow it are released after it.
                heap.append(entry(last_block))  # type: ignore[arg-type]  # set with last_ready
                last_queued = True
            block = heapq.heappop(heap)[3]
            emitted += 1
            head = blocks[block][0]
            if head in specs:
                order.extend([n for n in blocks[block] if n in specs])
            else:  # a point: blocks never mix points and plugins
                self.point_positions[head] = len(order)
            for s in succ[block]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    if s == last_block:
                        last_ready = True
                    else:
                        heapq.heappush(heap, entry(s))
        if emitted != len(blocks):
            placed = set(order) | set(self.point_positions)
            self._raise_cycle([n for n in [*self.points, *self.specs] if n not in placed])
        if last is not None and order[-1] != last.name:
            raise PositionConflictError(
                f"{last.name} claims position: last [{last.provenance}] but {order[-1]} must "
                f"come after it through a synchronization point: "
                + "; ".join(c.describe() for c in self.involved[order[-1]])
            )
        return order

    def _positions(self) -> tuple[PluginSpec | None, PluginSpec | None]:
        claims: dict[str, list[PluginSpec]] = {"first": [], "last": []}
        for name, spec in self.specs.items():
            claim = self.orderings[name].position
            if claim:
                claims[claim].append(spec)
                self.involved[name].append(Constraint(name, "position", claim, spec.provenance))
        for position, holders in claims.items():
            if len(holders) > 1:
                where = "; ".join(f"{s.name} [{s.provenance}]" for s in holders)
                raise PositionConflictError(
                    f"{len(holders)} plugins claim position: {position} in the {self.chain} "
                    f"chain: {where}. Only one can; change or disable the others."
                )
        return (claims["first"][0] if claims["first"] else None,
                claims["last"][0] if claims["last"] else None)

    def _glue_of(self, block: list[str]) -> list[Constraint]:
        members = set(block)
        return [c for a, b, c in self.glue if a in members and b in members]

    def _raise_cycle(self, remaining: list[str]) -> None:
        rest = set(remaining)
        graph: dict[str, list[tuple[str, Constraint]]] = {n: [] for n in remaining}
        for a, b, c in [*self.edges, *self.glue]:
            if a in rest and b in rest:
                graph[a].append((b, c))
        # An immediately_* pair moves as one block, so for the search its second
        # member also leads back to its first: a constraint that must fall between
        # the two is then seen as the cycle it is.
        glued_back = set()
        for a, b, c in self.glue:
            if a in rest and b in rest:
                graph[b].append((a, c))
                glued_back.add((b, a))
        cycle = _find_cycle(graph, remaining)
        hops = []
        for a, b, c in cycle:
            note = (" (an immediately_* pair moves as one block, so nothing can come "
                    "between them)") if (a, b) in glued_back else ""
            hops.append(f"  {a} -> {b}: {c.describe()}{note}")
        names = [a for a, _, _ in cycle] + [cycle[0][0]]
        raise CycleError(
            f"ordering constraints form a cycle in the {self.chain} chain: "
            f"{' -> '.join(names)}\n" + "\n".join(hops)
            + "\nRemove or relax one of these constraints.",
            cycle=[a for a, _, _ in cycle],
        )


def _find_cycle(graph: dict[str, list[tuple[str, Constraint]]],
                nodes: list[str]) -> list[tuple[str, str, Constraint]]:
    """An iterative DFS returning one cycle as (from, to, constraint) hops."""
    state: dict[str, int] = {}
    for root in nodes:
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[tuple[str, str, Constraint]] = []
        on_path: dict[str, int] = {root: 0}
        state[root] = 1
        while stack:
            node, i = stack[-1]
            if i < len(graph[node]):
                stack[-1] = (node, i + 1)
                nxt, c = graph[node][i]
                if state.get(nxt) == 1 and nxt in on_path:
                    return [*path[on_path[nxt]:], (node, nxt, c)]
                if not state.get(nxt):
                    state[nxt] = 1
                    path.append((node, nxt, c))
                    on_path[nxt] = len(path)
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                on_path.pop(node, None)
                stack.pop()
                if path:
                    path.pop()
    raise ResolutionError("constraints cannot be satisfied, but no cycle was found")


def _sort_key(spec: PluginSpec) -> tuple[int, str]:
    return (spec.rank if spec.rank is not None else 0, spec.name)
