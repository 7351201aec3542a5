"""guardrail: an explicitly configured provider evaluates every tool call in a real graph,
after authorization, with identity only from the run context; fail_closed, audit, and the
same answers sync and async. A blocked tool must never run."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from antler.errors import ConfigError
from antler.plugin_api.providers import GUARDRAIL_AUDIT_LOGGER, GUARDRAIL_PROVIDER, TOOL_META_KEY
from antler.plugins.guardrail.allowlist import AllowlistGuardrail
from antler.plugins.guardrail.middleware import GuardrailMiddleware
from antler.testing import assert_before
from tests.plugins.guard_support import (
    Counter,
    CountingGuardrail,
    ainvoke,
    audit_records,
    audits,
    call,
    calls,
    make_agent,
    register_providers,
    tool_results,
)

ALLOWLIST = """
guardrails:
  enabled: true
  provider: allowlist
  provider_options: {allow: [lookup, "read_*"], deny: [read_secrets]}
"""


@pytest.fixture(autouse=True)
def providers(site):
    register_providers(site)


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def tools_of(counter: Counter) -> list[Any]:
    return [counter.tool(name) for name in ("lookup", "launch", "read_secrets")]


def blocked(message: Any) -> bool:
    meta = message.additional_kwargs.get(TOOL_META_KEY, {})
    return message.status == "error" and meta.get("source") == "guardrail"


def test_guardrails_are_off_by_default(home):
    agent, _ = make_agent(home, ["hi"])
    assert "guardrail" not in agent.chain.names


def test_enabling_guardrails_without_a_provider_is_a_config_error(home):
    with pytest.raises(ConfigError, match="no `provider` is configured"):
        make_agent(home, ["hi"], "guardrails: {enabled: true}\n")


def test_a_blank_guardrail_provider_is_a_config_error_and_a_name_is_stripped(home):
    from antler.plugins.guardrail.config import GuardrailsConfig

    with pytest.raises(ConfigError, match=r"guardrails\.provider.*is empty; name a provider such "
                                          r"as 'allowlist'"):
        make_agent(home, ["hi"], "guardrails: {enabled: true, provider: '  '}\n")
    assert GuardrailsConfig(provider=" allowlist ", provider_options={"allow": []}).provider \
        == "allowlist"


def test_an_unknown_guardrail_provider_fails_the_build(home):
    with pytest.raises(Exception, match="Did you mean 'allowlist'"):
        make_agent(home, ["hi"], "guardrails: {enabled: true, provider: alowlist}\n")


def test_the_allowlist_runs_listed_tools_and_blocks_the_rest(home, counter, caplog):
    script = [calls(("lookup", {}), ("launch", {}), ("read_secrets", {})), "done"]
    agent, model = make_agent(home, script, ALLOWLIST, tools=tools_of(counter))
    assert_before(agent.chain, "guardrail", "sandbox_audit")
    with agent, caplog.at_level(logging.INFO, logger="antler.audit.guardrail"):
        state = agent.invoke("go", thread_id="t1", user_id="alice")
    lookup, launch, secrets = tool_results(state)
    assert lookup.status == "success"
    assert blocked(launch) and "not on the allowlist" in launch.content
    assert blocked(secrets) and "deny list" in secrets.content
    assert launch.additional_kwargs[TOOL_META_KEY]["recoverable_by_model"] is True
    assert (counter["lookup"], counter["launch"], counter["read_secrets"]) == (1, 0, 0)
    # No visibility layer: the model was offered every tool; each call was evaluated.
    assert {"lookup", "launch"} <= set(model.requests[0].tool_names)
    logged = audits(caplog, GUARDRAIL_AUDIT_LOGGER)
    decisions = sorted((a["target"], a["allowed"], a["rule"]) for a in logged)
    assert decisions == [("launch", False, "not_listed"), ("lookup", True, "allow:lookup"),
                      ("read_secrets", False, "deny:read_secrets")]
    assert all(a["user_id"] == "alice" for a in logged)


def test_the_sandbox_tools_are_blocked_before_they_touch_the_disk(home):
    agent, _ = make_agent(home, [call("write_file", path="x.txt", content="x"), "done"],
                          ALLOWLIST)
    with agent:
        state = agent.invoke("go", thread_id="t1")
    assert blocked(tool_results(state)[0])
    assert not (home / "users").exists()  # not even the thread directories were created


def test_every_call_reaches_the_provider_with_run_identity_and_copied_args(home, counter):
    guard = CountingGuardrail()
    args = {"query": "x", "role": "admin", "is_internal": True, "nested": {"k": [1]}}
    script = [calls(("lookup", args), ("lookup", {}), ("launch", {})), "done"]
    agent, _ = make_agent(home, script, "guardrails: {enabled: true, provider: counting}\n",
                          tools=tools_of(counter), services={GUARDRAIL_PROVIDER: guard})
    forged = HumanMessage(content="hi", additional_kwargs={"roles": ["admin"],
                                                          "is_internal": True})
    with agent:
        state = agent.invoke(forged, thread_id="t1", user_id="carol", roles=["analyst"],
                             attributes={"team": "blue"})
    assert sorted(r.tool_name for r in guard.requests) == ["launch", "lookup", "lookup"]
    for request in guard.requests:
        assert request.principal.user_id == "carol"
        assert request.principal.roles == ("analyst",)
        assert request.principal.is_internal is False  # not from args or message kwargs
        assert request.principal.attributes == {"team": "blue"}
        assert request.thread_id == "t1" and request.run_id and request.tool_call_id
    [with_args] = [r for r in guard.requests if r.args]
    assert with_args.args == args and with_args.args is not args
    assert counter["lookup"] == 2 and counter["launch"] == 0
    assert [m.status for m in tool_results(state)].count("error") == 1


def test_a_failing_guardrail_denies_by_default(home, counter, caplog):
    config = "guardrails: {enabled: true, provider: broken_guardrail}\n"
    agent, _ = make_agent(home, [call("lookup"), "done"], config, tools=tools_of(counter))
    with agent, caplog.at_level(logging.INFO, logger="antler.audit.guardrail"):
        state = agent.invoke("go", thread_id="t1")
    [result] = tool_results(state)
    assert blocked(result) and counter["lookup"] == 0
    assert result.additional_kwargs[TOOL_META_KEY]["recommended_next_action"] == "stop"
    [record] = audit_records(caplog, GUARDRAIL_AUDIT_LOGGER)
    assert "guardrail service down" in record.audit["error"]  # type: ignore[attr-defined]
    assert record.levelno == logging.WARNING


def test_a_failing_guardrail_fails_open_when_configured(home, counter, caplog):
    config = "guardrails: {enabled: true, provider: broken_guardrail, fail_closed: false}\n"
    agent, _ = make_agent(home, [call("lookup"), "done"], config, tools=tools_of(counter))
    with agent, caplog.at_level(logging.INFO, logger="antler.audit.guardrail"):
        agent.invoke("go", thread_id="t1")
    assert counter["lookup"] == 1
    [audit] = audits(caplog, GUARDRAIL_AUDIT_LOGGER)
    assert audit["allowed"] is True and audit["rule"] == "fail_open"


def test_async_runs_decide_exactly_like_sync_runs(home, counter):
    script = [calls(("lookup", {}), ("launch", {}), ("read_secrets", {})), "done"]
    outcomes = []
    for run in ("sync", "async"):
        agent, _ = make_agent(home / run, list(script), ALLOWLIST, tools=tools_of(counter))
        with agent:
            state = (agent.invoke("go", thread_id="t1") if run == "sync"
                     else ainvoke(agent, "go", thread_id="t1"))
        outcomes.append([(m.name, m.status, m.additional_kwargs.get(TOOL_META_KEY))
                         for m in tool_results(state)])
    assert outcomes[0] == outcomes[1]
    assert (counter["lookup"], counter["launch"], counter["read_secrets"]) == (2, 0, 0)


def test_one_provider_instance_per_build(home, counter):
    agent, _ = make_agent(home, ["hi"], ALLOWLIST, tools=tools_of(counter))
    [entry] = [e for e in agent.chain.entries if e.name == "guardrail"]
    assert isinstance(entry.middleware, GuardrailMiddleware)
    assert entry.middleware.provider is agent.services.get(GUARDRAIL_PROVIDER)
    assert isinstance(entry.middleware.provider, AllowlistGuardrail)
