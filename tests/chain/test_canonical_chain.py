"""Acceptance: the 35-position chain of docs/chain.md, derived from constraints alone.

`fixtures/deerflow_chain.yaml` declares every lead position and the subagent
chain with the ordering its description states (plus the weakest constraints where
only the list fixes a position). These tests plan chains from it with the real
operator-config parser and runtime options, and compare against the documented
orders, written out literally for the default and the fully enabled chains.
"""

from __future__ import annotations

import pytest
import yaml

from antler.chain import ChainPlan, plan_chain
from antler.chain.config import parse_config
from antler.plugin_api.context import RuntimeOptions
from tests.fixtures import (
    CUSTOM,
    CUSTOM_NAME,
    DEERFLOW_CHAIN,
    DEFAULT_ON_SECTIONS,
    EXTENSION_NAME,
    EXTENSION_PATH,
    EXTENSIONS,
    LEAD_DOCUMENTED,
    OPTIONAL_SECTIONS,
    SUBAGENT_DOCUMENTED,
    config_text,
    deerflow_registry,
    expected_order,
)
from tests.fixtures.noop import NoopMiddleware

# Which optional items are on by default: the chain states a default only for
# read_before_write (#11, "default on"). Every other config-gated item reads
# "optional, if X.enabled" and is off until enabled; the runtime-gated ones
# (todo, view_image, subagent_limit) follow RuntimeOptions, whose flags
# default to False.
DEFAULT_LEAD = [
    "input_sanitization",
    "tool_output_budget",
    "tool_result_sanitization",
    "thread_data",
    "uploads",
    "sandbox",
    "dangling_tool_call",
    "llm_error_handling",
    "sandbox_audit",
    "read_before_write",
    "tool_error_handling",
    "dynamic_context",
    "skill_activation",
    "skill_tool_policy",
    "durable_context",
    "title",
    "memory",
    "system_message_coalescing",
    "terminal_response",
    "model_length_finish_reason",
    "clarification",
]

ALL_LEAD = [
    "input_sanitization",
    "tool_output_budget",
    "tool_result_sanitization",
    "thread_data",
    "uploads",
    "sandbox",
    "dangling_tool_call",
    "llm_error_handling",
    "authorization",
    "guardrail",
    "sandbox_audit",
    "read_before_write",
    "tool_progress",
    "tool_error_handling",
    "dynamic_context",
    "skill_activation",
    "skill_tool_policy",
    "durable_context",
    "summarization",
    "todo",
    "token_usage",
    "title",
    "memory",
    "view_image",
    "mcp_routing",
    "deferred_tool_filter",
    "system_message_coalescing",
    "subagent_limit",
    "loop_detection",
    "token_budget",
    CUSTOM_NAME,
    EXTENSION_NAME,
    "terminal_response",
    "model_length_finish_reason",
    "safety_finish_reason",
    "clarification",
]

DEFAULT_SUBAGENT = [
    "input_sanitization",
    "tool_output_budget",
    "tool_result_sanitization",
    "thread_data",
    "sandbox",
    "dangling_tool_call",
    "llm_error_handling",
    "sandbox_audit",
    "read_before_write",
    "tool_error_handling",
    "skill_activation",
    "skill_tool_policy",
    "durable_context",
    "subagent_date_context",
    "system_message_coalescing",
]

ALL_SUBAGENT = [
    "input_sanitization",
    "tool_output_budget",
    "tool_result_sanitization",
    "thread_data",
    "sandbox",
    "dangling_tool_call",
    "llm_error_handling",
    "authorization",
    "guardrail",
    "sandbox_audit",
    "read_before_write",
    "tool_progress",
    "tool_error_handling",
    "skill_activation",
    "skill_tool_policy",
    "view_image",
    "mcp_routing",
    "deferred_tool_filter",
    "loop_detection",
    "token_budget",
    EXTENSION_NAME,
    "safety_finish_reason",
    "durable_context",
    "summarization",
    "subagent_date_context",
    "system_message_coalescing",
]

LEAD_ONLY = ["uploads", "dynamic_context", "todo", "token_usage", "title", "memory",
             "subagent_limit", "terminal_response", "model_length_finish_reason", "clarification"]

EVERYTHING = {"plan_mode": True, "supports_vision": True, "subagents_enabled": True}


@pytest.fixture(scope="module")
def registry():
    return deerflow_registry()


def plan(registry, chain: str = "lead", sections=DEFAULT_ON_SECTIONS, extensions=(),
         custom: int = 0, **runtime: bool) -> ChainPlan:
    config = parse_config(config_text(sections, extensions), registry, source="config.yaml")
    return plan_chain(config, chain, RuntimeOptions(**runtime), registry=registry,
                      custom_middlewares=[NoopMiddleware() for _ in range(custom)])


def plan_everything(registry, chain: str = "lead", **runtime: bool) -> ChainPlan:
    return plan(registry, chain, OPTIONAL_SECTIONS, [EXTENSION_PATH],
                custom=1 if chain == "lead" else 0, **{**EVERYTHING, **runtime})


# -- the fixture itself ------------------------------------------------------------------------


def test_fixture_declares_every_position_by_name_and_never_by_index():
    raw = yaml.safe_load(DEERFLOW_CHAIN.read_text(encoding="utf-8"))
    names = [entry["name"] for entry in raw["plugins"]]
    documented = {n for n in LEAD_DOCUMENTED + SUBAGENT_DOCUMENTED if n not in (CUSTOM,
                                                                                EXTENSIONS)}
    assert sorted(names) == sorted(documented)
    # 35 lead positions: 34 plugins (item 9 is two) plus the two slots.
    assert len(LEAD_DOCUMENTED) == 36
    assert all("rank" not in entry for entry in raw["plugins"]), "order must come from constraints"
    assert all(entry.get("order") for entry in raw["plugins"]), "every position is constrained"


def test_the_fixture_uses_the_platform_points_and_slots(registry):
    assert set(registry.points) == {"base_end", "guards_end", "custom_end", "tail_start"}
    assert set(registry.slots) == {"custom", "extensions"}
    assert registry.default_slot == "extensions"


# -- lead chain ---------------------------------------------------------------------------------


def test_default_lead_chain(registry):
    result = plan(registry)
    assert result.order == DEFAULT_LEAD
    assert result.excluded["summarization"].reason == (
        "off by default; enable with `summarization: {enabled: true}`")
    assert result.excluded["todo"].reason == "runtime condition plan_mode is False, needs True"
    assert result.excluded["subagent_date_context"].reason.startswith(
        "does not join the lead chain")


def test_read_before_write_is_the_only_optional_plugin_on_by_default(registry):
    # An empty config: no section mentioned at all.
    config = parse_config("", registry)
    result = plan_chain(config, "lead", RuntimeOptions(), registry=registry)
    assert result.order == DEFAULT_LEAD
    disabled = plan(registry, sections=())
    assert disabled.order == [n for n in DEFAULT_LEAD if n != "read_before_write"]
    assert disabled.excluded["read_before_write"].reason.startswith(
        "disabled by config (config.yaml:1:")


def test_everything_enabled_lead_chain(registry):
    assert plan_everything(registry).order == ALL_LEAD


@pytest.mark.parametrize("everything", [False, True], ids=["defaults", "everything"])
@pytest.mark.parametrize("plan_mode", [False, True], ids=["plan-off", "plan-on"])
def test_plan_mode_adds_the_todo_list_in_its_place(registry, plan_mode, everything):
    if everything:
        result = plan_everything(registry, plan_mode=plan_mode)
        base = ALL_LEAD
    else:
        result = plan(registry, plan_mode=plan_mode)
        base = DEFAULT_LEAD
    expected = [n for n in base if n != "todo"]
    if plan_mode:
        # After summarization when it is on (docs/chain.md#layer-dependencies), else after
        # durable_context.
        anchor = "summarization" if everything else "durable_context"
        expected.insert(expected.index(anchor) + 1, "todo")
    assert result.order == expected


@pytest.mark.parametrize("everything", [False, True], ids=["defaults", "everything"])
@pytest.mark.parametrize("vision", [False, True], ids=["vision-off", "vision-on"])
def test_vision_adds_view_image_in_its_place(registry, vision, everything):
    if everything:
        result = plan_everything(registry, supports_vision=vision)
        base = ALL_LEAD
    else:
        result = plan(registry, supports_vision=vision)
        base = DEFAULT_LEAD
    expected = [n for n in base if n != "view_image"]
    if vision:
        expected.insert(expected.index("memory") + 1, "view_image")
    assert result.order == expected


@pytest.mark.parametrize("enabled", [False, True], ids=["subagents-off", "subagents-on"])
def test_subagents_add_the_subagent_limit_after_the_coalescer(registry, enabled):
    result = plan(registry, subagents_enabled=enabled)
    expected = DEFAULT_LEAD[:]
    if enabled:
        expected.insert(expected.index("system_message_coalescing") + 1, "subagent_limit")
    assert result.order == expected


def test_tool_search_brings_routing_and_the_filter_together(registry):
    result = plan(registry, sections={"read_before_write", "tool_search"})
    assert result.order == expected_order(
        "lead", [*DEFAULT_LEAD, "mcp_routing", "deferred_tool_filter"])


def test_custom_middlewares_and_extensions_keep_their_given_order(registry):
    second = f"{{use: '{EXTENSION_PATH}', name: second_extension}}"
    result = plan(registry, extensions=[EXTENSION_PATH, second], custom=2)
    assert result.order == expected_order(
        "lead", DEFAULT_LEAD, custom=["custom_0_noop_middleware", "custom_1_noop_middleware"],
        extensions=[EXTENSION_NAME, "second_extension"])


def test_explanations_carry_the_stated_reasons(registry):
    result = plan_everything(registry)
    safety = result.explain("safety_finish_reason")
    assert "safety_finish_reason is at position 35 of 36 in the lead chain" in safety
    assert ("safety_finish_reason declares after_model_before: terminal_response (after_model "
            "hooks run in reverse list order)") in safety
    assert "safety_finish_reason declares after_model_before: @tail_start" in safety
    assert "neighbours: model_length_finish_reason -> safety_finish_reason -> clarification" \
        in safety
    assert "todo_list_middleware declares slot: extensions (after @custom_end)" in \
        result.explain(EXTENSION_NAME)
    default = plan(registry)
    assert default.explain("guardrail").startswith(
        "guardrail is not in the lead chain: off by default; enable with "
        "`guardrails: {enabled: true}`")


# -- subagent chain -----------------------------------------------------------------------------


def test_default_subagent_chain(registry):
    result = plan(registry, "subagent")
    assert result.order == DEFAULT_SUBAGENT
    for name in LEAD_ONLY:
        assert result.excluded[name].reason.startswith("does not join the subagent chain")


def test_everything_enabled_subagent_chain(registry):
    assert plan_everything(registry, "subagent").order == ALL_SUBAGENT


def test_runtime_options_do_not_add_lead_only_plugins_to_subagents(registry):
    assert plan(registry, "subagent", **EVERYTHING).order == expected_order(
        "subagent", [*DEFAULT_SUBAGENT, "view_image"])


def test_skill_tool_policy_is_adjacent_to_durable_context_only_on_the_lead(registry):
    lead = plan_everything(registry).order
    sub = plan_everything(registry, "subagent").order
    assert lead[lead.index("skill_tool_policy") + 1] == "durable_context"
    assert sub[sub.index("skill_tool_policy") + 1] == "view_image"
    # Both chains keep the policy immediately after activation.
    for order in (lead, sub):
        assert order[order.index("skill_activation") + 1] == "skill_tool_policy"


def test_subagents_move_durable_context_behind_their_safety_tail(registry):
    sub = plan_everything(registry, "subagent").order
    assert sub[-5:] == ["safety_finish_reason", "durable_context", "summarization",
                        "subagent_date_context", "system_message_coalescing"]


def test_documented_orders_are_what_the_fixture_produces_fully_enabled(registry):
    # The documented lists (shared with the property tests) and the literal lists
    # above must describe the same chains.
    assert expected_order("lead", LEAD_DOCUMENTED, [CUSTOM_NAME], [EXTENSION_NAME]) == ALL_LEAD
    assert expected_order("subagent", SUBAGENT_DOCUMENTED, [], [EXTENSION_NAME]) == ALL_SUBAGENT
