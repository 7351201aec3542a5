"""The resolver: every error it raises, and what it does when nothing is wrong.

Manifests here are YAML text, so each test can assert that a message names the
file and line where the offending constraint was declared, which is what the
person fixing it needs.
"""

from __future__ import annotations

import itertools
import random
import re
import textwrap
from dataclasses import dataclass

import pytest

from antler.chain.resolver import Resolution, resolve
from antler.errors import (
    AdjacencyConflictError,
    CycleError,
    PositionConflictError,
    ResolutionError,
    UnknownReferenceError,
    UnmetRequirementError,
)
from antler.plugin_api.manifest import Manifest, load_manifest_text
from antler.plugin_api.spec import PluginSpec

SOURCE = "m.yaml"

# The platform's point and slot layout, declared here so the tests below do not
# depend on the contents of Antler's own manifest.
POINTS = """\
api_version: 1
default_slot: extensions
points:
  - name: guards_end
  - name: custom_end
    after: ["@guards_end"]
  - name: tail_start
    after: ["@custom_end"]
slots:
  - name: custom
    start: "@guards_end"
    end: "@custom_end"
  - name: extensions
    start: "@custom_end"
    end: "@tail_start"
"""


def manifest(body: str, *, points: bool = False) -> tuple[Manifest, str]:
    """A manifest from `plugins:` entries (indented YAML), and its full text."""
    head = POINTS if points else "api_version: 1\n"
    text = head + "plugins:\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "  ") + "\n"
    return load_manifest_text(text, SOURCE), text


def line_of(text: str, name: str) -> str:
    """'m.yaml:N' for the entry of plugin `name`, as provenance prints it."""
    for number, line in enumerate(text.splitlines(), start=1):
        if re.fullmatch(rf"\s*- name: {name}\s*", line):
            return f"{SOURCE}:{number}"
    raise AssertionError(f"no entry for {name!r}")


def run(body: str, *, chain: str = "lead", absent: dict[str, str] | None = None,
        points: bool = False) -> Resolution:
    m, _ = manifest(body, points=points)
    return resolve(m.plugins, chain=chain, absent=absent, points=m.points, slots=m.slots,
                   default_slot=m.default_slot)


@dataclass
class Absent:
    """What `plan_chain` passes for a known plugin outside the chain (an Exclusion)."""

    spec: PluginSpec
    reason: str


def raises(error: type[Exception], body: str, **kwargs) -> tuple[str, str]:
    """The message `error` carries when resolving `body`, and the manifest text."""
    _, text = manifest(body, points=kwargs.get("points", False))
    with pytest.raises(error) as info:
        run(body, **kwargs)
    return str(info.value), text


def entry(name: str, order: str = "", extra: str = "") -> str:
    lines = [f"- name: {name}", "  factory: m:f"]
    if extra:
        lines.append(f"  {extra}")
    if order:
        lines.append(f"  order: {order}")
    return "\n".join(lines) + "\n"


# -- cycles -----------------------------------------------------------------------------------


def test_cycle_prints_the_whole_cycle_and_where_each_constraint_was_declared():
    body = (entry("a", "{before: [b]}") + entry("b", "{before: [c]}")
            + entry("c", "{before: [a]}") + entry("d", "{after: [a]}"))
    message, text = raises(CycleError, body)
    first_line, *hops = message.splitlines()
    # d cannot be placed either, but it is downstream of the cycle, not part of it.
    assert first_line == "ordering constraints form a cycle in the lead chain: a -> b -> c -> a"
    assert hops == [
        f"  a -> b: a declares before: b [{line_of(text, 'a')}]",
        f"  b -> c: b declares before: c [{line_of(text, 'b')}]",
        f"  c -> a: c declares before: a [{line_of(text, 'c')}]",
        "Remove or relax one of these constraints.",
    ]


def test_cycle_error_exposes_the_cycle_as_data():
    body = entry("a", "{after: [c]}") + entry("b", "{after: [a]}") + entry("c", "{after: [b]}")
    with pytest.raises(CycleError) as info:
        run(body)
    assert info.value.cycle == ["a", "b", "c"]


def test_cycle_through_hook_intent_explains_the_list_order_it_implies():
    # outer_of puts a before b in the list; after_model_before puts it after b.
    message, _ = raises(CycleError, entry("a", "{outer_of: [b], after_model_before: [b]}")
                        + entry("b"))
    assert "a declares outer_of: b (the first wrap_* middleware in the list is the outermost " \
           "wrapper)" in message
    assert "a declares after_model_before: b (after_model hooks run in reverse list order)" \
           in message


def test_cycle_through_a_point_names_the_point_and_the_platform_declaration():
    # x must precede @guards_end, yet it also asks to come after the tail.
    body = entry("x", '{before: ["@guards_end"], after: ["@tail_start"]}')
    message, text = raises(CycleError, body, points=True)
    assert "@guards_end -> @custom_end -> @tail_start -> x -> @guards_end" in message
    assert f"@custom_end declares after: @guards_end [{line_of(text, 'custom_end')}]" in message
    assert f"x declares before: @guards_end [{line_of(text, 'x')}]" in message


def test_cycle_closed_by_an_adjacency_names_the_adjacency():
    body = entry("a", "{immediately_before: b}") + entry("b") + entry("c", "{after: [b], "
                                                                          "before: [a]}")
    message, _ = raises(CycleError, body)
    assert "a declares immediately_before: b" in message
    assert "c declares before: a" in message


# -- unknown references -----------------------------------------------------------------------


def test_unknown_plugin_reference_suggests_the_nearest_name():
    body = entry("sandbox") + entry("audit", "{after: [sandbx]}")
    message, text = raises(UnknownReferenceError, body)
    assert (f"audit [{line_of(text, 'audit')}] declares after: 'sandbx', but no installed "
            "plugin is named 'sandbx' (did you mean 'sandbox'?)") in message


def test_unknown_reference_without_a_near_miss_has_no_suggestion():
    message, _ = raises(UnknownReferenceError, entry("sandbox") + entry("x", "{before: [zzz]}"))
    assert "no installed plugin is named 'zzz'" in message
    assert "did you mean" not in message


def test_unknown_reference_suggests_known_but_absent_plugins_too():
    # The typo's target exists but is disabled: the suggestion still helps.
    message, _ = raises(UnknownReferenceError, entry("x", "{after: [sumarization]}"),
                        absent={"summarization": "off by default"})
    assert "(did you mean 'summarization'?)" in message


def test_unknown_point_suggests_the_nearest_point():
    message, text = raises(UnknownReferenceError, entry("x", '{before: ["@guard_end"]}'),
                           points=True)
    assert (f"x [{line_of(text, 'x')}] declares before: '@guard_end', but no manifest declares "
            "that point (did you mean '@guards_end'?)") in message


def test_unknown_slot_suggests_the_nearest_slot_and_lists_the_known_ones():
    message, _ = raises(UnknownReferenceError, entry("x", "{slot: extension}"), points=True)
    assert "asks for slot 'extension', which no manifest declares (did you mean " \
           "'extensions'?)" in message
    assert "known slots: custom, extensions" in message


def test_slot_bounded_by_an_undeclared_point_is_reported():
    text = ("api_version: 1\npoints:\n  - name: start\nslots:\n  - name: s\n"
            "    start: \"@start\"\n    end: \"@ende\"\nplugins: []\n")
    m = load_manifest_text(text, SOURCE)
    expected = "slot 's' [m.yaml:5] is bounded by '@ende', which no manifest declares"
    with pytest.raises(UnknownReferenceError, match=re.escape(expected)):
        resolve([], points=m.points, slots=m.slots)


# -- adjacency --------------------------------------------------------------------------------


def test_two_plugins_immediately_after_the_same_one_conflict():
    body = entry("x") + entry("a", "{immediately_after: x}") + entry("b", "{immediately_after: x}")
    message, text = raises(AdjacencyConflictError, body)
    assert "x cannot be immediately followed by both a and b" in message
    assert f"a declares immediately_after: x [{line_of(text, 'a')}]" in message
    assert f"b declares immediately_after: x [{line_of(text, 'b')}]" in message


def test_two_plugins_immediately_before_the_same_one_conflict():
    body = entry("x") + entry("a", "{immediately_before: x}") + entry("b", "{immediately_before: "
                                                                         "x}")
    message, _ = raises(AdjacencyConflictError, body)
    assert "x cannot be immediately preceded by both a and b" in message


def test_adjacency_ring_is_a_conflict():
    body = entry("a", "{immediately_before: b}") + entry("b", "{immediately_before: a}")
    message, _ = raises(AdjacencyConflictError, body)
    assert "adjacency constraints form a ring" in message
    assert "a declares immediately_before: b" in message
    assert "b declares immediately_before: a" in message


def test_ordering_that_contradicts_an_adjacency_is_a_conflict():
    body = entry("a", "{immediately_before: b}") + entry("b", "{before: [a]}")
    message, text = raises(AdjacencyConflictError, body)
    assert f"b declares before: a [{line_of(text, 'b')}], but adjacency constraints place a " \
           "before b" in message
    assert "a declares immediately_before: b" in message


def test_first_plugin_cannot_have_something_glued_before_it():
    body = entry("a", "{position: first}") + entry("b", "{immediately_before: a}")
    message, text = raises(AdjacencyConflictError, body)
    assert f"a claims position: first [{line_of(text, 'a')}] but an immediately_* constraint " \
           "puts b right before it" in message


def test_last_plugin_cannot_have_something_glued_after_it():
    body = entry("a", "{position: last}") + entry("b", "{immediately_after: a}")
    message, _ = raises(AdjacencyConflictError, body)
    assert "a claims position: last" in message
    assert "puts b right after it" in message


def test_nothing_can_sit_immediately_next_to_a_point():
    message, text = raises(AdjacencyConflictError, entry("x", '{immediately_after: "@guards_end"}'),
                           points=True)
    assert (f"x [{line_of(text, 'x')}] declares immediately_after: '@guards_end'; a point has "
            "no width") in message
    assert "Use after/before instead." in message


# -- positions --------------------------------------------------------------------------------


@pytest.mark.parametrize("position", ["first", "last"])
def test_two_plugins_cannot_claim_the_same_position(position):
    body = (entry("a", f"{{position: {position}}}") + entry("b")
            + entry("c", f"{{position: {position}}}"))
    message, text = raises(PositionConflictError, body, chain="subagent")
    assert (f"2 plugins claim position: {position} in the subagent chain: "
            f"a [{line_of(text, 'a')}]; c [{line_of(text, 'c')}]. Only one can") in message


def test_first_plugin_with_a_predecessor_is_a_conflict():
    body = entry("a", "{position: first, after: [b]}") + entry("b")
    message, text = raises(PositionConflictError, body)
    assert f"a claims position: first [{line_of(text, 'a')}] but must come after another node: " \
           f"a declares after: b [{line_of(text, 'a')}]" in message


def test_last_plugin_with_a_successor_is_a_conflict():
    body = entry("a", "{position: last}") + entry("b", "{after: [a]}")
    message, text = raises(PositionConflictError, body)
    assert "a claims position: last" in message
    assert f"another plugin must come after it: b declares after: a [{line_of(text, 'b')}]" \
           in message


def test_first_and_last_hold_against_ranks():
    # Ranks are manifest positions: without the positions, the order would be z, m, a.
    order = run(entry("z", "{position: last}") + entry("m") + entry("a", "{position: first}")).order
    assert order == ["a", "m", "z"]


# -- requires ---------------------------------------------------------------------------------


def test_unmet_requirement_names_the_chain_the_reason_and_the_fix():
    body = entry("mcp_routing", "{requires: [deferred_tool_filter]}")
    message, text = raises(UnmetRequirementError, body, chain="subagent",
                           absent={"deferred_tool_filter": "disabled by config (c.yaml:3:12)"})
    assert (f"plugin 'mcp_routing' requires 'deferred_tool_filter' in the subagent chain, but "
            f"'deferred_tool_filter' is not there: disabled by config (c.yaml:3:12) [requires "
            f"declared at {line_of(text, 'mcp_routing')}]. Enable 'deferred_tool_filter' or "
            f"disable 'mcp_routing'.") in message


def test_requirement_on_an_unknown_plugin_suggests_the_nearest_name():
    message, _ = raises(UnknownReferenceError, entry("a", "{requires: [sandbx]}")
                        + entry("sandbox"))
    assert "a [m.yaml:3] declares requires: 'sandbx'" in message
    assert "(did you mean 'sandbox'?)" in message


def test_requires_takes_plugins_not_points():
    message, text = raises(UnknownReferenceError, entry("x", '{requires: ["@guards_end"]}'),
                           points=True)
    assert (f"plugin 'x' [{line_of(text, 'x')}] requires '@guards_end', but `requires` takes "
            "plugin names; use `after`/`before` to order against a point") in message


def test_met_requirement_is_recorded_but_does_not_order():
    res = run(entry("a", "{requires: [b]}") + entry("b"))
    assert res.order == ["a", "b"]  # requires is about presence, not order
    assert any("a declares requires: b" in r for r in res.placements["a"].reasons())


# -- self-reference and duplicates ------------------------------------------------------------


@pytest.mark.parametrize("order", ["{after: [a]}", "{before: [a]}", "{outer_of: [a]}",
                                   "{immediately_after: a}", "{after_model_before: a}"])
def test_a_plugin_cannot_reference_itself(order):
    message, text = raises(ResolutionError, entry("a", order))
    kind = order.strip("{}").split(":")[0]
    assert f"a [{line_of(text, 'a')}] declares {kind}: itself; remove it" in message


def test_duplicate_names_in_one_resolution_are_an_error():
    m, _ = manifest(entry("a"))
    twin = m.plugins[0].model_copy()
    expected = ("plugin 'a' is declared twice: at m.yaml:3 and at m.yaml:3; plugin names must "
                "be unique")
    with pytest.raises(ResolutionError, match=re.escape(expected)):
        resolve([m.plugins[0], twin])


# -- absent plugins: zero-width nodes ---------------------------------------------------


def test_an_absent_plugin_keeps_order_transitive():
    # a after b, b after c: with b off, a still follows c, whatever the ranks say.
    body = entry("a", "{after: [b]}") + entry("b", "{after: [c]}") + entry("c")
    m, text = manifest(body)
    a, b, c = m.plugins
    res = resolve([a, c], absent={"b": Absent(b, "off by default")})
    assert res.order == ["c", "a"]
    assert f"a declares after: b [{line_of(text, 'a')}]; b is not in the chain (off by " \
           "default), the order still holds through it" in res.placements["a"].reasons()
    assert f"b declares after: c [{line_of(text, 'b')}]; b is not in the chain (off by " \
           "default), the order still holds through it" in res.placements["c"].reasons()
    # Without b's declaration (a name only), nothing carries a after c: rank decides.
    assert resolve([a, c], absent={"b": "off"}).order == ["a", "c"]


def test_an_adjacency_to_an_absent_plugin_still_orders():
    # By rank alone c would come first; a sits before gone, and gone before c.
    body = (entry("a", "{immediately_before: gone}", "rank: 5") + entry("gone", "{before: [c]}")
            + entry("b", extra="rank: 3") + entry("c", extra="rank: 0"))
    m, _ = manifest(body)
    a, gone, b, c = m.plugins
    res = resolve([a, b, c], absent={"gone": Absent(gone, "off")})
    assert res.order == ["b", "a", "c"]
    assert any(r.startswith("a declares immediately_before: gone") for r in
               res.placements["a"].reasons())


def test_absent_plugins_claim_no_position_and_require_nothing():
    body = (entry("a", "{position: first, requires: [gone]}") + entry("b", "{position: first}")
            + entry("c") + entry("gone"))
    m, _ = manifest(body)
    a, b, c, _gone = m.plugins
    res = resolve([b, c], absent={"a": Absent(a, "off"), "gone": "off"})
    assert res.order == ["b", "c"]


def test_a_zero_width_node_before_the_first_plugin_is_harmless():
    body = entry("a", "{position: first}") + entry("gone", "{before: [a]}") + entry("b")
    m, _ = manifest(body)
    a, gone, b = m.plugins
    assert resolve([a, b], absent={"gone": Absent(gone, "off")}).order == ["a", "b"]


def test_bad_declarations_of_an_absent_plugin_are_warnings_not_errors():
    body = entry("a") + entry("off_one", "{after: [sandbx], immediately_before: a, "
                                         "slot: nowhere}")
    m, _ = manifest(body)
    a, off_one = m.plugins
    res = resolve([a], absent={"off_one": Absent(off_one, "disabled by config")})
    assert res.order == ["a"]
    assert any("off_one" in w and "'sandbx'" in w and "ignored while off_one is not in the "
               "chain" in w for w in res.warnings)
    with pytest.raises(UnknownReferenceError) as info:
        resolve([a, off_one])
    assert info.value.plugins == ("off_one",)


def test_a_cycle_through_an_absent_plugin_names_it():
    body = entry("a", "{before: [gone]}") + entry("gone", "{before: [b]}") + entry("b",
                                                                                   "{before: [a]}")
    m, _ = manifest(body)
    a, gone, b = m.plugins
    with pytest.raises(CycleError) as info:
        resolve([a, b], absent={"gone": Absent(gone, "off by default")})
    assert set(info.value.cycle) == {"a", "gone", "b"}
    assert "gone is not in the lead chain (off by default) but still orders it" \
        in str(info.value)
    assert set(info.value.plugins) == {"a", "gone", "b"}


# -- per-chain overrides ----------------------------------------------------------------------


def test_chain_override_replaces_only_the_fields_it_sets():
    body = """\
    - name: a
      factory: m:f
      order: {before: [b], after: [x]}
      chain_overrides:
        subagent:
          order: {before: [], after: [b, x]}
    - name: b
      factory: m:f
    - name: x
      factory: m:f
      order: {before: [b]}
    """
    assert run(body, chain="lead").order == ["x", "a", "b"]
    assert run(body, chain="subagent").order == ["x", "b", "a"]


def test_chain_override_can_drop_an_adjacency_with_null():
    body = """\
    - name: a
      factory: m:f
      order: {immediately_before: c}
      chain_overrides:
        subagent:
          order: {immediately_before: null}
    - name: b
      factory: m:f
      order: {after: [a]}
    - name: c
      factory: m:f
      order: {after: [a]}
    """
    assert run(body, chain="lead").order == ["a", "c", "b"]
    assert run(body, chain="subagent").order == ["a", "b", "c"]


def test_override_on_one_chain_leaves_the_other_alone():
    body = """\
    - name: a
      factory: m:f
      order: {position: last}
      chain_overrides:
        lead:
          order: {position: first}
    - name: b
      factory: m:f
    """
    assert run(body, chain="lead").order == ["a", "b"]
    assert run(body, chain="subagent").order == ["b", "a"]


# -- hook intent ------------------------------------------------------------------------------

# Each case: (field `a` declares about b, the list order it must produce, the reason
# shown). The manifest lists the plugin that must end up second first, so that rank
# alone would give the wrong order and only the translation can give the right one.
HOOK_INTENT = [
    ("outer_of", ["a", "b"], "the first wrap_* middleware in the list is the outermost wrapper"),
    ("inner_of", ["b", "a"], "the first wrap_* middleware in the list is the outermost wrapper"),
    ("after_model_before", ["b", "a"], "after_model hooks run in reverse list order"),
    ("after_model_after", ["a", "b"], "after_model hooks run in reverse list order"),
]


@pytest.mark.parametrize(("kind", "expected", "why"), HOOK_INTENT)
def test_hook_intent_is_translated_to_list_order(kind, expected, why):
    declaring = entry("a", f"{{{kind}: [b]}}")
    body = entry("b") + declaring if expected[0] == "a" else declaring + entry("b")
    res = run(body)
    assert res.order == expected
    assert f"a declares {kind}: b ({why}) [{SOURCE}:" in "\n".join(res.placements["a"].reasons())


def test_after_model_before_means_the_after_model_hook_really_runs_first():
    # LangChain runs after_model in reverse list order: simulate that dispatch.
    res = run(entry("safety", "{after_model_before: [terminal]}") + entry("terminal"))
    after_model_dispatch = list(reversed(res.order))
    assert after_model_dispatch.index("safety") < after_model_dispatch.index("terminal")


def test_after_model_before_a_point_lands_after_the_point():
    body = entry("safety", '{after_model_before: ["@tail_start"]}') + entry("ext", "{slot: "
                                                                             "extensions}")
    assert run(body, points=True).order == ["ext", "safety"]


# -- slots ------------------------------------------------------------------------------------


def test_plugin_without_ordering_lands_in_the_default_slot():
    body = (entry("loose") + entry("custom_mw", "{slot: custom}")
            + entry("guard", '{before: ["@guards_end"]}')
            + entry("tail", '{after: ["@tail_start"]}'))
    res = run(body, points=True)
    # By rank alone `loose` would be first; the default slot puts it after the
    # guards and the custom slot, before the tail.
    assert res.order == ["guard", "custom_mw", "loose", "tail"]
    reasons = res.placements["loose"].reasons()
    assert any(r.startswith("loose slot bound: extensions (after @custom_end)")
               for r in reasons)
    assert any(r.startswith("loose slot bound: extensions (before @tail_start)")
               for r in reasons)


def test_explicit_slot_is_not_called_default():
    res = run(entry("x", "{slot: custom}"), points=True)
    assert any(r.startswith("x declares slot: custom (after @guards_end)")
               for r in res.placements["x"].reasons())


def test_without_a_default_slot_an_unordered_plugin_is_ranked_freely():
    m, _ = manifest(entry("loose") + entry("guard", '{before: ["@guards_end"]}'), points=True)
    slotted = resolve(m.plugins, points=m.points, slots=m.slots, default_slot="extensions")
    bare = resolve(m.plugins, points=m.points, slots=m.slots, default_slot=None)
    assert slotted.order == ["guard", "loose"]
    assert bare.order == ["loose", "guard"]
    assert bare.placements["loose"].constraints == []


# -- explanations -----------------------------------------------------------------------------


def test_reasons_list_constraints_from_both_sides_then_the_tie_break():
    body = (entry("a") + entry("b", "{after: [a], before: [gone]}")
            + entry("c", "{after: [b]}", "rank: 7"))
    _, text = manifest(body)
    res = run(body, absent={"gone": "disabled by config"})
    reasons = res.placements["b"].reasons()
    assert reasons == [
        f"b declares before: gone [{line_of(text, 'b')}]; gone is not in the chain (disabled "
        "by config), the order still holds through it",
        f"b declares after: a [{line_of(text, 'b')}]",
        f"c declares after: b [{line_of(text, 'c')}]",
        "tie-break among ready plugins: rank 1, then name",
    ]
    assert res.placements["c"].tie_break == "tie-break among ready plugins: rank 7, then name"
    assert [p.position for p in res.placements.values()] == [1, 2, 3]
    assert [s.name for s in res.specs()] == res.order == ["a", "b", "c"]


def test_adjacency_appears_in_the_reasons_of_both_plugins():
    res = run(entry("a", "{immediately_before: b}") + entry("x") + entry("b"))
    assert res.order == ["a", "b", "x"]
    for name in ("a", "b"):
        assert any("a declares immediately_before: b" in r
                   for r in res.placements[name].reasons())


# -- determinism ------------------------------------------------------------------------------


def test_ties_break_by_rank_then_name():
    body = entry("b", extra="rank: 1") + entry("c", extra="rank: 0") + entry("a", extra="rank: 1")
    assert run(body).order == ["c", "a", "b"]


def test_points_are_reached_as_soon_as_they_can_be():
    # t waits only for the (unconstrained) points; g is free but ranks worse. Were
    # points placed lazily, g would come first.
    m, _ = manifest(entry("t", '{after: ["@tail_start"]}') + entry("g", extra="rank: 5"),
                    points=True)
    res = resolve(m.plugins, points=m.points, slots=m.slots, default_slot=None)
    assert res.order == ["t", "g"]


def test_output_is_independent_of_input_order():
    body = (entry("a") + entry("b", "{after: [a]}") + entry("c", "{immediately_after: a}")
            + entry("d", "{outer_of: [a]}") + entry("e", "{slot: custom}")
            + entry("f", '{after_model_before: ["@tail_start"]}') + entry("g", extra="rank: 0"))
    m, _ = manifest(body, points=True)
    expected = resolve(m.plugins, points=m.points, slots=m.slots,
                       default_slot=m.default_slot).order
    # e is custom; g, the only one without ordering, ranks 0; d (rank 3) wraps a and leaves
    # its start to the default slot; a is glued to c; b only follows a; f's after_model must
    # run before the slots'.
    assert expected == ["e", "g", "d", "a", "c", "b", "f"]
    for perm in itertools.islice(itertools.permutations(m.plugins), 0, None, 97):
        got = resolve(list(perm), points=list(reversed(m.points)),
                      slots=list(reversed(m.slots)), default_slot=m.default_slot)
        assert got.order == expected


def test_random_shuffles_of_an_underconstrained_input_give_one_answer():
    # Every third plugin follows its predecessor; the rest are free, so most of the
    # order is decided by the tie-break, which must not depend on input order.
    body = "".join(entry(f"p{i}", f"{{after: [p{i - 1}]}}" if i % 3 == 1 else "",
                         f"rank: {i % 4}") for i in range(12))
    m, _ = manifest(body)
    first = resolve(m.plugins).order
    rng = random.Random(4)
    for _ in range(20):
        specs = m.plugins[:]
        rng.shuffle(specs)
        assert resolve(specs).order == first


# -- contradictions that run through an immediately_* block ---------------------------------


def test_contradiction_through_an_adjacency_block_names_the_plugins():
    # c must sit between a and b, which must be neighbours. This is what forgetting
    # `immediately_before: null` in a subagent override of the fixture produces.
    body = (entry("a", "{immediately_before: b, before: [c]}") + entry("b")
            + entry("c", "{before: [b]}"))
    with pytest.raises(CycleError) as info:
        run(body)
    message = str(info.value)
    assert all(f"{name} declares" in message for name in ("a", "c"))
    assert "moves as one block" in message
    assert set(info.value.cycle) == {"a", "b", "c"}


def test_last_plugin_may_precede_a_point_when_no_plugin_follows_it():
    body = entry("a", "{position: last, slot: extensions}") + entry("b", '{before: '
                                                                         '["@guards_end"]}')
    assert run(body, points=True).order == ["b", "a"]


def test_last_plugin_followed_by_a_plugin_through_a_point_is_a_position_conflict():
    body = (entry("a", '{position: last, before: ["@tail_start"]}')
            + entry("b", '{after: ["@tail_start"]}'))
    with pytest.raises(PositionConflictError) as info:
        run(body, points=True)
    assert "a claims position: last" in str(info.value)
    assert "b declares after: @tail_start" in str(info.value)


def test_point_between_an_adjacency_pair_is_a_named_cycle():
    # An immediately_* pair is one block: a point cannot fall between its members.
    body = (entry("x", '{immediately_before: y, before: ["@guards_end"]}')
            + entry("y", '{after: ["@guards_end"]}'))
    m, _ = manifest(body, points=True)
    with pytest.raises(CycleError) as info:
        resolve(m.plugins, points=m.points)
    assert set(info.value.cycle) == {"x", "y", "@guards_end"}
    assert "nothing can come between them" in str(info.value)


def test_a_plugin_that_only_requires_another_lands_in_the_default_slot():
    body = (entry("guard", '{before: ["@guards_end"]}')
            + entry("needy", "{requires: [guard]}"))
    placed = run(body, points=True).placements["needy"]
    assert any(c.kind == "slot bound" for c in placed.constraints)
    assert run(body, points=True).order == ["guard", "needy"]


def test_a_point_ordered_against_itself_is_refused():
    from antler.plugin_api.spec import PointSpec

    with pytest.raises(ResolutionError, match="itself"):
        resolve([], points=[PointSpec(name="p", after=["@p"])])


def test_a_cycle_beside_an_adjacency_pair_is_reported_as_itself():
    # The pair a|b is valid. The search used to follow a -> b and back along the
    # pair, and blamed `a immediately_before b` for the x <-> y cycle.
    body = (entry("a", "{immediately_before: b, after: [x]}") + entry("b")
            + entry("x", "{before: [y]}") + entry("y", "{before: [x]}"))
    with pytest.raises(CycleError) as info:
        run(body)
    assert info.value.cycle == ["x", "y"]
    assert "immediately_before" not in str(info.value)
    assert info.value.plugins == ("x", "y")


# -- partial constraints stay in their slot --------------------------------------------------

# The platform layout plus two built-in guards and a tail plugin with a before_agent hook.
GUARDS_AND_TAIL = (
    entry("title", '{after: [memory_like], before: ["@guards_end"]}')
    + entry("memory_like", '{before: ["@guards_end"]}')
    + entry("provenance", '{after: ["@tail_start"], hook_order: {before_agent: last}}',
            "hooks: [before_agent]")
)


def third_party(order: str, extra: str = "hooks: [before_agent]") -> str:
    rank = "" if "rank:" in extra else "rank: 100000\n  "
    return entry("acme", order, f"{rank}{extra}")


def test_after_alone_keeps_a_plugin_in_its_slot_before_the_tail():
    # Ranked low, acme would sit right after title, among the guards; `after: [title]`
    # does not say so, so the default slot holds it on both sides.
    res = run(GUARDS_AND_TAIL + third_party("{after: [title]}", "hooks: [before_agent]\n"
                                            "  rank: -1"), points=True)
    assert res.order == ["memory_like", "title", "acme", "provenance"]
    assert res.point_positions["@custom_end"] == 2
    reasons = res.placements["acme"].reasons()
    assert any(r.startswith("acme slot bound: extensions (before @tail_start)") for r in reasons)
    assert any(r.startswith("acme slot bound: extensions (after @custom_end)") for r in reasons)


def test_before_alone_keeps_a_plugin_after_the_slot_start():
    res = run(GUARDS_AND_TAIL + third_party("{before: [provenance]}"), points=True)
    assert res.point_positions["@custom_end"] <= res.order.index("acme")
    assert any(r.startswith("acme slot bound: extensions (after @custom_end)")
               for r in res.placements["acme"].reasons())


@pytest.mark.parametrize(("order", "region"), [
    ('{after: ["@tail_start"]}', "tail"),
    ("{after: [provenance]}", "tail"),
    ('{before: ["@guards_end"]}', "guards"),
    ("{before: [memory_like]}", "guards"),
])
def test_a_plugin_lands_among_the_guards_or_in_the_tail_only_when_it_says_so(order, region):
    res = run(GUARDS_AND_TAIL + third_party(order, "hooks: [after_model]"), points=True)
    at = res.order.index("acme")
    if region == "tail":
        assert at >= res.point_positions["@tail_start"]
    else:
        assert at < res.point_positions["@guards_end"]
    # Its own constraint already puts it past the slot: no bound on the open side.
    assert not any(c.kind == "slot bound" for c in res.placements["acme"].constraints)


def test_an_explicit_slot_bounds_both_sides_even_with_a_partial_constraint():
    res = run(GUARDS_AND_TAIL + third_party("{slot: custom, after: [title]}"), points=True)
    assert res.point_positions["@guards_end"] <= res.order.index("acme") \
        < res.point_positions["@custom_end"] + 1
    assert any(r.startswith("acme declares slot: custom (before @custom_end)")
               for r in res.placements["acme"].reasons())


def test_an_off_neighbour_does_not_drop_a_partial_plugin_among_the_guards():
    # On a chain without title, `after: [title]` still goes through title's place.
    m, _ = manifest(GUARDS_AND_TAIL + third_party("{after: [title]}"), points=True)
    title, memory_like, provenance, acme = m.plugins
    res = resolve([memory_like, provenance, acme], chain="subagent",
                  absent={"title": Absent(title, "does not join the subagent chain")},
                  points=m.points, slots=m.slots, default_slot=m.default_slot)
    assert res.order == ["memory_like", "acme", "provenance"]
    assert any("title is not in the chain" in r for r in res.placements["acme"].reasons())


# -- hook-level invariants ------------------------------------------------------------------


def test_a_hook_invariant_places_the_plugin_after_every_hook_of_that_kind():
    # acme asks to come after provenance's point and has a before_agent hook; the
    # invariant puts provenance after it (and after the undeclared-hooks plugin too).
    body = (GUARDS_AND_TAIL + third_party('{after: ["@tail_start"]}', "hooks: [before_agent]")
            + entry("free", '{after: ["@tail_start"]}', "rank: 0")
            + entry("quiet", '{after: ["@tail_start"]}', "rank: 200000\n  hooks: [after_model]"))
    res = run(body, points=True)
    # By rank provenance (2) would precede acme (100000); quiet has no before_agent, so
    # its rank alone puts it last.
    assert res.order == ["memory_like", "title", "free", "acme", "provenance", "quiet"]
    reasons = res.placements["acme"].reasons()
    assert any(r.startswith("provenance declares hook_order before_agent: last: acme (its "
                            "before_agent runs after every other before_agent hook)")
               for r in reasons)
    assert not any("hook_order" in r for r in res.placements["quiet"].reasons())


@pytest.mark.parametrize(("hook", "rank", "first"), [
    ("before_agent", "last", False), ("before_agent", "first", True),
    ("after_model", "last", True), ("after_agent", "first", False),
    ("wrap_model_call", "first", True),
])
def test_hook_invariants_follow_the_hooks_dispatch_order(hook, rank, first):
    body = (entry("other", extra=f"hooks: [{hook}]\n  rank: {0 if first else 9}")
            + entry("me", f"{{hook_order: {{{hook}: {rank}}}}}",
                    f"hooks: [{hook}]\n  rank: {9 if first else 0}"))
    order = run(body).order
    assert order == (["me", "other"] if first else ["other", "me"])


def test_a_plugin_that_breaks_a_hook_invariant_gets_a_cycle_naming_the_invariant():
    res_body = GUARDS_AND_TAIL + third_party("{after: [provenance]}")
    message, text = raises(CycleError, res_body, points=True)
    assert "provenance declares hook_order before_agent: last: acme (its before_agent runs " \
           "after every other before_agent hook)" in message
    assert f"acme declares after: provenance [{line_of(text, 'acme')}]" in message


# -- warnings -------------------------------------------------------------------------------


def test_hook_intent_against_a_plugin_without_that_hook_is_a_warning():
    body = (entry("title", extra="hooks: [after_model]")
            + entry("acme", "{outer_of: [title], after_model_before: [gate]}",
                    "hooks: [wrap_tool_call, after_model]")
            + entry("gate", extra="hooks: [wrap_tool_call]")
            + entry("fine", "{outer_of: [gate]}", "hooks: [wrap_tool_call]"))
    res = run(body)
    assert res.order == ["fine", "gate", "acme", "title"]  # warned, yet still ordered
    warnings = res.placements["acme"].warnings
    assert len(warnings) == 2
    assert warnings[0].startswith("acme declares outer_of: title [m.yaml:")
    assert "but title has no wrap_tool_call hook (its hooks: after_model)" in warnings[0]
    assert "but gate has no after_model hook (its hooks: wrap_tool_call)" in warnings[1]
    assert res.warnings == warnings
    assert res.placements["fine"].warnings == []
    assert f"warning: {warnings[0]}" in res.placements["acme"].reasons()


# -- every error names the plugins at fault ---------------------------------------------------


@pytest.mark.parametrize(("error", "body", "kwargs", "plugins"), [
    (UnknownReferenceError, entry("x", "{after: [nope]}"), {}, ("x",)),
    (UnknownReferenceError, entry("x", '{before: ["@nope"]}'), {"points": True}, ("x",)),
    (UnknownReferenceError, entry("x", "{slot: nope}"), {"points": True}, ("x",)),
    (UnknownReferenceError, entry("x", '{requires: ["@guards_end"]}'), {"points": True},
     ("x",)),
    (UnmetRequirementError, entry("x", "{requires: [gone]}"), {"absent": {"gone": "off"}},
     ("x",)),
    (ResolutionError, entry("x", "{after: [x]}"), {}, ("x",)),
    (AdjacencyConflictError, entry("x", '{immediately_after: "@guards_end"}'),
     {"points": True}, ("x",)),
    (AdjacencyConflictError, entry("t") + entry("a", "{immediately_after: t}")
     + entry("b", "{immediately_after: t}"), {}, ("a", "b")),
    (AdjacencyConflictError, entry("a", "{immediately_before: b}")
     + entry("b", "{immediately_before: a}"), {}, ("a", "b")),
    (AdjacencyConflictError, entry("a", "{immediately_before: b}") + entry("b", "{before: [a]}"),
     {}, ("b", "a")),
    (AdjacencyConflictError, entry("a", "{position: first}")
     + entry("b", "{immediately_before: a}"), {}, ("a", "b")),
    (PositionConflictError, entry("a", "{position: last}") + entry("b", "{position: last}"), {},
     ("a", "b")),
    (PositionConflictError, entry("a", "{position: first, after: [b]}") + entry("b"), {},
     ("a",)),
    (PositionConflictError, entry("a", "{position: last}") + entry("b", "{after: [a]}"), {},
     ("a", "b")),
    (CycleError, entry("a", "{before: [b]}") + entry("b", "{before: [a]}"), {}, ("a", "b")),
])
def test_every_resolution_error_names_the_plugins_at_fault(error, body, kwargs, plugins):
    with pytest.raises(error) as info:
        run(body, **kwargs)
    assert info.value.plugins == plugins


def test_duplicate_names_blame_the_plugin():
    m, _ = manifest(entry("a"))
    with pytest.raises(ResolutionError) as info:
        resolve([m.plugins[0], m.plugins[0].model_copy()])
    assert info.value.plugins == ("a",)


@pytest.mark.parametrize("position", ["first", "last"])
def test_a_position_claim_is_explicit_about_its_side(position):
    # A third-party plugin that only claims first (last) is not held in the default slot
    # on that side, on a chain where no built-in claims it.
    body = GUARDS_AND_TAIL + third_party(f"{{position: {position}}}", "hooks: [after_model]")
    order = run(body, points=True).order
    assert order[0 if position == "first" else -1] == "acme"
