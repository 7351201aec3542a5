"""Who joins a chain: per-chain enablement and config sections, and open runtime conditions.

Planned through the real operator-config parser and `plan_chain`, so the
sections a plugin reads in each chain are the ones the schema accepts.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from antler.chain.config import config_schema
from antler.errors import ConfigError
from antler.plugin_api.context import RuntimeOptions
from antler.testing import make_plan, make_registry

BUDGET = """\
api_version: 1
plugins:
  - name: token_budget
    factory: fx_missing.budget:build
    config_model: antler.plugins.subagent_limit.config:SubagentsConfig
    enabled: "off"
    chain_overrides:
      subagent:
        enabled: "on"
        config_key: subagent_token_budget
  - name: deferred_filter
    factory: fx_missing.filter:build
    when: {deferred_tools: true}
"""


@pytest.fixture
def registry():
    return make_registry(BUDGET)


def test_a_plugin_can_be_off_on_the_lead_and_on_for_subagents(registry):
    lead = make_plan(registry, "", "lead")
    sub = make_plan(registry, "", "subagent")
    assert "token_budget" not in lead.order
    assert lead.excluded["token_budget"].reason == (
        "off by default; enable with `token_budget: {enabled: true}`")
    assert "token_budget" in sub.order


def test_each_chain_reads_its_own_section(registry):
    config = "token_budget: {enabled: true}\nsubagent_token_budget: {enabled: false}\n"
    lead = make_plan(registry, config, "lead", source="c.yaml")
    sub = make_plan(registry, config, "subagent", source="c.yaml")
    assert "token_budget" in lead.order
    assert sub.excluded["token_budget"].reason == "disabled by config (c.yaml:2:25)"
    spec = registry.specs["token_budget"]
    assert (spec.section_for("lead"), spec.section_for("subagent")) == (
        "token_budget", "subagent_token_budget")
    assert spec.sections() == ["token_budget", "subagent_token_budget"]


def test_the_config_schema_includes_overridden_sections(registry):
    properties = config_schema(registry)["properties"]
    assert {"token_budget", "subagent_token_budget"} <= set(properties)
    with pytest.raises(ConfigError, match="max_concurrent"):
        make_plan(registry, "subagent_token_budget: {max_concurrent: zero}\n", "subagent")


def test_an_always_override_cannot_combine_with_runtime_conditions():
    with pytest.raises(ValueError, match="'always' enabled but also has runtime conditions"):
        make_registry({"name": "x", "factory": "m:f", "when": {"deferred_tools": True},
                       "chain_overrides": {"subagent": {"enabled": "always"}}})


def test_an_open_runtime_condition_is_false_unless_the_run_sets_it(registry):
    unset = make_plan(registry, "", "lead")
    assert unset.excluded["deferred_filter"].reason == (
        "runtime condition deferred_tools is False (no runtime option sets it), needs True")
    off = make_plan(registry, "", "lead", RuntimeOptions(conditions={"deferred_tools": False}))
    assert off.excluded["deferred_filter"].reason == (
        "runtime condition deferred_tools is False, needs True")
    on = make_plan(registry, "", "lead", RuntimeOptions(conditions={"deferred_tools": True}))
    assert "deferred_filter" in on.order


def test_runtime_condition_names_are_checked():
    with pytest.raises(ValidationError, match="runtime condition 'Deferred' must be snake_case"):
        RuntimeOptions(conditions={"Deferred": True})
    with pytest.raises(ValidationError, match="'plan_mode' is a field of its own"):
        RuntimeOptions(conditions={"plan_mode": True})
    with pytest.raises(ValueError, match="runtime condition 'bad-name' must be snake_case"):
        make_registry({"name": "x", "factory": "m:f", "when": {"bad-name": True}})
    assert RuntimeOptions(plan_mode=True).condition("plan_mode") is True
