"""Random chains: the fused and the unfused graph always end in the same place.

Hypothesis draws chains of synthetic middlewares (see `tests/compiler/test_compiler.py`)
whose hooks add, replace and remove messages (with ids, without, as dicts),
write reducer channels, plain channels and `Overwrite`s, return `Command`s,
jump, interrupt, and mix sync and async implementations. For each chain the
final state, message ids and order, model requests, tool executions, errors
and interrupt/resume outcome must be equal. Deterministic: derandomized, no
example database.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from antler.compiler import NODE_HOOKS, compile_fusion
from tests.compiler.test_compiler import (
    FLAKY,
    FUSED_MODES,
    JUMPABLE,
    MwSpec,
    assert_same,
    make_middleware,
    run,
    script,
)

PROPERTY_SETTINGS = settings(
    max_examples=80, deadline=None, derandomize=True, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Each property runs its graphs for every chain drawn (a few tenths of a CPU-second a
# chain): `make test` draws a few chains per property, the same first ones every run;
# the slow checks (`make test-slow`, CI's long checks) draw many more of each.
QUICK = settings(PROPERTY_SETTINGS, max_examples=20)
LONG = settings(PROPERTY_SETTINGS, max_examples=100)

_SIMPLE = st.sampled_from([
    ("add",), ("add",), ("add_noid",), ("add_dict",), ("replace",), ("remove",),
    ("log",), ("log",), ("set",), ("tally", 1), ("tally", 5), ("overwrite",),
])


@st.composite
def actions(draw: Any, kind: str) -> list[tuple[Any, ...]]:
    chosen = draw(st.lists(_SIMPLE, min_size=0, max_size=3))
    if draw(st.integers(0, 5)) == 0:
        chosen.insert(draw(st.integers(0, len(chosen))),
                      ("jump", draw(st.sampled_from(JUMPABLE[kind])), draw(st.integers(1, 2))))
    if draw(st.integers(0, 9)) == 0:
        chosen.append(("command",))
    return chosen


@st.composite
def chains(draw: Any, *, use_async: bool) -> list[MwSpec]:
    count = draw(st.integers(2, 7))
    variants = ("sync", "both", "async") if use_async else ("sync", "both")
    specs = []
    for index in range(count):
        kinds = draw(st.lists(st.sampled_from(NODE_HOOKS), unique=True, min_size=0,
                              max_size=4))
        hooks = {kind: draw(actions(kind)) for kind in kinds}
        specs.append(MwSpec(
            f"m{index}", hooks, draw(st.sampled_from(variants)),
            fusable=draw(st.integers(0, 7)) != 0, wrap=draw(st.integers(0, 5)) == 0))
    # LangChain gives the loop's entry node no edge to itself: when the first
    # before_model hook jumps to `model`, the unfused graph fails on routing
    # (KeyError) by construction, where the model node routes it. Not drawn.
    entry = next((s for s in specs if "before_model" in s.hooks), None)
    if entry is not None:
        entry.hooks["before_model"] = [a for a in entry.hooks["before_model"]
                                       if a[:2] != ("jump", "model")]
    return specs


def invoked_chains_agree(specs: list[MwSpec], tool_rounds: int, direct: bool) -> None:
    # `direct`: the model ends each run by calling a return_direct tool, and the tools
    # node runs the after_agent hooks (tools_node.ToolsEnd).
    assert_same(specs, turns=script(tool_rounds, direct=direct))


INVOKED = dict(specs=chains(use_async=False), tool_rounds=st.integers(0, 2),
               direct=st.booleans())


@QUICK
@given(**INVOKED)
def test_random_chains_agree_when_invoked(specs, tool_rounds, direct):
    invoked_chains_agree(specs, tool_rounds, direct)


@pytest.mark.slow
@settings(PROPERTY_SETTINGS, max_examples=300)
@given(**INVOKED)
def test_many_more_random_chains_agree_when_invoked(specs, tool_rounds, direct):
    """The same property over many more chains (CI's long checks)."""
    invoked_chains_agree(specs, tool_rounds, direct)


def awaited_chains_agree(specs: list[MwSpec], tool_rounds: int, direct: bool) -> None:
    assert_same(specs, use_async=True, turns=script(tool_rounds, direct=direct))


AWAITED = dict(specs=chains(use_async=True), tool_rounds=st.integers(0, 1),
               direct=st.booleans())


@settings(QUICK, max_examples=12)
@given(**AWAITED)
def test_random_chains_agree_when_awaited(specs, tool_rounds, direct):
    awaited_chains_agree(specs, tool_rounds, direct)


@pytest.mark.slow
@LONG
@given(**AWAITED)
def test_many_more_random_chains_agree_when_awaited(specs, tool_rounds, direct):
    awaited_chains_agree(specs, tool_rounds, direct)


def chains_agree_after_an_interrupt(specs: list[MwSpec], where: int, kind: str) -> None:
    asker = specs[where % len(specs)]
    asker.hooks.setdefault(kind, []).append(("ask",))
    unfused, _fused = assert_same(specs, resume="yes", turns=script(1))
    event(f"interrupted {unfused.interrupts} time(s)")


INTERRUPTED = dict(specs=chains(use_async=False), where=st.integers(0, 6),
                   kind=st.sampled_from(["before_model", "after_model"]))


@settings(QUICK, max_examples=15)
@given(**INTERRUPTED)
def test_random_chains_agree_after_an_interrupt_and_resume(specs, where, kind):
    chains_agree_after_an_interrupt(specs, where, kind)


@pytest.mark.slow
@LONG
@given(**INTERRUPTED)
def test_many_more_random_chains_agree_after_an_interrupt_and_resume(specs, where, kind):
    chains_agree_after_an_interrupt(specs, where, kind)


def chains_agree_after_a_failure(specs: list[MwSpec], where: int, kind: str,
                                 direct: bool) -> None:
    failing = specs[where % len(specs)]
    failing.hooks.setdefault(kind, []).append(("fail",))

    def arm() -> None:
        FLAKY.clear()
        FLAKY[f"{failing.name}.{kind}#1"] = True

    arm()
    unfused = run(specs, fused=False, retry=True, turns=script(1, direct=direct))
    for mode in FUSED_MODES:
        arm()
        fused = run(specs, fused=mode, retry=True, turns=script(1, direct=direct))
        # A resumed fused node runs its earlier members again, and a message one of
        # them adds without an id gets a fresh one (docs/compiler.md, "How failure
        # differs"): generated ids are compared as generated, not by their order.
        assert _loosely(fused) == _loosely(unfused), f"fused={mode!r} differs"


FAILED = dict(specs=chains(use_async=False), where=st.integers(0, 6),
              kind=st.sampled_from(NODE_HOOKS), direct=st.booleans())


@settings(QUICK, max_examples=12)
@given(**FAILED)
def test_random_chains_agree_after_a_failure_and_resume(specs, where, kind, direct):
    chains_agree_after_a_failure(specs, where, kind, direct)


@pytest.mark.slow
@LONG
@given(**FAILED)
def test_many_more_random_chains_agree_after_a_failure_and_resume(specs, where, kind, direct):
    chains_agree_after_a_failure(specs, where, kind, direct)


def _loosely(outcome: Any) -> Any:
    return re.sub(r"generated-\d+", "generated", repr(outcome.comparable()))


@PROPERTY_SETTINGS
@given(specs=chains(use_async=True))
@pytest.mark.parametrize("into_model", [False, True])
def test_the_plan_covers_every_node_hook_once_in_langchains_order(specs, into_model):
    middlewares = [make_middleware(spec) for spec in specs]
    plan = compile_fusion(middlewares, into_model=into_model).plan
    for kind in NODE_HOOKS:
        expected = [s.name for s in specs if kind in s.hooks]
        if kind.startswith("after"):
            expected.reverse()
        ran = [m for node in plan.nodes if node.kind == kind for m in node.members]
        assert ran == expected
