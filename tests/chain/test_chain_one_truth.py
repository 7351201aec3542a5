"""One truth about the chain: what `chain show` prints is what a run builds.

Every command that shows a chain derives the runtime conditions from the config
with `antler.chain.conditions.runtime_for`, as `antler run`, the agent factory
and the served graph do. These tests compare the chain `antler chain show
--json` prints (through the real entry point) with the chain `create_agent`
builds, over the example configs and every combination of the runtime flags.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from antler.chain.conditions import runtime_for
from antler.chain.config import load_config
from antler.cli import cli
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.server import build_server_agent

EXAMPLES = sorted((Path(__file__).parents[2] / "core" / "examples").glob("*.yaml"))
FLAGS = {"plan_mode": "--plan", "supports_vision": "--vision", "subagents_enabled": "--subagents"}


@pytest.fixture(scope="module")
def registry():
    return discover()


def _vision_by_named_model(tmp: Path) -> Path:
    """The shape a migrated DeerFlow config has: vision said on the default named model."""
    script = tmp / "script.yaml"
    script.write_text("- hello\n")
    path = tmp / "named-vision.yaml"
    path.write_text(f"models:\n  default: main\n  named:\n    main:\n"
                    f"      use: scripted:{script}\n      supports_vision: true\n")
    return path


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("configs")
    plain = tmp / "empty.yaml"
    plain.write_text("{}\n")
    return [*EXAMPLES, _vision_by_named_model(tmp), plain]


def shown(config: Path, flags: dict[str, bool]) -> list[str]:
    args = ["chain", "show", "--json", "--config", str(config)]
    args += [FLAGS[name] for name, on in flags.items() if on]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return [plugin["name"] for plugin in json.loads(result.stdout)["plugins"]]


def built(config: Path, flags: dict[str, bool], registry) -> list[str]:
    operator = load_config(config, registry)
    runtime = runtime_for(operator, flags, model=operator.models.default)
    with create_agent(operator, runtime=runtime, registry=registry, checkpointer=None,
                      base_dir=str(config.parent / ".antler")) as agent:
        return list(agent.chain.plan.order)


@pytest.mark.parametrize("combo", list(itertools.product([False, True], repeat=3)),
                         ids=lambda c: "-".join(n for n, on in zip(FLAGS, c, strict=True) if on)
                         or "no-flags")
def test_the_shown_chain_is_the_built_chain(configs, registry, combo):
    flags = dict(zip(FLAGS, combo, strict=True))
    for config in configs:
        assert shown(config, flags) == built(config, flags, registry), (config.name, flags)


def test_vision_on_the_default_named_model_is_shown_and_built(configs, registry, tmp_path):
    config = _vision_by_named_model(tmp_path)
    assert "view_image" in shown(config, {})
    operator = load_config(config, registry)
    # the factory's own default (runtime=None), and the served graph, agree
    with create_agent(operator, registry=registry, checkpointer=None,
                      base_dir=str(tmp_path / ".antler")) as agent:
        assert "view_image" in agent.chain.plan.order
    served = build_server_agent(config, registry=registry, base_dir=str(tmp_path / ".srv"))
    try:
        assert "view_image" in served.chain.plan.order
    finally:
        served.close()
    for command in (["chain", "explain", "view_image"], ["chain", "report", "--html",
                                                          str(tmp_path / "r.html")]):
        result = CliRunner().invoke(cli, [*command, "--config", str(config)])
        assert result.exit_code == 0, result.output
    explained = CliRunner().invoke(cli, ["chain", "explain", "view_image", "--config",
                                         str(config)]).output
    assert explained.startswith("view_image is at position"), explained
