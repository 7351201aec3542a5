"""Property tests: the resolver against random constraint graphs, and the DeerFlow
fixture against shuffled ranks.

Every test here is derandomized (the same examples on every run, no example
database), so a failure reproduces on any machine, and sized to keep the whole
file to a few seconds.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from antler.chain import plan_chain
from antler.chain.config import parse_config
from antler.chain.resolver import resolve
from antler.errors import CycleError
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.manifest import Manifest
from antler.plugin_api.spec import Ordering, PluginSpec, PointSpec, SlotSpec
from tests.depth import Test, scaled
from tests.fixtures import (
    CUSTOM,
    CUSTOM_NAME,
    DOCUMENTED,
    EXTENSION_NAME,
    EXTENSION_PATH,
    EXTENSIONS,
    OPTIONAL_SECTIONS,
    config_text,
    deerflow_manifest,
    deerflow_registry,
    expected_order,
    with_ranks,
)
from tests.fixtures.noop import NoopMiddleware

DETERMINISTIC = settings(derandomize=True, database=None, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow])


def examples(count: int) -> Callable[[Test], Test]:
    """`count` examples in the long checks (`make test-slow`), a quarter in `make test`."""
    return scaled(count, DETERMINISTIC)


# Fields that order two plugins, and whether the declaring plugin comes first in
# the list. The hook-level ones are here on purpose: the resolver translates
# them, and the property is stated in list order.
ORDER_KINDS = {
    "before": True,
    "after": False,
    "outer_of": True,
    "inner_of": False,
    "after_model_after": True,
    "after_model_before": False,
}


# -- random constraint graphs ---------------------------------------------------------------


@dataclass
class Graph:
    """Specs drawn from a hidden order, and the list-order facts they declare."""

    specs: list[PluginSpec]
    edges: set[tuple[str, str]] = field(default_factory=set)   # (earlier, later)
    glued: list[tuple[str, str]] = field(default_factory=list)  # must be neighbours
    first: str | None = None
    last: str | None = None
    point: PointSpec | None = None
    before_point: set[str] = field(default_factory=set)
    after_point: set[str] = field(default_factory=set)


@st.composite
def graphs(draw, *, cyclic: bool = False) -> Graph:
    """A constraint graph. Acyclic ones are consistent with a hidden order; cyclic
    ones add one back edge closing a declared forward path."""
    n = draw(st.integers(2 if cyclic else 1, 14))
    hidden = draw(st.permutations([f"p{i}" for i in range(n)]))
    orders: dict[str, dict] = {name: {} for name in hidden}
    graph = Graph(specs=[])

    def declare(i: int, j: int) -> None:
        """Declare that hidden[i] comes before hidden[j] in the list, by a random field."""
        kind = draw(st.sampled_from(sorted(ORDER_KINDS)))
        owner, target = ((hidden[i], hidden[j]) if ORDER_KINDS[kind]
                         else (hidden[j], hidden[i]))
        targets = orders[owner].setdefault(kind, [])
        if target not in targets:
            targets.append(target)
        graph.edges.add((hidden[i], hidden[j]))

    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                          max_size=3 * n))
    for i, j in pairs:
        if i < j:
            declare(i, j)
    if cyclic:
        # A forward path through 2+ distinct plugins, then the edge that closes it.
        path = sorted(draw(st.sets(st.integers(0, n - 1), min_size=2, max_size=n)))
        for i, j in itertools.pairwise(path):
            declare(i, j)
        kind = draw(st.sampled_from(sorted(ORDER_KINDS)))
        last, first = hidden[path[-1]], hidden[path[0]]
        owner, target = (last, first) if ORDER_KINDS[kind] else (first, last)
        orders[owner].setdefault(kind, []).append(target)
        graph.edges.add((last, first))
    else:
        # Adjacency only between hidden neighbours, declared from either side.
        for i in range(n - 1):
            if draw(st.integers(0, 3)) == 0:
                a, b = hidden[i], hidden[i + 1]
                if draw(st.booleans()):
                    orders[a]["immediately_before"] = b
                else:
                    orders[b]["immediately_after"] = a
                graph.glued.append((a, b))
        if draw(st.booleans()):
            graph.first = hidden[0]
            orders[hidden[0]]["position"] = "first"
        if n > 1 and draw(st.booleans()):
            graph.last = hidden[-1]
            orders[hidden[-1]]["position"] = "last"
        glued = set(graph.glued)
        cuts = [k for k in range(1, n) if (hidden[k - 1], hidden[k]) not in glued]
        if cuts and draw(st.booleans()):
            # A synchronization point between hidden[k-1] and hidden[k], referenced from
            # both sides and declaring constraints of its own. The cut never splits an
            # adjacency pair (see the strict xfails in test_resolver.py), and `first` /
            # `last` only ever fall before / after it.
            k = draw(st.sampled_from(cuts))
            graph.before_point = set(draw(st.sets(st.sampled_from(hidden[:k]))))
            graph.after_point = set(draw(st.sets(st.sampled_from(hidden[k:]))))
            own_after = sorted(p for p in graph.before_point if draw(st.booleans()))
            own_before = sorted(p for p in graph.after_point if draw(st.booleans()))
            graph.point = PointSpec(name="mid", after=own_after, before=own_before)
            for name in graph.before_point - set(own_after):
                orders[name].setdefault("before", []).append("@mid")
            for name in graph.after_point - set(own_before):
                orders[name].setdefault("after", []).append("@mid")
    ranks = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    graph.specs = [PluginSpec(name=name, factory="m:f", order=Ordering(**orders[name]),
                              rank=rank) for name, rank in zip(hidden, ranks, strict=True)]
    graph.specs = draw(st.permutations(graph.specs))  # the input order is arbitrary too
    return graph


def resolve_graph(graph: Graph, specs: list[PluginSpec] | None = None) -> list[str]:
    points = [graph.point] if graph.point else []
    return resolve(specs or graph.specs, points=points).order


@examples(300)
@given(graph=graphs(), reorder=st.randoms(use_true_random=False))
def test_acyclic_constraints_are_all_respected(graph, reorder):
    order = resolve_graph(graph)
    index = {name: i for i, name in enumerate(order)}
    assert sorted(order) == sorted(s.name for s in graph.specs)
    for a, b in graph.edges:
        assert index[a] < index[b], f"{a} must precede {b}: {order}"
    for a, b in graph.glued:
        assert index[b] == index[a] + 1, f"{a} must sit immediately before {b}: {order}"
    if graph.first:
        assert order[0] == graph.first
    if graph.last:
        assert order[-1] == graph.last
    if graph.point:
        required_before = graph.before_point | set(graph.point.after)
        required_after = graph.after_point | set(graph.point.before)
        if required_before and required_after:
            assert max(index[n] for n in required_before) < min(index[n] for n in
                                                                 required_after)
    # Independent of the order the specs arrive in.
    shuffled = graph.specs[:]
    reorder.shuffle(shuffled)
    assert resolve_graph(graph, shuffled) == order


@examples(200)
@given(graph=graphs(cyclic=True))
def test_cycles_are_reported_as_a_real_cycle_of_declared_edges(graph):
    with pytest.raises(CycleError) as info:
        resolve_graph(graph)
    cycle = info.value.cycle
    assert len(cycle) >= 2
    assert len(set(cycle)) == len(cycle), f"a cycle visits each node once: {cycle}"
    for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        assert (a, b) in graph.edges, f"{a} -> {b} is not a declared edge: {cycle}"
    message = str(info.value)
    assert " -> ".join([*cycle, cycle[0]]) in message
    for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        assert f"  {a} -> {b}: " in message


@dataclass
class Absent:
    spec: PluginSpec
    reason: str = "off"


def closure(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Every (earlier, later) pair the edges imply, transitively."""
    succ: dict[str, set[str]] = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    pairs = set()
    for start in succ:
        stack, seen = [start], set()
        while stack:
            for nxt in succ.get(stack.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        pairs |= {(start, n) for n in seen}
    return pairs


@examples(200)
@given(graph=graphs(), data=st.data())
def test_absent_plugins_keep_every_order_they_carry(graph, data):
    off = data.draw(st.sets(st.sampled_from([s.name for s in graph.specs])))
    present = [s for s in graph.specs if s.name not in off]
    absent = {s.name: Absent(s) for s in graph.specs if s.name in off}
    points = [graph.point] if graph.point else []
    order = resolve(present, absent=absent, points=points).order
    index = {name: i for i, name in enumerate(order)}
    assert sorted(order) == sorted(s.name for s in present)
    for a, b in closure(graph.edges):
        if a in index and b in index:
            assert index[a] < index[b], f"{a} must precede {b} through {sorted(off)}: {order}"
    for a, b in graph.glued:
        if a in index and b in index:
            assert index[b] == index[a] + 1


# A small platform: guards g0 < g1 < g2 before @guards_end, tail plugins t0 < t1 after
# @tail_start, and the custom and extensions slots between them.
PLATFORM_POINTS = [PointSpec(name="guards_end"), PointSpec(name="custom_end",
                                                           after=["@guards_end"]),
                   PointSpec(name="tail_start", after=["@custom_end"])]
PLATFORM_SLOTS = [SlotSpec(name="custom", start="@guards_end", end="@custom_end"),
                  SlotSpec(name="extensions", start="@custom_end", end="@tail_start")]
GUARDS = [PluginSpec(name=f"g{i}", factory="m:f", rank=i, order=Ordering(
    after=[f"g{i - 1}"] if i else [], position="first" if i == 0 else None,
    before=["@guards_end"])) for i in range(3)]
TAIL = [PluginSpec(name=f"t{i}", factory="m:f", rank=10 + i, order=Ordering(
    after=[f"t{i - 1}" if i else "@tail_start"])) for i in range(2)]


@st.composite
def partial_plugins(draw) -> list[PluginSpec]:
    """Third-party plugins with one-sided constraints on guards, tail plugins or each other."""
    count = draw(st.integers(1, 5))
    names = [f"x{i}" for i in range(count)]
    specs = []
    for i, name in enumerate(names):
        kind = draw(st.sampled_from(["after", "before", "outer_of", "after_model_after",
                                     "inner_of", "none"]))
        earlier = [g.name for g in GUARDS] + names[:i]
        later = [t.name for t in TAIL] + names[i + 1:]
        fields: dict = {}
        if kind in ("after", "inner_of"):
            fields[kind] = [draw(st.sampled_from(earlier))]
        elif kind in ("before", "outer_of", "after_model_after"):
            fields[kind] = [draw(st.sampled_from(later))]
        specs.append(PluginSpec(name=name, factory="m:f", order=Ordering(**fields),
                                rank=draw(st.integers(-5, 100))))
    return specs


@examples(200)
@given(extra=partial_plugins(), data=st.data())
def test_partial_constraints_keep_a_plugin_in_its_slot(extra, data):
    known = [*GUARDS, *TAIL, *extra]
    off = data.draw(st.sets(st.sampled_from([s.name for s in known if s.name != "g0"])))
    present = [s for s in known if s.name not in off]
    res = resolve(present, absent={s.name: Absent(s) for s in known if s.name in off},
                  points=PLATFORM_POINTS, slots=PLATFORM_SLOTS, default_slot="extensions")
    start, end = res.point_positions["@custom_end"], res.point_positions["@tail_start"]
    for spec in extra:
        if spec.name in res.placements:
            assert start <= res.order.index(spec.name) < end, (spec.name, res.order)


# -- the DeerFlow fixture under shuffled ranks --------------------------------------------------

# Ordering facts the chain's description states (docs/chain.md), as (earlier, later) in
# list order, checked whenever both plugins take part. The comment says which statement each is.
STATED_BEFORE = [
    ("tool_output_budget", "tool_result_sanitization"),   # #3: sanitization inner of budget
    ("authorization", "guardrail"),                       # #9: authorization outermost
    ("read_before_write", "tool_progress"),               # #11: outside ToolProgress
    ("read_before_write", "tool_error_handling"),         # #11: outside ToolErrorHandling
    ("tool_progress", "tool_error_handling"),             # #12: outer wrapper around it
    ("thread_data", "uploads"),                           # layers: ThreadData -> Uploads
    ("uploads", "sandbox"),                               # layers: -> Sandbox
    ("thread_data", "sandbox"),                           # layers: sandbox needs the thread id
    ("sandbox", "dangling_tool_call"),                    # layers: -> Dangling
    ("uploads", "dangling_tool_call"),                    # layers: after uploads rewrote messages
    ("tool_error_handling", "dynamic_context"),           # lead-only after the base
    ("tool_error_handling", "skill_activation"),          # lead-only after the base
    ("durable_context", "summarization"),                 # #17
    ("dangling_tool_call", "summarization"),              # layers
    ("summarization", "todo"),                            # layers
    ("summarization", "title"),                           # layers
    ("title", "memory"),                                  # layers
    ("mcp_routing", "deferred_tool_filter"),              # #24
    ("durable_context", "system_message_coalescing"),     # #17/#26: coalescer sees its
]                                                         # system message
ADJACENT = {
    "lead": [("skill_activation", "skill_tool_policy"),              # #16
             ("skill_tool_policy", "durable_context")],              # #16
    "subagent": [("skill_activation", "skill_tool_policy"),          # #16
                 ("durable_context", "summarization"),               # #17 (subagent)
                 ("subagent_date_context", "system_message_coalescing")],  # #26
}
LAST = {"lead": "clarification"}                                     # #35


def stated_invariants(chain: str, order: list[str], custom: list[str],
                      extensions: list[str]) -> None:
    """Assert every ordering statement of docs/chain.md that applies to `order`."""
    index = {name: i for i, name in enumerate(order)}
    present = set(order)
    # First and last (#1, #35).
    assert order[0] == "input_sanitization"
    if chain in LAST:
        assert order[-1] == LAST[chain]
    for a, b in STATED_BEFORE:
        if a in present and b in present:
            assert index[a] < index[b], f"{a} must precede {b}"
    for a, b in ADJACENT[chain]:
        if a in present and b in present:
            assert index[b] == index[a] + 1, f"{b} must sit immediately after {a}"
    # after_model order (#34): safety's after_model runs before the terminal
    # response's and every custom or configured extension's; LangChain runs
    # after_model in reverse list order.
    if "safety_finish_reason" in present:
        dispatch = list(reversed(order))
        for other in ["terminal_response", *custom, *extensions]:
            if other in present:
                assert dispatch.index("safety_finish_reason") < dispatch.index(other)
    # The slots (#30, #31): custom middlewares after the built-in guards, then
    # configured extensions, then the tail.
    documented = DOCUMENTED[chain]
    guards = [n for n in documented[:documented.index(CUSTOM)] if n in present]
    tail = [n for n in documented[documented.index(EXTENSIONS) + 1:] if n in present]
    sequence = [*guards, *custom, *extensions, *tail]
    for earlier, later in itertools.pairwise(custom + extensions):
        assert index[earlier] < index[later]
    for member in custom + extensions:
        assert all(index[g] < index[member] for g in guards), f"{member} must follow the guards"
        assert all(index[member] < index[t] for t in tail), f"{member} must precede the tail"
    assert sorted(sequence) == sorted(order)


@functools.cache
def base_manifest() -> Manifest:
    return deerflow_manifest()


@functools.cache
def operator_config(sections: frozenset[str], extension: bool):
    # The parsed config depends only on the sections the plugins declare, not on
    # their ranks, so one registry serves to parse it for every shuffle.
    return parse_config(config_text(sections, [EXTENSION_PATH] if extension else []),
                        deerflow_registry(base_manifest()))


ALL_ON = dict(sections=frozenset(OPTIONAL_SECTIONS), plan_mode=True, vision=True,
              subagents=True, extension=True, custom=True)
ALL_OFF = dict(sections=frozenset({"read_before_write"}), plan_mode=False, vision=False,
               subagents=False, extension=False, custom=False)


@examples(150)
@given(
    seed_ranks=st.permutations(range(len(deerflow_manifest().plugins))),
    chain=st.sampled_from(["lead", "subagent"]),
    sections=st.frozensets(st.sampled_from(OPTIONAL_SECTIONS)),
    plan_mode=st.booleans(), vision=st.booleans(), subagents=st.booleans(),
    extension=st.booleans(), custom=st.booleans(),
)
@example(seed_ranks=list(range(len(deerflow_manifest().plugins)))[::-1], chain="lead", **ALL_ON)
@example(seed_ranks=list(range(len(deerflow_manifest().plugins)))[::-1], chain="subagent",
         **ALL_ON)
@example(seed_ranks=list(range(len(deerflow_manifest().plugins)))[::-1], chain="lead", **ALL_OFF)
def test_shuffled_ranks_keep_every_stated_invariant_and_the_documented_order(
        seed_ranks, chain, sections, plan_mode, vision, subagents, extension, custom):
    registry = deerflow_registry(with_ranks(base_manifest(), seed_ranks))
    runtime = RuntimeOptions(plan_mode=plan_mode, supports_vision=vision,
                             subagents_enabled=subagents)
    custom_names = [CUSTOM_NAME] if custom else []
    extension_names = [EXTENSION_NAME] if extension else []
    result = plan_chain(operator_config(sections, extension), chain, runtime,
                        registry=registry,
                        custom_middlewares=[NoopMiddleware()] if custom else [])
    stated_invariants(chain, result.order, custom_names, extension_names)
    # Stronger than the invariants: the constraints carry the whole documented
    # order, so no rank can move any plugin, whatever subset is enabled.
    assert result.order == expected_order(chain, result.order, custom_names, extension_names)


def test_the_invariant_check_catches_a_rank_driven_order():
    # Guard against a vacuous property: the same check must reject an order the
    # constraints forbid (safety_finish_reason ahead of an extension).
    order = expected_order("lead", DOCUMENTED["lead"], [CUSTOM_NAME], [EXTENSION_NAME])
    order.remove("safety_finish_reason")
    order.insert(order.index(EXTENSION_NAME), "safety_finish_reason")
    with pytest.raises(AssertionError):
        stated_invariants("lead", order, [CUSTOM_NAME], [EXTENSION_NAME])
