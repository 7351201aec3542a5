"""A whole DeerFlow-style example config, migrated and run end to end (issue 33).

`tests/data/deerflow/config.example.yaml` and `extensions_config.example.json`
follow the layout of DeerFlow's example files (every model commented out, host
bash off, a guardrail deny list, the guards switched on, MCP servers and skill
switches in the extensions file). Each step is the real command an operator
types: `antler config migrate`, `antler config check`, `antler chain show` (through
the command line in this process), `antler run` with a scripted model (a process).
The protections the DeerFlow file asked for must hold in the run, not only appear in
the migrated text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from antler.cli import cli
from antler.runtime.sandbox.bwrap import bwrap_status
from tests.machine import bare_path, require

DATA = Path(__file__).parents[1] / "data" / "deerflow"
EXAMPLE = DATA / "config.example.yaml"
EXTENSIONS = DATA / "extensions_config.example.json"
HANG_GUARD = 180


def antler(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "antler", *map(str, args)],
                          capture_output=True, text=True, timeout=HANG_GUARD,
                          env={**os.environ, **(env or {})})


def command(*args: object) -> subprocess.CompletedProcess[str]:
    """`antler ARGS` through the real command in this process: `config migrate`, `config
    check` and `chain show` (each would spend up to a CPU-second and a half importing Antler
    in a process of its own); `antler run`, which runs commands, gets its own (`antler`)."""
    done = CliRunner().invoke(cli, list(map(str, args)))
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return subprocess.CompletedProcess(args, done.exit_code, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> tuple[Path, str]:
    """The migrated config file and the migration's report (stderr)."""
    out = tmp_path_factory.mktemp("migrated") / "antler.yaml"
    result = command("config", "migrate", EXAMPLE, "--extensions", EXTENSIONS, "-o", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    return out, result.stderr


def test_every_key_of_the_example_is_accounted_for(migrated):
    _out, report = migrated
    lines = report.strip().splitlines()
    *notes, summary = lines
    assert summary.endswith("unmapped; wrote " + str(_out))
    for section in yaml.safe_load(EXAMPLE.read_text()):
        assert any(f": {section}" in note for note in notes), section
    # what could not be carried over is said, with what to do
    unmapped = [note for note in notes if ": unmapped: " in note]
    assert {note.split(": ")[1] for note in unmapped} == {
        "tools[0]", "tools[1]", "subagents.timeout_seconds"}, unmapped
    assert all("port it as a LangChain tool" in note for note in unmapped[:2])


def test_the_protections_are_kept_in_the_migrated_file(migrated):
    out, _report = migrated
    config = yaml.safe_load(out.read_text())
    assert config["sandbox"] == {"require_isolation": True, "max_output_bytes": 20000,
                                 "command_timeout": 300}
    assert config["guardrails"] == {"enabled": True, "provider": "allowlist",
                                    "provider_options": {"deny": ["write_file", "str_replace"],
                                                         "allow": ["*"]}}
    for section in ("loop_detection", "read_before_write", "safety_finish_reason",
                    "tool_output"):
        assert config[section]["enabled"] is True, section
    assert config["loop_detection"]["hard_limit"] == 5
    assert config["memory"] == {"enabled": True, "debounce_seconds": 30, "max_facts": 100}
    assert all(server["enabled"] is False for server in config["mcp_servers"].values())
    assert config["mcp_servers"]["github"]["env"] == {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}
    assert config["skills"] == {"disabled": ["ppt-generation"]}
    assert "models" not in config  # every DeerFlow model is commented out
    # the operator's comments stay with the keys they document
    text = out.read_text().splitlines()
    at = text.index("  require_isolation: true")
    assert text[at - 2:at] == ["  # Host bash stays off: the model's shell commands never "
                               "run on the host", "  # itself. Only switch this on for a "
                               "trusted, single-user machine."]


def test_config_check_and_chain_show_are_clean(migrated):
    out, _report = migrated
    check = command("config", "check", out)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith(f"ok: {out} is valid") and check.stderr == ""
    shown = json.loads(command("chain", "show", "--config", out, "--json").stdout)
    lead = [plugin["name"] for plugin in shown["plugins"]]
    for guard in ("guardrail", "sandbox_audit", "read_before_write", "loop_detection",
                  "safety_finish_reason", "tool_output_budget"):
        assert guard in lead, guard
    assert shown["sandbox"]["require_isolation"] is True
    assert shown["problems"] == [] and shown["warnings"] == []


SCRIPT: list[Any] = [
    {"content": "", "tool_calls": [{"name": "write_file", "args": {
        "path": "/mnt/user-data/workspace/notes.txt", "content": "overwritten"}}]},
    {"content": "", "tool_calls": [{"name": "bash", "args": {
        "command": "test -e {secret} && echo host-visible || echo host-hidden"}}]},
    "done",
    "A title",
    "[]",
]


def _scripted_run(tmp_path: Path, config: Path, env: dict[str, str] | None = None
                  ) -> subprocess.CompletedProcess[str]:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("not for the model")
    turns = json.loads(json.dumps(SCRIPT).replace("{secret}", str(secret)))
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(turns))
    return antler("run", "tidy up", "--config", config, "--model", f"scripted:{script}",
                  "--home", tmp_path / "home", "--thread", "t1", env=env)


def test_a_run_with_the_migrated_config_keeps_the_protections(migrated, tmp_path):
    if not bwrap_status().usable:
        require("bubblewrap is not usable here", "apt-get install bubblewrap")
    out, _report = migrated
    run = _scripted_run(tmp_path, out)
    assert run.returncode == 0, run.stderr
    # the guardrail's deny list: the write is refused and nothing is written
    assert "<- write_file: Error: the guardrail blocked this call to 'write_file'" in run.stderr
    assert not list((tmp_path / "home").rglob("notes.txt"))
    # the audit record reads as one line, not as raw JSON
    assert "[audit] guardrail denied write_file: tool 'write_file' is on the deny list" \
        in run.stderr and '"event": "guardrail.decision"' not in run.stderr
    # host bash off: the command ran isolated, where the host's files are not
    assert "<- bash: host-hidden" in run.stderr
    assert run.stdout.strip() == "done"


def test_without_isolation_the_migrated_config_refuses_to_run_commands(migrated, tmp_path):
    out, _report = migrated
    path = bare_path(tmp_path / "bin", os.environ.get("PATH", ""))
    run = _scripted_run(tmp_path, out, env={"PATH": path})
    assert run.returncode == 1
    assert "sandbox.require_isolation is true, but bubblewrap is not usable" in run.stderr
    assert "-> bash" not in run.stderr and "Traceback" not in run.stderr


def test_a_deny_list_alone_allows_the_other_tools_and_config_check_catches_a_missing_allow(
        tmp_path):
    source = tmp_path / "config.yaml"
    source.write_text(yaml.safe_dump({"guardrails": {"enabled": True, "provider": {
        "use": "deerflow.guardrails.builtin:AllowlistProvider",
        "config": {"denied_tools": ["bash"]}}}}))
    result = command("config", "migrate", source, "--json")
    assert result.returncode == 0, result.stderr
    options = json.loads(result.stdout)["config"]["guardrails"]["provider_options"]
    assert options == {"deny": ["bash"], "allow": ["*"]}
    hand_written = tmp_path / "antler.yaml"
    hand_written.write_text("guardrails:\n  enabled: true\n  provider: allowlist\n"
                            "  provider_options: {deny: [bash]}\n")
    check = command("config", "check", hand_written)
    assert check.returncode == 1
    assert "needs `provider_options.allow`" in check.stderr + check.stdout


def test_memory_model_name_becomes_memory_model(tmp_path):
    source = tmp_path / "config.yaml"
    source.write_text(yaml.safe_dump({
        "models": [{"name": "small-model", "use": "langchain_openai:ChatOpenAI",
                    "model": "gpt-4.1-mini", "api_key": "$OPENAI_API_KEY"}],
        "memory": {"enabled": True, "model_name": "small-model",
                   "storage_path": "memory.json"}}))
    result = command("config", "migrate", source, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["config"]["memory"] == {"enabled": True, "model": "small-model"}
    outcomes = {note["source"]: note["outcome"] for note in report["notes"]}
    assert outcomes["memory.model_name"] == "mapped"
    assert outcomes["memory.storage_path"] == "dropped"
