"""`on_error: skip` on a security gate: a warning for an optional gate, refused for an
`always` one, decided from the manifest's `security_gate:` (antler.chain.policy)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from antler.chain.config import parse_config
from antler.chain.policy import error_policy, gate_warnings
from antler.cli import cli
from antler.errors import ConfigError
from antler.plugin_api.registry import discover
from antler.plugin_api.spec import PluginSpec, Provenance
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

THIRD_PARTY = Provenance(source="acme.yaml", line=4, distribution="acme-antler",
                         entry_point="acme")


@pytest.fixture(scope="module")
def registry():
    return discover()


def check(tmp_path, text: str, *args: str) -> tuple[int, dict[str, Any]]:
    config = tmp_path / "antler.yaml"
    config.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["config", "check", str(config), "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_every_builtin_gate_names_what_skipping_it_would_let_through(registry):
    gates = {name for name, spec in registry.specs.items() if spec.security_gate}
    assert {"input_sanitization", "tool_result_sanitization", "authorization", "guardrail",
            "sandbox_audit", "read_before_write"} <= gates


def test_config_check_warns_about_skip_on_an_optional_gate(tmp_path):
    code, report = check(tmp_path, "plugins:\n  read_before_write: {on_error: skip}\n")
    assert code == 0 and report["valid"], report
    (warning,) = [w for w in report["warnings"] if "read_before_write" in w]
    assert "antler.yaml:2" in warning and "plugins.read_before_write.on_error" in warning
    assert "security gate" in warning
    assert "files the agent has not read" in warning  # what it would let through

    code, report = check(tmp_path, "plugins:\n  read_before_write: {on_error: skip}\n",
                         "--strict")
    assert code == 1 and not report["valid"]


def test_a_gate_that_is_not_in_the_chain_opens_nothing(tmp_path):
    code, report = check(tmp_path, "plugins:\n  authorization: {on_error: skip}\n")
    assert code == 0 and not any("authorization" in w for w in report["warnings"]), report
    code, report = check(tmp_path, "authorization: {enabled: true}\n"
                                   "plugins:\n  authorization: {on_error: skip}\n")
    assert any("'authorization' is a security gate" in w for w in report["warnings"]), report


@pytest.mark.parametrize("key", ["sandbox_audit", "antler"])
def test_skip_on_an_always_gate_is_refused(tmp_path, registry, key):
    text = f"plugins:\n  {key}: {{on_error: skip}}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, registry)
    message = str(caught.value)
    assert f"plugins.{key}.on_error" in message
    assert "'sandbox_audit', an `always` security gate" in message
    assert "shell commands that are neither classified nor audited" in message
    assert "Remove `on_error: skip`" in message
    assert ("{sandbox_audit: {on_error: fail}}" in message) == (key == "antler")

    code, report = check(tmp_path, text)
    assert code == 1 and any("sandbox_audit" in p["text"] for p in report["problems"]), report


def test_a_distribution_wide_skip_is_accepted_once_each_always_gate_fails_by_name(registry):
    always_gates = [name for name, spec in registry.specs.items()
                    if spec.security_gate and spec.always]
    text = "plugins:\n  antler: {on_error: skip}\n" + "".join(
        f"  {name}: {{on_error: fail}}\n" for name in always_gates)
    config = parse_config(text, registry)
    assert all(error_policy(registry.specs[n], config.plugin_settings) == "fail"
               for n in always_gates)
    optional = [spec for spec in registry.specs.values()
                if spec.security_gate and not spec.always]
    warned = gate_warnings(optional, config)
    assert len(warned) == len(optional) and all("plugins.antler.on_error" in w for w in warned)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_building_an_agent_warns_about_a_skipped_gate(tmp_path, registry, caplog, fuse):
    config = parse_config("title: {enabled: false}\nmemory: {enabled: false}\n"
                          "plugins:\n  read_before_write: {on_error: skip}\n", registry)
    with caplog.at_level(logging.WARNING, logger="antler.chain"), create_agent(
            config, model=ScriptedChatModel(["ok"]), registry=registry, checkpointer="memory",
            base_dir=tmp_path, fuse=fuse) as agent:
        assert "read_before_write" in agent.chain.names
        state = agent.invoke("hello", thread_id="t")
    assert state["messages"][-1].text == "ok"
    warnings = [r.getMessage() for r in caplog.records if r.name == "antler.chain"]
    assert len(warnings) == 1 and "'read_before_write' is a security gate" in warnings[0]


def test_a_default_build_warns_about_nothing(tmp_path, registry, caplog):
    with caplog.at_level(logging.WARNING, logger="antler.chain"), create_agent(
            model=ScriptedChatModel([]), registry=registry, checkpointer="memory",
            base_dir=tmp_path):
        pass
    assert not [r for r in caplog.records if r.name == "antler.chain"]


def test_a_third_party_gate_fails_closed_by_default_and_may_not_declare_skip_if_always():
    fields: dict[str, Any] = {"name": "acme_policy", "factory": "acme.middleware:Policy",
                              "provenance": THIRD_PARTY}
    assert error_policy(PluginSpec(**fields)) == "skip"  # an ordinary third-party plugin
    gate = PluginSpec(**fields, security_gate="tool calls the policy server would refuse")
    assert error_policy(gate) == "fail"
    skipped = PluginSpec(**fields, security_gate="tool calls the policy server would refuse",
                         on_error="skip")
    assert error_policy(skipped) == "skip"
    (warning,) = gate_warnings([skipped], parse_config("", discover()))
    assert "acme.yaml:4" in warning and "tool calls the policy server would refuse" in warning
    with pytest.raises(ValidationError, match="cannot declare on_error: skip"):
        PluginSpec(**fields, security_gate="tool calls the policy server would refuse",
                   on_error="skip", enabled="always")
