"""`tools:` in the operator config: LangChain tools by 'module:attr', per chain."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from langchain_core.messages import ToolMessage

from antler.chain.config import parse_config
from antler.cli import cli
from antler.errors import BuildError, ConfigError
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.configtools import load_config_tools
from antler.runtime.models import ScriptedChatModel

TOOLS = """
tools:
  - use: tests.fixtures.tools:shout
  - use: tests.fixtures.tools:make_counter
    chains: [lead, subagent]
    config: {start: 41, name: tally}
"""


@pytest.fixture(scope="module")
def registry():
    return discover()


@pytest.mark.parametrize("fuse", [True, False])
def test_configured_tools_run_in_a_real_agent(registry, tmp_path, fuse):
    config = parse_config(TOOLS, registry)
    model = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "shout", "args": {"text": "hi"}},
                                       {"name": "tally", "args": {}}]},
        "done",
    ])
    with create_agent(config, model=model, registry=registry, base_dir=tmp_path,
                      checkpointer="memory", fuse=fuse) as agent:
        result = agent.invoke("go", thread_id="t")
    results = {m.name: m.content for m in result["messages"] if isinstance(m, ToolMessage)}
    assert results == {"shout": "HI!", "tally": "42"}
    offered = set(model.requests[0].tool_names)
    assert {"shout", "tally"} <= offered


def test_each_chain_gets_only_its_entries(registry):
    config = parse_config(TOOLS, registry)
    assert [t.name for t in load_config_tools(config.tools, "lead")] == ["shout", "tally"]
    assert [t.name for t in load_config_tools(config.tools, "subagent")] == ["tally"]


@pytest.mark.parametrize(("entry", "message"), [
    ("{use: tests.fixtures.tools:missing}", "has no attribute 'missing'"),
    ("{use: tests.fixtures.tools:NOT_A_TOOL}", "is a int, neither a LangChain tool"),
    ("{use: tests.fixtures.tools:shout, config: {x: 1}}", "takes no `config`"),
    ("{use: tests.fixtures.tools:make_counter, config: {stop: 1}}",
     "does not accept this `config`"),
    ("{use: not_a_module_anywhere:thing}", "is not installed"),
])
def test_a_broken_entry_is_a_clear_error_naming_it(registry, entry, message):
    config = parse_config(f"tools:\n  - {entry}\n", registry)
    with pytest.raises(BuildError, match="tools\\[0\\]") as caught:
        load_config_tools(config.tools, "lead")
    assert message in str(caught.value)


def test_a_malformed_path_and_a_duplicate_name_are_refused(registry):
    with pytest.raises(ConfigError, match=r"tools\[0\]\.use"):
        parse_config("tools:\n  - use: tests.fixtures.tools.shout\n", registry)
    config = parse_config("tools:\n  - use: tests.fixtures.tools:shout\n"
                          "  - use: tests.fixtures.tools:shout\n", registry)
    with pytest.raises(BuildError, match="more than one configured tool is named shout"):
        load_config_tools(config.tools, "lead")


def test_config_check_imports_the_tools(tmp_path):
    path = tmp_path / "antler.yaml"
    path.write_text("tools:\n  - use: tests.fixtures.tools:shout\n"
                    "  - use: tests.fixtures.tools:NOT_A_TOOL\n")
    result = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert "antler.yaml:3:5: tools[1] (tests.fixtures.tools:NOT_A_TOOL)" in result.stderr


def test_the_schema_describes_models_and_tools():
    result = CliRunner().invoke(cli, ["config", "schema"])
    assert result.exit_code == 0
    text = result.stdout
    assert '"ToolEntry"' in text and '"ModelEntry"' in text
    assert '"enum": [\n' in text or '"enum": ["lead", "subagent"]' in text.replace("\n", "")


# -- every problem at once, unknown model names, problems as objects ----------------------


def test_config_check_reports_every_problem_at_once_as_objects(tmp_path):
    import json

    from click.testing import CliRunner

    from antler.cli import cli

    config = tmp_path / "antler.yaml"
    config.write_text("summarization:\n  enabled: true\n  model: nosuchmodel\n"
                      "sandbox:\n  command_timeout: abc\ntitle:\n  enable: true\n"
                      "extensions:\n  middlewares:\n    - nosuch_module_x.mod:Thing\n")
    result = CliRunner().invoke(cli, ["config", "check", str(config), "--json"])
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["problems"]
    # a validation error, a typo, an unconfigured model and an extension that does not
    # import: all four in one run, each located
    assert [(p["line"], p["column"], p["key"]) for p in problems] == [
        (5, 3, "sandbox.command_timeout"), (7, 3, "title.enable"),
        (3, 3, "summarization.model"), (10, 7, "extensions.middlewares[0]")]
    assert all(p["file"] == str(config) for p in problems)
    assert "'nosuchmodel' is neither a model named under `models.named`" in problems[2]["message"]
    text = CliRunner().invoke(cli, ["config", "check", str(config)]).stderr
    assert text.startswith(f"error: {config}: 4 problems:")


def test_an_unconfigured_model_name_stops_a_run_naming_the_key(tmp_path):
    from click.testing import CliRunner

    from antler.cli import cli

    script = tmp_path / "script.yaml"
    script.write_text("- hello\n")
    config = tmp_path / "antler.yaml"
    config.write_text("summarization:\n  enabled: true\n  model: nosuchmodel\n")
    result = CliRunner().invoke(cli, ["run", "--config", str(config), "--model",
                                      f"scripted:{script}", "hi"])
    assert result.exit_code == 1, result.output
    assert f"{config}:3:3: summarization.model: 'nosuchmodel'" in result.stderr
    assert "Traceback" not in result.output
