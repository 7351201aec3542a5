"""The resolver: from declared constraints to one ordered chain.

Order is resolved over every known plugin, not only the chain's participants.
A plugin that is absent from the chain (off, in the other chain, held back by a
runtime condition, failed to load) stays in the graph as a zero-width node, like
a synchronization point: its own constraints and the constraints naming it still
order its neighbours, so `a after b, b after c` keeps `a after c` when b is off.

Each plugin is bounded by its slot (its own `slot:` on both sides, else the
default slot) on every side it does not constrain itself, so a partial
constraint never drops a plugin among the built-in guards or into the tail.
Hook-level invariants (`hook_order: {before_agent: last}`) become edges to every
participant that has that hook. `immediately_*` pairs of participants are glued
into atomic blocks, and the blocks are sorted topologically; ties break by
manifest rank, then name, so the same inputs give the same chain whatever order
the plugins were discovered in.

It never reorders or drops silently: every impossibility is a `ResolutionError`
naming the plugins at fault (`plugins=`), the constraint and where it was
declared, and every placement keeps the constraints that fixed it, for `antler
chain explain`. Cost is O((V + E) log V): one heap operation per block, one
pass per edge.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

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

_WRAP = "the first wrap_* middleware in the list is the outermost wrapper"
_AFTER_MODEL = "after_model hooks run in reverse list order"

# Fields that order two nodes: (does the declaring node come first in the list?, why).
_LIST_ORDER_FIELDS: dict[str, tuple[bool, str]] = {
    "before": (True, ""),
    "after": (False, ""),
    "outer_of": (True, _WRAP),
    "inner_of": (False, _WRAP),
    "after_model_before": (False, _AFTER_MODEL),
    "after_model_after": (True, _AFTER_MODEL),
}

# Hooks LangChain runs in reverse list order: running last there means coming first.
_REVERSED_HOOKS = frozenset({"after_model", "after_agent"})
_WRAP_HOOKS = ("wrap_model_call", "wrap_tool_call")

SLOT_BOUND = "slot bound"
"""The kind of the constraints the default slot adds where a plugin's own leave room."""


class Constraint(NamedTuple):
    """One constraint between two nodes, kept for error messages and `explain`.

    A tuple, because a large chain creates tens of thousands of them.
    """

    owner: str
    kind: str
    target: str
    provenance: Provenance
    owner_first: bool | None = None
    """Whether the declaring node comes first in list order (None: it does not order)."""
    slot: str | None = None
    """For `slot` / `slot bound` constraints: the slot; `target` is its boundary point."""
    note: str = ""
    """What the constraint means, when its kind alone does not say (shown in messages)."""

    @property
    def side(self) -> str | None:
        """'after' the slot's start point or 'before' its end point (slot constraints)."""
        if self.slot is None:
            return None
        return "before" if self.owner_first else "after"

    def list_order(self) -> tuple[str, str] | None:
        """(earlier, later) in the chain list, or None for `requires` and `position`."""
        if self.owner_first is None:
            return None
        return (self.owner, self.target) if self.owner_first else (self.target, self.owner)

    def other(self, name: str) -> str:
        return self.target if name == self.owner else self.owner

    def describe(self) -> str:
        if self.slot is not None:
            text = f"{self.owner} {'declares slot' if self.kind == 'slot' else self.kind}: " \
                   f"{self.slot} ({self.side} {self.target})"
        else:
            text = f"{self.owner} declares {self.kind}: {self.target}"
        if self.note:
            text += f" ({self.note})"
        return f"{text} [{self.provenance}]"


class AbsentPlugin(Protocol):
    """A known plugin outside the chain: its spec still orders the chain."""

    @property
    def spec(self) -> PluginSpec: ...

    @property
    def reason(self) -> str: ...


class _Evidence:
    """Which constraints involve each plugin, indexed on first use.

    Only `explain`, `chain show` and `chain graph` read it, so resolving never
    pays for it.
    """

    def __init__(self, edges: list[tuple[str, str, Constraint]],
                 glue: list[tuple[str, str, Constraint]], others: list[Constraint],
                 absent: dict[str, str], names: Iterable[str]) -> None:
        self._edges = edges
        self._glue = glue
        self._others = others
        self._absent = absent
        self._names = names
        self._index: dict[str, list[Constraint]] | None = None

    def all(self) -> list[Constraint]:
        """Ordering constraints, adjacencies and requirements (not position claims)."""
        return [*(c for _, _, c in self._edges), *(c for _, _, c in self._glue),
                *(c for c in self._others if c.kind == "requires")]

    def of(self, name: str) -> list[Constraint]:
        if self._index is None:
            index: dict[str, list[Constraint]] = {n: [] for n in self._names}
            for c in [*(c for _, _, c in self._edges), *(c for _, _, c in self._glue),
                      *self._others]:
                for end in (c.owner, c.target):
                    if end in index:
                        index[end].append(c)
            self._index = index
        return self._index[name]

    def absent_reasons(self, name: str) -> dict[str, str]:
        return {c.other(name): self._absent[c.other(name)] for c in self.of(name)
                if c.other(name) in self._absent}


@dataclass(slots=True)
class Placement:
    """Where one plugin landed and the constraints that put it there."""

    name: str
    position: int
    spec: PluginSpec
    evidence: _Evidence | None = field(default=None, repr=False)
    warnings: list[str] = field(default_factory=list)

    @property
    def tie_break(self) -> str:
        return f"tie-break among ready plugins: rank {self.spec.rank}, then name"

    @property
    def constraints(self) -> list[Constraint]:
        """Every constraint the plugin declares or is named in, slot bounds included."""
        return self.evidence.of(self.name) if self.evidence else []

    @property
    def through_absent(self) -> dict[str, str]:
        """Absent plugins some of `constraints` go through, with the reason each is absent."""
        return self.evidence.absent_reasons(self.name) if self.evidence else {}

    def reasons(self) -> list[str]:
        lines = []
        absent = self.through_absent
        for c in self.constraints:
            text = c.describe()
            other = c.other(self.name)
            if other in absent:
                text += (f"; {other} is not in the chain ({absent[other]}), the order "
                         "still holds through it")
            lines.append(text)
        lines += [f"warning: {text}" for text in self.warnings]
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
    warnings: list[str] = field(default_factory=list)
    """Declarations that hold but probably do not mean what their author meant."""
    evidence: _Evidence | None = field(default=None, repr=False)

    @property
    def constraints(self) -> list[Constraint]:
        """Every constraint between nodes of this chain (plugins, points, absent plugins),
        `requires` included."""
        return self.evidence.all() if self.evidence else []

    def specs(self) -> list[PluginSpec]:
        return [self.placements[name].spec for name in self.order]


def resolve(
    plugins: Sequence[PluginSpec],
    *,
    chain: str = "lead",
    absent: Mapping[str, str | AbsentPlugin] | None = None,
    points: Iterable[PointSpec] = (),
    slots: Iterable[SlotSpec] = (),
    default_slot: str | None = None,
) -> Resolution:
    """Order `plugins` (the participants of `chain`) by their constraints.

    `absent` maps every known plugin that does not take part in this chain to
    the reason, or to an object with `spec` and `reason` (an `Exclusion`): such
    a plugin is a zero-width node whose constraints still order the chain.
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
    def __init__(self, plugins: Sequence[PluginSpec], chain: str,
                 absent: dict[str, str | AbsentPlugin], points: list[PointSpec],
                 slots: list[SlotSpec], default_slot: str | None) -> None:
        self.chain = chain
        self.specs: dict[str, PluginSpec] = {}
        for spec in plugins:
            if spec.name in self.specs:
                raise ResolutionError(
                    f"plugin {spec.name!r} is declared twice: at {self.specs[spec.name].provenance}"
                    f" and at {spec.provenance}; plugin names must be unique", [spec.name])
            self.specs[spec.name] = spec
        self.absent: dict[str, str] = {}
        self.absent_specs: dict[str, PluginSpec] = {}
        for name, value in absent.items():
            if name in self.specs:
                continue
            if isinstance(value, str):
                self.absent[name] = value
            else:
                self.absent[name] = value.reason
                self.absent_specs[name] = value.spec
        self.points = {POINT_PREFIX + p.name: p for p in points}
        self.slots = {s.name: s for s in slots}
        self.default_slot = default_slot
        self.edges: list[tuple[str, str, Constraint]] = []
        self.glue: list[tuple[str, str, Constraint]] = []
        self.requires: list[Constraint] = []
        self.positions: list[Constraint] = []
        self.warnings: dict[str, list[str]] = {}
        self.hook_intents: list[str] = []
        """Participants with hook-level fields (outer_of, ...), checked for warnings."""
        self.hook_ranked: list[str] = []
        """Participants declaring `hook_order` invariants."""
        self.unslotted: list[tuple[str, Provenance, str | None]] = []
        """Plugins bounded by the default slot, where their constraints leave room."""
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
        chain = self.chain
        orderings = {name: spec.ordering_for(chain) if spec.chain_overrides else spec.order
                     for name, spec in self.specs.items()}
        for name, spec in self.specs.items():
            self._plugin_edges(name, spec, orderings[name], present=True)
        for name, spec in sorted(self.absent_specs.items(), key=lambda item: item[0]):
            self._plugin_edges(name, spec, spec.ordering_for(self.chain), present=False)
        self._hook_invariants(orderings)
        self._hook_intent_warnings(orderings)
        return self._resolution(self._sort())

    def _resolution(self, order: list[str]) -> Resolution:
        evidence = _Evidence(self.edges, self.glue, self.requires + self.positions,
                             self.absent, self.specs)
        placements = {}
        for index, name in enumerate(order, start=1):
            spec = self.specs[name]
            placements[name] = Placement(name, index, spec, evidence,
                                         self.warnings.get(name, []))
        warnings = [text for name in sorted(self.warnings) for text in self.warnings[name]]
        return Resolution(self.chain, order, placements, self.point_positions, warnings,
                          evidence)

    def _point_edges(self, point: PointSpec) -> None:
        node = POINT_PREFIX + point.name
        for kind, targets in (("after", point.after), ("before", point.before)):
            for target in targets:
                if self._reference(node, kind, target, point.provenance, strict=True):
                    c = Constraint(node, kind, target, point.provenance, kind == "before")
                    self.edges.append((node, target, c) if kind == "before" else
                                      (target, node, c))

    def _plugin_edges(self, name: str, spec: PluginSpec, order: Ordering, *,
                      present: bool) -> None:
        prov = spec.provenance
        specs = self.specs
        append = self.edges.append
        fields = order.__dict__  # plain reads: this loop runs once per plugin
        for kind, (first, why) in _LIST_ORDER_FIELDS.items():
            for target in fields[kind]:
                # Most targets are participating plugins: skip the full check for them.
                if (target in specs and target != name) or self._reference(
                        name, kind, target, prov, strict=present):
                    # tuple.__new__ skips the NamedTuple's argument handling (hot path).
                    c = tuple.__new__(Constraint, (name, kind, target, prov, first, None, why))
                    append((name, target, c) if first else (target, name, c))
        for kind, owner_first in (("immediately_after", False), ("immediately_before", True)):
            target = fields[kind]
            if target and self._reference(name, kind, target, prov, strict=present,
                                          adjacency=True):
                c = Constraint(name, kind, target, prov, owner_first)
                pair = (name, target, c) if owner_first else (target, name, c)
                # Only two participants can be neighbours; through an absent plugin
                # the adjacency still orders, like after/before.
                (self.glue if present and target in specs else self.edges).append(pair)
        if present:
            if fields["outer_of"] or fields["inner_of"] or fields["after_model_before"] \
                    or fields["after_model_after"]:
                self.hook_intents.append(name)
            if fields["hook_order"]:
                self.hook_ranked.append(name)
            if fields["requires"]:
                self._requirements(name, order, prov)
            if fields["position"]:
                self.positions.append(Constraint(name, "position", fields["position"], prov))
        if fields["slot"] is not None or self.default_slot is not None:
            self._slot_bounds(name, order, prov, present)

    def _requirements(self, name: str, order: Ordering, prov: Provenance) -> None:
        for target in order.requires:
            if target in self.points or target.startswith(POINT_PREFIX):
                raise UnknownReferenceError(
                    f"plugin {name!r} [{prov}] requires {target!r}, but `requires` takes plugin "
                    "names; use `after`/`before` to order against a point", [name])
            if target not in self.specs:
                if target in self.absent:
                    raise UnmetRequirementError(
                        f"plugin {name!r} requires {target!r} in the {self.chain} chain, but "
                        f"{target!r} is not there: {self.absent[target]} [requires declared at "
                        f"{prov}]. Enable {target!r} or disable {name!r}.", [name])
                self._unknown(name, "requires", target, prov)
            self.requires.append(Constraint(name, "requires", target, prov))

    def _slot_bounds(self, name: str, order: Ordering, prov: Provenance,
                     present: bool) -> None:
        """Bound `name` by its slot: `slot:` on both sides, else the default slot.

        Default-slot bounds are only noted here: `_default_slot_bounds` adds the ones
        that say something once every declared edge is known.
        """
        if order.slot is not None:
            slot_name = order.slot
        elif self.default_slot is not None:
            slot_name = self.default_slot
        else:
            return
        slot = self.slots.get(slot_name)
        if slot is None:
            message = (f"plugin {name!r} [{prov}] asks for slot {slot_name!r}, which no "
                       f"manifest declares{did_you_mean(slot_name, self.slots)}; known slots: "
                       f"{', '.join(sorted(self.slots)) or 'none'}")
            if present:
                raise UnknownReferenceError(message, [name])
            self._warn(name, message + " (ignored while it is not in the chain)")
            return
        if order.slot is not None:
            self.edges.append((slot.start, name, Constraint(name, "slot", slot.start, prov,
                                                            False, slot.name)))
            self.edges.append((name, slot.end, Constraint(name, "slot", slot.end, prov, True,
                                                          slot.name)))
            return
        self.unslotted.append((name, prov, order.position))

    def _default_slot_bounds(self, blocks: list[list[str]], block_of: dict[str, int],
                             succ: list[list[int]], indeg: list[int]) -> None:
        """Bound each plugin without `slot:` by the default slot, where that says something.

        A side is left unbounded when the plugin's constraints already place it beyond
        that boundary (`before: ["@guards_end"]` is among the guards, `after:
        ["@tail_start"]` in the tail, `position: last` after everything: all
        explicit), or already inside it (the bound would be redundant). Works on the
        block graph the sort is about to use; its edges are the declared ones, so a
        bound never decides whether another bound applies.
        """
        slot = self.slots[self.default_slot]  # type: ignore[index]  # checked when noted
        start, end = block_of[slot.start], block_of[slot.end]
        pred: list[list[int]] = [[] for _ in blocks]
        for a, targets in enumerate(succ):
            for b in targets:
                pred[b].append(a)
        # Outside the slot, or inside it already, on each side.
        start_settled = _reachable(start, pred) | _reachable(start, succ)
        end_settled = _reachable(end, succ) | _reachable(end, pred)
        edges = self.edges
        for name, prov, position in self.unslotted:
            block = block_of[name]
            if block not in start_settled and position != "first":
                edges.append((slot.start, name, Constraint(
                    name, SLOT_BOUND, slot.start, prov, False, slot.name)))
                succ[start].append(block)
                indeg[block] += 1
            if block not in end_settled and position != "last":
                edges.append((name, slot.end, Constraint(
                    name, SLOT_BOUND, slot.end, prov, True, slot.name)))
                succ[block].append(end)
                indeg[end] += 1

    def _hook_invariants(self, orderings: dict[str, Ordering]) -> None:
        """`hook_order: {HOOK: first|last}`: edges to every participant with that hook."""
        for name in self.hook_ranked:
            prov = self.specs[name].provenance
            for hook, rank in orderings[name].hook_order.items():
                # Running last means coming last in the list, except for the hooks that
                # run in reverse list order.
                owner_first = (rank == "first") != (hook in _REVERSED_HOOKS)
                note = (f"its {hook} runs {'before' if rank == 'first' else 'after'} every "
                        f"other {hook} hook")
                for other, spec in self.specs.items():
                    if other != name and (spec.hooks is None or hook in spec.hooks):
                        c = Constraint(name, f"hook_order {hook}: {rank}", other, prov,
                                       owner_first, note=note)
                        self.edges.append((name, other, c) if owner_first else (other, name, c))

    def _hook_intent_warnings(self, orderings: dict[str, Ordering]) -> None:
        """Warn when a hook-level field names a plugin without the hook it is about."""
        for name in self.hook_intents:
            order = orderings[name]
            for kind in ("outer_of", "inner_of", "after_model_before", "after_model_after"):
                for target in getattr(order, kind):
                    spec = self.specs.get(target) or self.absent_specs.get(target)
                    if spec is None or spec.hooks is None:
                        continue  # a point, or hooks undeclared: it may have any hook
                    wanted = ["after_model"] if kind.startswith("after_model") else [
                        h for h in _WRAP_HOOKS if h in (self.specs[name].hooks or _WRAP_HOOKS)]
                    if set(wanted or _WRAP_HOOKS) & set(spec.hooks):
                        continue
                    self._warn(name, (
                        f"{name} declares {kind}: {target} [{self.specs[name].provenance}], "
                        f"but {target} has no {' or '.join(wanted or _WRAP_HOOKS)} hook (its "
                        f"hooks: {', '.join(spec.hooks) or 'none'}), so the constraint orders "
                        "the list only; use after/before if that is what you mean"))

    def _warn(self, name: str, text: str) -> None:
        self.warnings.setdefault(name, []).append(text)

    def _reference(self, owner: str, kind: str, target: str, prov: Provenance, *,
                   strict: bool, adjacency: bool = False) -> bool:
        """Whether `target` is a node of the graph; False (or an error) when it is not.

        With `strict` off (the declarations of absent plugins) a bad reference is a
        warning, so a plugin that is switched off cannot break the chain.
        """
        try:
            return self._check_reference(owner, kind, target, prov, adjacency)
        except ResolutionError as exc:
            if strict:
                raise
            self._warn(owner, f"{exc} (ignored while {owner} is not in the chain)")
            return False

    def _check_reference(self, owner: str, kind: str, target: str, prov: Provenance,
                         adjacency: bool) -> bool:
        blame = [] if owner.startswith(POINT_PREFIX) else [owner]
        if target == owner:
            raise ResolutionError(f"{owner} [{prov}] declares {kind}: itself; remove it", blame)
        if target.startswith(POINT_PREFIX):
            if target not in self.points:
                raise UnknownReferenceError(
                    f"{owner} [{prov}] declares {kind}: {target!r}, but no manifest declares "
                    f"that point{did_you_mean(target, self.points)}", blame)
            if adjacency:
                raise AdjacencyConflictError(
                    f"{owner} [{prov}] declares {kind}: {target!r}; a point has no width, so "
                    "nothing can sit immediately next to it. Use after/before instead.", blame)
            return True
        if target in self.specs or target in self.absent:
            return True
        self._unknown(owner, kind, target, prov)
        return False  # pragma: no cover - _unknown raises

    def _unknown(self, owner: str, kind: str, target: str, prov: Provenance) -> None:
        known = [*self.specs, *self.absent]
        raise UnknownReferenceError(
            f"{owner} [{prov}] declares {kind}: {target!r}, but no installed plugin is named "
            f"{target!r}{did_you_mean(target, known)}",
            [] if owner.startswith(POINT_PREFIX) else [owner])

    # -- sorting --------------------------------------------------------------

    def _nodes(self, canonical: bool = False) -> list[str]:
        """Every node; in canonical order (for messages) when asked, else as stored."""
        if canonical:
            return [*self.points, *(s.name for s in sorted(self.specs.values(),
                                                                   key=_sort_key)),
                    *sorted(self.absent)]
        return [*self.points, *self.specs, *self.absent]

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
                        f"{held[1].describe()}; {c.describe()}", [held[1].owner, c.owner])
                table[key] = (value, c)
        blocks: list[list[str]] = []
        block_of: dict[str, int] = {}
        nodes = self._nodes()
        for node in nodes:
            if node in prv:
                continue
            block = [node]
            while block[-1] in nxt:
                block.append(nxt[block[-1]][0])
            for member in block:
                block_of[member] = len(blocks)
            blocks.append(block)
        if len(block_of) < len(nodes):
            stranded = [node for node in self._nodes(canonical=True) if node not in block_of]
            ring = " -> ".join([*stranded, stranded[0]])
            details = "; ".join(prv[n][1].describe() for n in stranded)
            raise AdjacencyConflictError(f"adjacency constraints form a ring: {ring}: {details}",
                                         sorted({prv[n][1].owner for n in stranded}))
        return blocks, block_of

    def _sort(self) -> list[str]:
        blocks, block_of = self._blocks()
        first, last = self._positions()
        index_in_block = {node: i for block in blocks for i, node in enumerate(block)
                          if len(block) > 1}
        # Parallel edges between two blocks stay in `succ`: each counts once in the
        # in-degree and is released once, which is cheaper than deduplicating.
        succ: list[list[int]] = [[] for _ in blocks]
        indeg = [0] * len(blocks)
        for a, b, c in self.edges:
            ba, bb = block_of[a], block_of[b]
            if ba == bb:
                if index_in_block[a] > index_in_block[b]:
                    raise AdjacencyConflictError(
                        f"{c.describe()}, but adjacency constraints place {b} before {a}: "
                        + "; ".join(g.describe() for g in self._glue_of(blocks[ba])),
                        [c.owner, *(g.owner for g in self._glue_of(blocks[ba]))])
                continue
            succ[ba].append(bb)
            indeg[bb] += 1
        if self.unslotted:
            self._default_slot_bounds(blocks, block_of, succ, indeg)
        first_block = last_block = None
        if first is not None:
            first_block = block_of[first.owner]
            if blocks[first_block][0] != first.owner:
                raise AdjacencyConflictError(
                    f"{first.owner} claims position: first [{first.provenance}] but an "
                    f"immediately_* constraint puts {blocks[first_block][0]} right before it",
                    [first.owner, blocks[first_block][0]])
        if last is not None:
            last_block = block_of[last.owner]
            if blocks[last_block][-1] != last.owner:
                raise AdjacencyConflictError(
                    f"{last.owner} claims position: last [{last.provenance}] but an "
                    f"immediately_* constraint puts {blocks[last_block][-1]} right after it",
                    [last.owner, blocks[last_block][-1]])

        specs = self.specs
        # Heap entries: zero-width nodes (points, absent plugins) are reached as soon as
        # they can be; plugins by rank, then name. Heads are unique, so the heap order
        # never depends on push order.
        entries: list[tuple[int, int, str, int]] = []
        for block_id, members in enumerate(blocks):
            head = members[0]
            if block_id == first_block:
                entries.append((-1, 0, head, block_id))
            elif head in specs:
                entries.append((1, specs[head].rank or 0, head, block_id))
            else:
                entries.append((0, 0, head, block_id))
        heap = [entries[b] for b in range(len(blocks)) if indeg[b] == 0 and b != last_block]
        heapq.heapify(heap)
        order: list[str] = []
        emitted = 0
        last_ready = last_block is not None and indeg[last_block] == 0
        last_queued = False
        points = self.points
        while heap or (last_ready and not last_queued):
            if not heap:
                # Everything else is placed: the `last` plugin goes now, and the
                # zero-width nodes that only follow it are released after it.
                heap.append(entries[last_block])  # type: ignore[index]  # set with last_ready
                last_queued = True
            block = heapq.heappop(heap)[3]
            emitted += 1
            head = blocks[block][0]
            if head in specs:
                if block == first_block and order:
                    self._position_conflict(first, order)
                order.extend(blocks[block])
            elif head in points:
                self.point_positions[head] = len(order)
            for s in succ[block]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    if s == last_block:
                        last_ready = True
                    else:
                        heapq.heappush(heap, entries[s])
        if emitted != len(blocks):
            # Emitted blocks are exactly those whose predecessors were all released.
            placed = {node for b, block in enumerate(blocks) if indeg[b] == 0
                      and (b != last_block or last_queued) for node in block}
            self._raise_cycle(blocks, block_of, placed)
        if last is not None and order[-1] != last.owner:
            self._position_conflict(last, order[order.index(last.owner) + 1:])
        return order

    def _positions(self) -> tuple[Constraint | None, Constraint | None]:
        claims: dict[str, list[Constraint]] = {"first": [], "last": []}
        for c in self.positions:
            claims[c.target].append(c)
        for position, holders in claims.items():
            if len(holders) > 1:
                where = "; ".join(f"{c.owner} [{c.provenance}]" for c in holders)
                raise PositionConflictError(
                    f"{len(holders)} plugins claim position: {position} in the {self.chain} "
                    f"chain: {where}. Only one can; change or disable the others.",
                    [c.owner for c in holders])
        return (claims["first"][0] if claims["first"] else None,
                claims["last"][0] if claims["last"] else None)

    def _position_conflict(self, claim: Constraint | None, others: list[str]) -> None:
        """Raise for a `first` (`last`) plugin that one of `others` must precede (follow)."""
        assert claim is not None
        is_first = claim.target == "first"
        path = self._path(set(others), claim.owner, backward=is_first)
        if not is_first:
            path.reverse()
        through = [n for c in path for n in (c.owner, c.target)
                   if n != claim.owner and n not in self.specs]
        via = (" through " + ", ".join(dict.fromkeys(through))) if through else ""
        hops = "; ".join(c.describe() for c in path)
        text = (f"must come after another node{via}" if is_first
                else f"another plugin must come after it{via}")
        blame = [claim.owner, *(c.owner for c in path if not c.owner.startswith(POINT_PREFIX))]
        raise PositionConflictError(
            f"{claim.owner} claims position: {claim.target} [{claim.provenance}] but {text}: "
            f"{hops}", list(dict.fromkeys(blame)))

    def _path(self, sources: set[str], target: str, *, backward: bool) -> list[Constraint]:
        """The constraints of one shortest path between `target` and one of `sources`.

        backward: from `target` against list order (to what must precede it), else
        along it. Only used for error messages.
        """
        graph: dict[str, list[tuple[str, Constraint]]] = {}
        for a, b, c in self.edges:
            if backward:
                graph.setdefault(b, []).append((a, c))
            else:
                graph.setdefault(a, []).append((b, c))
        came: dict[str, tuple[str, Constraint] | None] = {target: None}
        queue = [target]
        for node in queue:
            if node in sources:
                path = []
                while came[node] is not None:
                    prev, c = came[node]  # type: ignore[misc]
                    path.append(c)
                    node = prev
                return path
            for nxt, c in graph.get(node, []):
                if nxt not in came:
                    came[nxt] = (node, c)
                    queue.append(nxt)
        return []

    def _glue_of(self, block: list[str]) -> list[Constraint]:
        members = set(block)
        return [c for a, b, c in self.glue if a in members and b in members]

    def _raise_cycle(self, blocks: list[list[str]], block_of: dict[str, int],
                     placed: set[str]) -> None:
        """Report one real cycle among the blocks that could not be placed.

        The search runs over blocks, so an `immediately_*` pair cannot be mistaken
        for a cycle by itself; inside a block the cycle moves from the member an
        edge enters to the member the next edge leaves, which is what the
        adjacency forces.
        """
        graph: dict[int, list[tuple[int, str, str, Constraint]]] = {}
        for a, b, c in self.edges:
            if a in placed or b in placed:
                continue
            ba, bb = block_of[a], block_of[b]
            if ba != bb:
                graph.setdefault(ba, []).append((bb, a, b, c))
        roots = list(dict.fromkeys(block_of[n] for n in self._nodes(canonical=True)
                                    if n not in placed))
        cycle = _find_cycle(graph, roots)
        hops: list[tuple[str, str, str]] = []
        names: list[str] = []
        for i, (_, a, b, c) in enumerate(cycle):
            entered = cycle[i - 1][2]  # the member the previous edge entered
            if entered != a:
                hops.append((entered, a, self._inside_block(blocks[block_of[a]], entered, a)))
                names.append(entered)
            hops.append((a, b, c.describe() + self._absent_note(a, b)))
            names.append(a)
        lines = [f"  {a} -> {b}: {text}" for a, b, text in hops]
        raise CycleError(
            f"ordering constraints form a cycle in the {self.chain} chain: "
            f"{' -> '.join([*names, names[0]])}\n" + "\n".join(lines)
            + "\nRemove or relax one of these constraints.",
            cycle=names,
        )

    def _inside_block(self, block: list[str], entered: str, leaving: str) -> str:
        glue = "; ".join(c.describe() for c in self._glue_of(block))
        if block.index(entered) < block.index(leaving):
            return f"{entered} is glued to {leaving}: {glue}"
        return (f"{glue} (an immediately_* pair moves as one block, so nothing can come "
                "between them)")

    def _absent_note(self, *nodes: str) -> str:
        notes = [f"{n} is not in the {self.chain} chain ({self.absent[n]}) but still orders it"
                 for n in nodes if n in self.absent]
        return f" ({'; '.join(notes)})" if notes else ""


def _reachable(start: int, graph: list[list[int]]) -> set[int]:
    seen = {start}
    stack = [start]
    while stack:
        for nxt in graph[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def _find_cycle(graph: dict[int, list[tuple[int, str, str, Constraint]]],
                roots: list[int]) -> list[tuple[int, str, str, Constraint]]:
    """An iterative DFS returning one cycle as (to block, from, to, constraint) hops."""
    state: dict[int, int] = {}
    for root in roots:
        if state.get(root):
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[tuple[int, str, str, Constraint]] = []
        on_path: dict[int, int] = {root: 0}
        state[root] = 1
        while stack:
            node, i = stack[-1]
            out = graph.get(node, [])
            if i < len(out):
                stack[-1] = (node, i + 1)
                hop = out[i]
                nxt = hop[0]
                if state.get(nxt) == 1 and nxt in on_path:
                    return [*path[on_path[nxt]:], hop]
                if not state.get(nxt):
                    state[nxt] = 1
                    path.append(hop)
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
