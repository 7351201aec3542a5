"""The built-in manifest's order is carried by constraints, not by manifest ranks.

For every combination of optional built-ins on and off, and with the ranks
shuffled, each chain is the full chain with the absent plugins left out: no
plugin drifts to another place because a neighbour it leaned on is disabled.
"""

from __future__ import annotations

import itertools
import random

import pytest

from antler.chain.resolver import resolve
from antler.plugin_api.registry import discover

OPTIONAL = ["authorization", "guardrail", "read_before_write", "summarization", "todo",
            "title", "memory", "view_image", "subagent_limit", "tool_call_log"]


@pytest.fixture(scope="module")
def registry():
    return discover()


def order(registry, chain, present, seed=None):
    specs = [s for s in registry.specs.values() if chain in s.chains and s.name in present]
    if seed is not None:
        ranks = list(range(len(specs)))
        random.Random(seed).shuffle(ranks)
        specs = [s.model_copy(update={"rank": r}) for s, r in zip(specs, ranks, strict=True)]
    absent = {n: "off" for n in registry.specs if n not in {s.name for s in specs}}
    return resolve(specs, chain=chain, absent=absent, points=registry.points.values(),
                   slots=registry.slots.values(), default_slot=registry.default_slot).order


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_every_subset_of_optional_plugins_keeps_the_full_chains_order(registry, chain):
    everything = set(registry.specs)
    full = order(registry, chain, everything)
    for bits in itertools.product((False, True), repeat=len(OPTIONAL)):
        off = {name for name, on in zip(OPTIONAL, bits, strict=True) if not on}
        present = everything - off
        expected = [name for name in full if name in present]
        for seed in (None, sum(bits) * 7 + 1):
            assert order(registry, chain, present, seed) == expected, (sorted(off), seed)
