"""The shipped example configs stay valid and really switch every optional plugin on."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from antler.chain import plan_chain
from antler.cli import cli
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.runtime.demo import all_optional_config

EXAMPLES = sorted((Path(__file__).parents[2] / "core" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_configs_pass_config_check(path):
    result = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert "is valid" in result.output


def test_all_optional_config_leaves_no_plugin_out_of_the_lead_chain():
    registry = discover()
    plan = plan_chain(all_optional_config(registry), "lead", RuntimeOptions(
        plan_mode=True, supports_vision=True, subagents_enabled=True,
        conditions={"mcp_routing": True}), registry=registry)   # an MCP tool routed by keywords
    left_out = {name: ex.kind for name, ex in plan.excluded.items() if ex.kind != "not_in_chain"}
    # off on purpose (a hook that may end or pause the run; see the yaml)
    assert left_out == {"model_call_limit": "disabled", "pii": "disabled",
                        "human_in_the_loop": "disabled"}
    assert {"authorization", "guardrail", "summarization", "todo", "view_image",
            "subagent_limit"} <= set(plan.order)
