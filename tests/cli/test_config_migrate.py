"""`antler config migrate`: DeerFlow-shaped configs become valid Antler configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from antler.chain import plan_chain
from antler.chain.config import load_config, schema_sections
from antler.cli import cli
from antler.deerflow import migrate_deerflow
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.plugin_api.yamlsource import load_yaml_file

DATA = Path(__file__).parents[1] / "data" / "deerflow"


@pytest.fixture(scope="module")
def registry():
    return discover()


def migrate(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["config", "migrate", *[str(a) for a in args]])
    return result.exit_code, result.stdout, result.stderr


def lead_order(registry, path: Path) -> set[str]:
    config = load_config(path, registry)
    plan = plan_chain(config, "lead", RuntimeOptions(subagents_enabled=True), registry=registry)
    return set(plan.order)


def test_a_full_deerflow_config_migrates_and_passes_config_check(tmp_path, registry):
    out = tmp_path / "antler.yaml"
    code, stdout, stderr = migrate(DATA / "full.yaml", "-o", out)
    assert code == 0, stderr
    assert stdout == ""  # the config went to the file; the report to stderr
    check = CliRunner().invoke(cli, ["config", "check", str(out)])
    assert check.exit_code == 0, check.output
    migrated = yaml.safe_load(out.read_text())
    assert migrated["sandbox"] == {"require_isolation": True, "max_output_bytes": 20000,
                                   "command_timeout": 600}
    assert migrated["models"]["default"] == "main-model"
    assert migrated["models"]["named"]["helper"]["base_url"] == "https://api.example.com/v1"
    assert migrated["models"]["named"]["main-model"]["api_key"] == "$OPENAI_API_KEY"  # unexpanded
    assert migrated["guardrails"] == {"enabled": True, "provider": "allowlist",
                                      "provider_options": {"allow": ["read_file", "ls", "bash"]}}
    assert migrated["llm_error_handling"]["circuit_breaker"]["failure_threshold"] == 4
    assert migrated["storage"] == {"checkpointer": "sqlite", "messages_channel": "delta",
                                   "snapshot_every": 50}
    assert migrated["subagent_token_budget"]["max_tokens"] == 1000000
    assert migrated["summarization"]["model"] == "helper"
    # the read tools whose SKILL.md reads record a skill: durable_context's setting here
    assert migrated["durable_context"]["skill_read_tools"] == ["read_file"]
    assert "skill_file_read_tool_names" not in migrated["summarization"]
    # every key is reported, with its line
    assert "full.yaml:78:3: sandbox.bash_command_timeout -> sandbox.command_timeout" in stderr
    assert "full.yaml:61:3: loop_detection.max_tracked_threads: dropped:" in stderr
    assert "full.yaml:36:5: tools[0]: unmapped: `web_search` is DeerFlow's own tool" in stderr
    assert "full.yaml:137:1: channels: dropped: IM channels are a gateway feature" in stderr
    assert stderr.strip().splitlines()[-1].endswith(f"unmapped; wrote {out}")


def test_the_migrated_chain_is_the_one_deerflow_describes(tmp_path, registry):
    full = tmp_path / "full.yaml"
    minimal = tmp_path / "minimal.yaml"
    assert migrate(DATA / "full.yaml", "-o", full)[0] == 0
    assert migrate(DATA / "minimal.yaml", "-o", minimal)[0] == 0
    on = lead_order(registry, full)
    off = lead_order(registry, minimal)
    # full.yaml switches these on; minimal.yaml switches them off
    for plugin in ("token_usage", "loop_detection", "read_before_write", "safety_finish_reason",
                   "summarization", "title", "memory"):
        assert plugin in on, plugin
        assert plugin not in off, plugin
    # only full.yaml enables tool_progress and guardrails; neither enables the token budget
    assert {"tool_progress", "guardrail"} <= on and not {"tool_progress", "guardrail"} & off
    assert "token_budget" not in on and "authorization" not in on
    # layers that are always on in both harnesses stay on
    for plugin in ("input_sanitization", "tool_error_handling", "tool_output_budget",
                   "llm_error_handling", "clarification", "sandbox"):
        assert plugin in on and plugin in off


def test_every_key_gets_exactly_one_outcome(registry):
    doc = load_yaml_file(DATA / "full.yaml")
    migration = migrate_deerflow(doc, schema_sections(registry))
    sources = [note.source for note in migration.notes]
    assert len(sources) == len(set(sources))
    for section in doc.data:
        assert any(s == section or s.startswith((f"{section}.", f"{section}["))
                   for s in sources), section
    assert {note.outcome for note in migration.notes} == {"mapped", "dropped", "unmapped"}


def test_a_section_of_a_plugin_that_is_not_installed_is_reported_not_written(registry):
    doc = load_yaml_file(DATA / "full.yaml")
    installed = schema_sections(registry)
    sections = {k: v for k, v in installed.items()
                if k not in ("loop_detection", "llm_error_handling")}
    migration = migrate_deerflow(doc, sections)
    assert "loop_detection" not in migration.config
    assert "llm_error_handling" not in migration.config
    by_source = {n.source: n for n in migration.notes}
    assert by_source["loop_detection"].outcome == "unmapped"
    renamed = by_source["circuit_breaker.failure_threshold"]  # mapped into a missing section
    assert renamed.outcome == "unmapped" and "not installed here" in renamed.why


def test_extensions_config_maps_skill_switches(tmp_path, registry):
    code, stdout, stderr = migrate(DATA / "minimal.yaml", "--extensions",
                                   DATA / "extensions_config.json", "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["config"]["skills"] == {"disabled": ["legacy-skill"]}
    mcp = [n for n in report["notes"] if n["source"].startswith("mcpServers")]
    assert mcp and all(n["where"].startswith(str(DATA / "extensions_config.json")) for n in mcp)
    assert report["counts"]["mapped"] >= 4


def test_bad_input_is_one_clear_error(tmp_path):
    not_a_mapping = tmp_path / "list.yaml"
    not_a_mapping.write_text("- a\n- b\n")
    code, _, stderr = migrate(not_a_mapping)
    assert code == 1 and "a DeerFlow config is a mapping of sections" in stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("models: [\n")
    code, _, stderr = migrate(broken)
    assert code == 1 and "broken.yaml:" in stderr and "Traceback" not in stderr
    bad_json = tmp_path / "ext.json"
    bad_json.write_text("{\"mcpServers\": ")
    code, _, stderr = migrate(DATA / "minimal.yaml", "--extensions", bad_json)
    assert code == 1 and "ext.json:1:" in stderr and "not valid JSON" in stderr
    out = tmp_path / "exists.yaml"
    out.write_text("x: 1\n")
    code, _, stderr = migrate(DATA / "minimal.yaml", "-o", out)
    assert code == 1 and "--force" in stderr


def test_deerflow_keys_in_an_antler_config_get_a_precise_hint(tmp_path):
    path = tmp_path / "antler.yaml"
    path.write_text("sandbox:\n  bash_command_timeout: 30\nmemory:\n  mode: middleware\n"
                    "title:\n  mode: {a: 1}\n  enable: true\n")
    result = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert ("sandbox.bash_command_timeout: unknown key 'bash_command_timeout': "
            "`sandbox.bash_command_timeout` is DeerFlow's name; Antler's is `command_timeout`"
            in result.stderr)
    assert "memory.mode: unknown key 'mode': `memory.mode` is a DeerFlow setting" in result.stderr
    # no did-you-mean toward a key the value could not go under either
    assert ("title.mode: unknown key 'mode'; valid keys: enabled, first_exchange_only, "
            "max_chars, model") in result.stderr
    assert "title.enable: unknown key 'enable' (did you mean 'enabled'?)" in result.stderr


def test_wrong_shapes_say_what_is_expected_with_an_example(tmp_path):
    path = tmp_path / "antler.yaml"
    path.write_text("sandbox:\n  command_timeout: {seconds: 5}\nloop_detection:\n"
                    "  warn_threshold: many\nmodels:\n  default: 3\n")
    result = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert "sandbox.command_timeout: expects a number (Seconds a bash command may run before it " \
           "is killed), e.g. `command_timeout: 60.0`; got a mapping" in result.stderr
    assert "loop_detection.warn_threshold: expects a whole number" in result.stderr
    assert "got a string ('many')" in result.stderr
    assert "models.default: expects a string" in result.stderr
    assert "Input should be" not in result.stderr


# -- protections, names as data, MCP settings, DeerFlow files under `config check` ----------


def test_host_bash_off_becomes_require_isolation_and_refuses_an_unisolated_host(
        tmp_path, registry, monkeypatch):
    from types import SimpleNamespace

    import antler.runtime.sandbox.choice as choice

    out = tmp_path / "antler.yaml"
    code, _, stderr = migrate(DATA / "example_shape.yaml", "-o", out)
    assert code == 0, stderr
    assert "sandbox.allow_host_bash -> sandbox.require_isolation" in stderr
    config = load_config(out, registry)
    sandbox = config.section("sandbox")
    assert sandbox.require_isolation is True
    # on a host without bubblewrap the migrated config refuses instead of running bash on it
    monkeypatch.setattr(choice, "bwrap_status",
                        lambda: SimpleNamespace(usable=False, reason="not installed"))
    report = choice.describe_sandbox(sandbox)
    assert report["provider"] is None and "require_isolation" in report["error"]


@pytest.mark.parametrize(("sandbox", "isolated"), [
    ("  use: deerflow.sandbox.local:LocalSandboxProvider\n", True),  # DeerFlow's default: off
    ("  use: deerflow.sandbox.local:LocalSandboxProvider\n  allow_host_bash: false\n", True),
    ("  use: deerflow.community.aio_sandbox:AioSandboxProvider\n", True),  # a container
    ("  use: deerflow.sandbox.local:LocalSandboxProvider\n  allow_host_bash: true\n", False),
])
def test_every_sandbox_shape_keeps_its_isolation(tmp_path, registry, sandbox, isolated):
    source = tmp_path / "config.yaml"
    source.write_text("sandbox:\n" + sandbox)
    migration = migrate_deerflow(load_yaml_file(source), schema_sections(registry))
    assert migration.config.get("sandbox", {}).get("require_isolation", False) is isolated


def test_model_names_with_dots_are_names(tmp_path, registry):
    source = tmp_path / "config.yaml"
    source.write_text(
        "models:\n"
        "  - name: doubao-seed-1.8\n    use: langchain_openai:ChatOpenAI\n"
        "    model: doubao-seed-1-8\n    api_base: https://ark.example.com/v3\n"
        "    supports_vision: true\n    reasoning: true\n"
        "  - name: gpt-4.1\n    use: langchain_openai:ChatOpenAI\n    model: gpt-4.1\n"
        "summarization:\n  enabled: true\n  model_name: gpt-4.1\n")
    out = tmp_path / "antler.yaml"
    code, _, stderr = migrate(source, "-o", out)
    assert code == 0, stderr
    assert 'models[0].use -> models.named."doubao-seed-1.8".use' in stderr
    config = load_config(out, registry)
    assert set(config.models.named) == {"doubao-seed-1.8", "gpt-4.1"}
    assert config.models.default == "doubao-seed-1.8"
    assert config.models.named["doubao-seed-1.8"].base_url == "https://ark.example.com/v3"
    assert config.models.named["doubao-seed-1.8"].kwargs == {"reasoning": True}
    assert config.section("summarization").model == "gpt-4.1"
    assert CliRunner().invoke(cli, ["config", "check", str(out)]).exit_code == 0


def test_a_model_that_was_not_migrated_is_not_referenced(tmp_path, registry):
    source = tmp_path / "config.yaml"
    source.write_text(
        "models:\n  - name: main\n    use: langchain_openai:ChatOpenAI\n    model: gpt-4o\n"
        "  - name: mimo\n    use: deerflow.models.patched_mimo:PatchedChatMiMo\n"
        "title:\n  model_name: mimo\n")
    migration = migrate_deerflow(load_yaml_file(source), schema_sections(registry))
    assert "model" not in migration.config.get("title", {})
    note = next(n for n in migration.notes if n.source == "title.model_name")
    assert note.outcome == "unmapped" and "'mimo' was not migrated" in note.why


def test_deerflows_example_shape_is_reported_truthfully(registry):
    migration = migrate_deerflow(load_yaml_file(DATA / "example_shape.yaml"),
                                 schema_sections(registry))
    by_source = {n.source: n for n in migration.notes}
    models = by_source["models"]
    assert models.outcome == "dropped" and "every entry is commented out" in models.why
    assert "expected" not in models.why
    audit = by_source["plugins[0]"]
    assert audit.outcome == "unmapped" and "`company-audit`" in audit.why
    assert "expected a mapping" not in audit.why
    assert by_source["plugins[1]"].outcome == "dropped"
    assert "models" not in migration.config  # nothing invented


def test_mcp_settings_keep_routing_prefix_and_timeouts(tmp_path, registry):
    out = tmp_path / "antler.yaml"
    code, _, stderr = migrate(DATA / "minimal.yaml", "--extensions",
                              DATA / "extensions_mcp.json", "-o", out)
    assert code == 0, stderr
    servers = load_config(out, registry).mcp_servers
    github = servers["github"]
    assert github.tool_name_prefix == "github_"  # DeerFlow's `true`: server name and '_'
    assert (github.start_timeout, github.call_timeout) == (20.0, 45.0)
    assert github.routing.mode == "prefer"
    assert github.routing.keywords == ["issue", "pull request"]
    assert github.routing.priority == 0  # DeerFlow's default, not Antler's 50
    assert github.routing_for("create_issue").mode == "off"  # per-tool routing kept
    assert github.env == {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}  # Antler's reference syntax
    # an SSE server is written switched off, and the report says why; OAuth is reported lost
    assert servers["my-sse-server"].enabled is False
    assert "mcpServers.my-sse-server.type: unmapped: Antler speaks stdio" in stderr
    assert "mcpServers.my-sse-server.oauth: unmapped:" in stderr
    assert "overleaf" not in servers  # a switched-off placeholder with no URL
    # DeerFlow's default prefixes tool names with the server's name: the names are kept
    assert servers["filesystem"].tool_name_prefix == "filesystem_"
    # notes carry the JSON file's lines
    assert f"{DATA / 'extensions_mcp.json'}:9:7: mcpServers.github.tool_name_prefix" in stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_config_check_on_a_deerflow_file_says_migrate_first(as_json):
    args = ["config", "check", str(DATA / "full.yaml")] + (["--json"] if as_json else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    text = result.stdout if as_json else result.stderr
    assert "this is a DeerFlow config" in text and "antler config migrate" in text
    assert "unknown" not in text  # not one error per DeerFlow key
    if as_json:
        assert len(json.loads(result.stdout)["problems"]) == 1


def test_deerflow_sandbox_tools_are_built_in_glob_and_grep_included(registry):
    from antler.plugin_api.yamlsource import load_yaml

    doc = load_yaml("tools:\n"
                    "  - {name: glob, group: file:read, use: deerflow.sandbox.tools:glob_tool}\n"
                    "  - {name: grep, group: file:read, use: deerflow.sandbox.tools:grep_tool}\n"
                    "  - {name: edit, group: file:write, use: deerflow.sandbox.tools:edit_tool}\n"
                    "tool_groups: [{name: file:read}]\n")
    migration = migrate_deerflow(doc, schema_sections(registry))
    by_source = {n.source: n for n in migration.notes}
    glob, grep, edit = (by_source[f"tools[{index}]"] for index in range(3))
    assert glob.outcome == grep.outcome == "dropped"
    assert "`glob` is built into Antler's sandbox plugin (tool group `file:read`)" in glob.why
    assert "`grep` is built into" in grep.why
    assert edit.outcome == "unmapped" and "glob, grep" in edit.why
    assert "`file:read` (ls, read_file, glob, grep)" in by_source["tool_groups"].why


def test_comments_of_keys_that_map_over_are_kept(tmp_path, registry):
    source = tmp_path / "config.yaml"
    source.write_text(
        "# Token usage: shown in the UI\ntoken_usage:\n  enabled: true   # keep for billing\n"
        "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n"
        "  # host bash stays off: no isolation boundary\n  allow_host_bash: false\n"
        "  # ten minutes per command\n  bash_command_timeout: 600\n"
        "models:\n  - name: gpt-4.1\n    use: langchain_openai:ChatOpenAI\n"
        "    # the API model id\n    model: gpt-4.1\n")
    out = tmp_path / "antler.yaml"
    code, _, stderr = migrate(source, "-o", out)
    assert code == 0, stderr
    text = out.read_text()
    assert "# Token usage: shown in the UI\ntoken_usage:\n  # keep for billing\n  enabled: true" \
        in text
    assert "  # host bash stays off: no isolation boundary\n  require_isolation: true" in text
    assert "  # ten minutes per command\n  command_timeout: 600" in text
    assert "      # the API model id\n      model: gpt-4.1" in text
    # the data is what it was without the comments, and it loads
    migration = migrate_deerflow(load_yaml_file(source), schema_sections(registry))
    assert yaml.safe_load(text) == migration.config
    assert CliRunner().invoke(cli, ["config", "check", str(out)]).exit_code == 0
