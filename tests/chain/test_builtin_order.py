"""The built-in manifest's order is carried by constraints, not by manifest ranks.

Every entry of `plugin-manifest.yaml` names only its real neighbours; a neighbour
that is off stays in the graph as a zero-width node. So for every combination of
optional built-ins on and off (sampled with a fixed seed once there are too many
to enumerate), with the ranks shuffled, each chain is the relative order of docs/chain.md#order
with the absent plugins left out.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest

from antler.chain.chainplan import Exclusion
from antler.chain.resolver import resolve
from antler.plugin_api.registry import discover
from antler.plugin_api.spec import PluginSpec

CHAIN_ORDER = [
    "input_sanitization",          # #1
    "pii",                         # contrib: LangChain's PII redaction, with the input guards
    "tool_output_budget",          # #2
    "tool_result_sanitization",    # #3
    "thread_data",                 # #4
    "uploads",                     # #5 (lead only)
    "sandbox",                     # #6
    "dangling_tool_call",          # #7
    "llm_error_handling",          # #8
    "model_fallback",              # contrib: inside llm_error_handling
    "model_retry",                 # contrib: inside the fallback
    "authorization",               # #9
    "guardrail",                   # #9, inside authorization
    "sandbox_audit",               # #10
    "read_before_write",           # #11
    "tool_progress",               # #12
    "tool_error_handling",         # #13
    "tool_retry",                  # contrib: innermost tool wrapper
    "dynamic_context",             # #14 (lead only)
    "skill_activation",            # #15
    "skill_tool_policy",           # #16
    "durable_context",             # #17
    "summarization",               # #18
    "context_editing",             # contrib: clears old tool results after summarization
    "llm_tool_selector",           # contrib: picks tools among those the skill policy left
    "todo",                        # #19 (lead only)
    "token_usage",                 # #20 (lead only)
    "title",                       # #21 (lead only)
    "memory",                      # #22 (lead only)
    "view_image",                  # #23
    "mcp_routing",                 # #24
    "deferred_tool_filter",        # #25
    "subagent_limit",              # #27 (lead only)
    "loop_detection",              # #28
    "token_budget",                # #29 (lead only, for now)
    "model_call_limit",            # contrib: beside the guards
    "tool_call_limit",             # contrib: beside the guards
    "subagent_date_context",       # subagent only: right before the coalescer, as position 26 says
    "system_message_coalescing",   # #26, moved innermost of the guards on purpose: it
                                   # merges what every outer wrapper (loop hints too) added
    "tool_call_log",               # #31: a contrib extension without ordering
    "human_in_the_loop",           # contrib: before the terminal tail (lead only)
    "terminal_response",           # #32 (lead only)
    "model_length_finish_reason",  # #33 (lead only)
    "safety_finish_reason",        # #34
    "input_provenance",            # Antler's own: after every other before_agent hook
    "clarification",               # #35 (lead only)
]
"""The 35-position lead order (docs/chain.md) with the plugins Antler ships. Antler's subagent
chain keeps the same relative order (it ships no plugin that the subagent
builder moves)."""

MAX_SUBSETS = 1024
"""Enumerate every on/off subset up to this many; sample this many beyond."""


@pytest.fixture(scope="module")
def registry():
    return discover()


def optional(registry) -> list[str]:
    return sorted(name for name, spec in registry.specs.items() if spec.enabled != "always")


def subsets(names: list[str], seed: int = 0) -> Iterator[frozenset[str]]:
    """The sets of `names` that are on: all of them, or a fixed-seed sample."""
    if 2 ** len(names) <= MAX_SUBSETS:
        for bits in itertools.product((False, True), repeat=len(names)):
            yield frozenset(n for n, on in zip(names, bits, strict=True) if on)
        return
    rng = random.Random(seed)
    yield frozenset(names)
    yield frozenset()
    for _ in range(MAX_SUBSETS - 2):
        yield frozenset(n for n in names if rng.random() < 0.5)


def order(registry, chain: str, on: frozenset[str], rng: random.Random | None) -> list[str]:
    specs: list[PluginSpec] = list(registry.specs.values())
    if rng is not None:
        ranks = list(range(len(specs)))
        rng.shuffle(ranks)
        specs = [s.model_copy(update={"rank": r}) for s, r in zip(specs, ranks, strict=True)]
    present = [s for s in specs if chain in s.chains and (s.enabled == "always" or s.name in on)]
    names = {s.name for s in present}
    absent = {s.name: Exclusion(s, "off") for s in specs if s.name not in names}
    return resolve(present, chain=chain, absent=absent, points=registry.points.values(),
                   slots=registry.slots.values(), default_slot=registry.default_slot).order


def test_the_chain_order_names_every_built_in(registry):
    assert sorted(CHAIN_ORDER) == sorted(registry.specs)


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_every_subset_of_optional_plugins_keeps_the_chain_order(registry, chain):
    rng = random.Random(f"{chain}-ranks")
    checked = 0
    for on in subsets(optional(registry)):
        expected = [n for n in CHAIN_ORDER if chain in registry.specs[n].chains
                    and (registry.specs[n].enabled == "always" or n in on)]
        for shuffle in (None, rng):
            assert order(registry, chain, on, shuffle) == expected, (sorted(on), shuffle)
        checked += 1
    assert checked == min(MAX_SUBSETS, 2 ** len(optional(registry)))


def test_sampling_covers_both_extremes_and_stays_reproducible():
    names = [f"p{i}" for i in range(12)]
    sample = list(subsets(names))
    assert len(sample) == MAX_SUBSETS
    assert sample[:2] == [frozenset(names), frozenset()]
    assert sample == list(subsets(names))
    assert len(set(sample)) > MAX_SUBSETS // 2


def test_no_entry_lists_more_than_one_plugin_to_follow(registry):
    # The point of ordering by real neighbours: nobody enumerates its optional
    # predecessors any more.
    for name, spec in registry.specs.items():
        assert len([t for t in spec.order.after if not t.startswith("@")]) <= 1, name
