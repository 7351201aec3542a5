"""antler.plugin_api.providers: the principal builder, decisions, fail_closed, audit records
and provider loading by name, plus the shipped RBAC provider and allowlist guardrail."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import pickle

import pytest

from antler.contracts.runcontext import RunContext
from antler.plugin_api.providers import (
    AUTHORIZATION_PROVIDER_GROUP,
    GUARDRAIL_PROVIDER_GROUP,
    TOOL_META_KEY,
    Action,
    AuthorizationProvider,
    Decision,
    GuardrailRequest,
    Principal,
    ProviderConfigError,
    ProviderLoadError,
    UnknownProviderError,
    aevaluate,
    audit_decision,
    available_authorization_providers,
    denied_tool_message,
    evaluate,
    load_authorization_provider,
    load_guardrail_provider,
    principal_from_context,
    resolve_authorization_provider,
    tool_name,
)
from antler.plugins.authorization.rbac import RBACProvider
from antler.plugins.guardrail.allowlist import AllowlistGuardrail
from tests.plugins.guard_support import ClearanceProvider, register_providers

ROLES = {"admin": ["*"], "user": ["read_file", "ls", "web_*"], "auditor": ["ls"]}


# -- the principal ----------------------------------------------------------------------------


def test_principal_takes_user_roles_and_attributes_from_the_run_context():
    context = RunContext(user_id="alice", roles=("user", "auditor"), is_internal=True,
                         attributes={"team": {"name": "blue"}})
    principal = principal_from_context(context, default_role="guest")
    assert principal.user_id == "alice"
    assert principal.roles == ("user", "auditor")  # default_role only when none is named
    assert principal.is_internal is True
    assert principal.attributes == {"team": {"name": "blue"}}


def test_default_role_applies_only_to_a_context_without_roles():
    assert principal_from_context(RunContext(), "user").roles == ("user",)
    assert principal_from_context(RunContext()).roles == ()
    odd = RunContext(roles=("", "  ", "user", "user", 7))  # type: ignore[arg-type]
    assert principal_from_context(odd, "guest").roles == ("user",)


@pytest.mark.parametrize("value", ["true", "yes", 1, [True], {"x": 1}])
def test_is_internal_is_strictly_the_boolean_true(value):
    context = RunContext(is_internal=value)  # a non-boolean that slipped into the context
    assert principal_from_context(context).is_internal is False
    assert Principal(is_internal=value).is_internal is False


def test_attributes_are_copied_on_build_and_on_every_read():
    source = {"clearance": {"level": "low"}}
    context = RunContext(attributes=source)
    principal = principal_from_context(context)
    source["clearance"]["level"] = "high"            # the caller's dict
    context.attributes["clearance"]["level"] = "high"  # the context's own copy
    read = principal.attributes
    assert read == {"clearance": {"level": "low"}}
    read["clearance"]["level"] = "high"              # what a provider was handed
    assert principal.attributes == {"clearance": {"level": "low"}}


@pytest.mark.parametrize("not_a_context", [
    {"user_id": "mallory", "roles": ["admin"], "is_internal": True},  # message kwargs
    {"role": "admin"},                                                 # tool arguments
    None,
])
def test_a_principal_is_built_only_from_a_run_context(not_a_context):
    with pytest.raises(TypeError, match="only from a RunContext"):
        principal_from_context(not_a_context)  # type: ignore[arg-type]


def test_principal_is_immutable_and_survives_copies():
    principal = Principal("alice", ("user",), False, {"a": [1]})
    with pytest.raises(AttributeError):
        principal.roles = ("admin",)  # type: ignore[misc]
    assert copy.deepcopy(principal) == principal
    assert pickle.loads(pickle.dumps(principal)) == principal
    assert "attributes=<1 keys>" in repr(principal)  # values are not printed


def test_action_and_guardrail_request_copy_the_arguments():
    args = {"path": "a.txt", "nested": {"x": 1}}
    action = Action.tool("write_file", args)
    request = GuardrailRequest("write_file", args, Principal())
    args["nested"]["x"] = 2
    assert action.args == {"path": "a.txt", "nested": {"x": 1}}
    assert request.args == {"path": "a.txt", "nested": {"x": 1}}
    assert Action.tool("ls").args is None


# -- evaluation, fail_closed, audit -------------------------------------------------------------


def test_a_raising_provider_is_denied_when_failing_closed_and_allowed_when_open():
    def boom() -> Decision:
        raise RuntimeError("backend down")

    closed = evaluate(boom, fail_closed=True)
    opened = evaluate(boom, fail_closed=False)
    assert (closed.allowed, closed.rule) == (False, "fail_closed")
    assert (opened.allowed, opened.rule) == (True, "fail_open")
    assert closed.error == opened.error == "RuntimeError: backend down"


def test_an_answer_that_is_not_a_decision_is_a_provider_failure():
    decision = evaluate(lambda: True)
    assert decision.allowed is False
    assert "not a Decision" in (decision.error or "")


def test_async_evaluation_matches_sync():
    async def boom() -> Decision:
        raise RuntimeError("x")

    async def allow() -> Decision:
        return Decision.allow("fine", rule="r")

    assert asyncio.run(aevaluate(boom)).allowed is False
    assert asyncio.run(aevaluate(boom, fail_closed=False)).allowed is True
    assert asyncio.run(aevaluate(allow)) == Decision.allow("fine", rule="r")


def test_audit_writes_one_structured_record_without_attributes(caplog):
    principal = Principal("alice", ("user",), False, {"secret": "s3cr3t"})
    with caplog.at_level(logging.INFO, logger="antler.audit.test"):
        record = audit_decision("antler.audit.test", check="authorization", layer="execution",
                                principal=principal, target="bash",
                                decision=Decision.deny("nope", rule="no_match"),
                                provider="RBACProvider", tool_call_id="c1", run_id=None)
    [logged] = [r for r in caplog.records if r.name == "antler.audit.test"]
    assert logged.levelno == logging.WARNING
    assert logged.audit == record  # type: ignore[attr-defined]
    assert json.loads(logged.getMessage()) == record
    assert record["event"] == "authorization.decision"
    assert (record["user_id"], record["roles"], record["target"]) == ("alice", ["user"], "bash")
    assert record["allowed"] is False and record["tool_call_id"] == "c1"
    assert "run_id" not in record and "s3cr3t" not in logged.getMessage()


def test_denied_tool_message_carries_structured_metadata():
    call = {"name": "bash", "args": {}, "id": "c9"}
    denied = denied_tool_message(call, "Error: no", source="authorization",
                                 decision=Decision.deny("x", rule="r"))
    assert (denied.status, denied.tool_call_id, denied.name) == ("error", "c9", "bash")
    assert denied.additional_kwargs[TOOL_META_KEY] == {
        "status": "error", "error_type": "denied", "recoverable_by_model": True,
        "recommended_next_action": "use_another_tool", "source": "authorization", "rule": "r",
        "cause": "policy"}
    failed = denied_tool_message(call, "Error", source="guardrail",
                                 decision=evaluate(lambda: 1 / 0))
    meta = failed.additional_kwargs[TOOL_META_KEY]
    assert meta["recoverable_by_model"] is False and meta["recommended_next_action"] == "stop"


def test_tool_names_for_every_tool_form():
    class Named:
        name = "ls"

    def read_file() -> None: ...

    assert tool_name(Named()) == "ls"
    assert tool_name(read_file) == "read_file"
    assert tool_name({"type": "function", "function": {"name": "bash"}}) == "bash"
    assert tool_name({"name": "x"}) == "x"
    assert tool_name({"type": "web_search"}) == "web_search"
    assert tool_name({}) is None


# -- RBAC -------------------------------------------------------------------------------------


def test_rbac_allows_by_name_or_glob_and_denies_the_rest():
    rbac = RBACProvider(ROLES)
    user = Principal("u", ("user",))
    assert rbac.authorize(user, Action.tool("read_file")).allowed
    assert rbac.authorize(user, Action.tool("web_fetch")).rule == "user:web_*"
    denied = rbac.authorize(user, Action.tool("bash"))
    assert not denied.allowed and "bash" in denied.reason
    assert rbac.authorize(Principal("a", ("admin",)), Action.tool("bash")).allowed
    assert rbac.authorize(Principal("n"), Action.tool("ls")).rule == "no_role"
    assert not rbac.authorize(Principal("x", ("stranger",)), Action.tool("ls")).allowed
    assert not rbac.authorize(Principal("a", ("admin",)), Action("route", "runs:create")).allowed


def test_rbac_roles_combine_and_patterns_are_case_sensitive():
    rbac = RBACProvider(ROLES)
    both = Principal("u", ("auditor", "user"))
    assert rbac.authorize(both, Action.tool("read_file")).allowed
    assert not rbac.authorize(both, Action.tool("READ_FILE")).allowed


def test_rbac_answers_the_same_sync_and_async():
    rbac = RBACProvider(ROLES)
    for principal in (Principal("u", ("user",)), Principal("a", ("admin",)), Principal()):
        for tool in ("bash", "ls", "web_x"):
            action = Action.tool(tool)
            assert asyncio.run(rbac.aauthorize(principal, action)) == \
                rbac.authorize(principal, action)


def test_rbac_rejects_an_unknown_default_role_naming_it_and_the_known_roles():
    with pytest.raises(ProviderConfigError) as info:
        RBACProvider(ROLES, default_role="usr")
    message = str(info.value)
    assert "'usr'" in message and "did you mean 'user'" in message
    assert "'admin', 'auditor', 'user'" in message
    RBACProvider(ROLES, default_role="user")  # a known one is fine


@pytest.mark.parametrize(("roles", "fragment"), [
    (["admin"], "must map role names"),
    ({"user": "read_file"}, "write ['read_file']"),
    ({"user": [""]}, "non-empty strings"),
    ({"": ["ls"]}, "role names must be non-empty"),
])
def test_rbac_rejects_malformed_roles(roles, fragment):
    with pytest.raises(ProviderConfigError, match=fragment.replace("[", r"\[").replace(
            "]", r"\]")):
        RBACProvider(roles)


# -- allowlist guardrail ------------------------------------------------------------------------


def test_allowlist_allows_listed_tools_and_deny_wins():
    guard = AllowlistGuardrail(allow=["read_file", "web_*"], deny=["web_capture"])
    request = lambda name: GuardrailRequest(name, {}, Principal())  # noqa: E731
    assert guard.evaluate(request("read_file")).rule == "allow:read_file"
    assert guard.evaluate(request("web_fetch")).allowed
    assert guard.evaluate(request("web_capture")).rule == "deny:web_capture"
    assert guard.evaluate(request("bash")).rule == "not_listed"
    assert asyncio.run(guard.aevaluate(request("bash"))) == guard.evaluate(request("bash"))


def test_allowlist_needs_an_explicit_list():
    with pytest.raises(ProviderConfigError, match=r"needs guardrails\.provider_options\.allow"):
        AllowlistGuardrail()
    with pytest.raises(ProviderConfigError, match="must be a list"):
        AllowlistGuardrail(allow="read_file")


# -- loading by name --------------------------------------------------------------------------


@pytest.fixture
def providers(site):
    register_providers(site)


def test_shipped_providers_load_by_name(providers):
    rbac = load_authorization_provider("rbac", roles=ROLES)
    assert isinstance(rbac, RBACProvider) and rbac.roles["user"] == ("read_file", "ls", "web_*")
    guard = load_guardrail_provider("allowlist", allow=["ls"])
    assert isinstance(guard, AllowlistGuardrail)
    assert "rbac" in available_authorization_providers()


def test_a_third_party_provider_loads_by_name(providers):
    assert isinstance(load_authorization_provider("clearance"), ClearanceProvider)


def test_an_unknown_name_suggests_the_closest_and_lists_the_rest(providers):
    with pytest.raises(UnknownProviderError) as info:
        load_authorization_provider("rbca")
    message = str(info.value)
    assert "Did you mean 'rbac'?" in message and "'clearance'" in message
    assert AUTHORIZATION_PROVIDER_GROUP in message
    with pytest.raises(UnknownProviderError, match=GUARDRAIL_PROVIDER_GROUP):
        load_guardrail_provider("nope")


def test_resolution_validates_the_default_role(providers):
    with pytest.raises(ProviderConfigError, match="'ghost' is not a role"):
        resolve_authorization_provider("rbac", default_role="ghost", options={"roles": ROLES})
    provider = resolve_authorization_provider("rbac", default_role="user",
                                              options={"roles": ROLES})
    assert isinstance(provider, AuthorizationProvider)


def test_load_failures_name_the_provider_and_the_cause(providers):
    with pytest.raises(ProviderLoadError, match="'not_a_provider' built a NotAProvider"):
        load_authorization_provider("not_a_provider")
    with pytest.raises(ProviderLoadError, match=r"'missing_module'.*failed to load"):
        load_authorization_provider("missing_module")
    with pytest.raises(ProviderLoadError, match=r"options \['colour'\]"):
        load_authorization_provider("rbac", colour="red")
    with pytest.raises(ProviderConfigError):  # the provider's own message, unchanged
        load_guardrail_provider("allowlist")


def test_rbac_and_the_allowlist_take_tool_groups():
    """`file:read` stands for ls, read_file, glob and grep; `file:write` for the two writers."""
    rbac = RBACProvider({"reader": ["file:read"], "editor": ["file:read", "file:write"]})
    reader, editor = Principal("r", ("reader",)), Principal("e", ("editor",))
    for tool in ("ls", "read_file", "glob", "grep"):
        assert rbac.authorize(reader, Action.tool(tool)).allowed
    for tool in ("write_file", "str_replace", "bash"):
        assert not rbac.authorize(reader, Action.tool(tool)).allowed
    assert rbac.authorize(editor, Action.tool("str_replace")).rule == "editor:str_replace"
    assert not rbac.authorize(editor, Action.tool("bash")).allowed

    guard = AllowlistGuardrail(allow=["file:read", "bash"], deny=["grep"])
    decide = {tool: guard.evaluate(GuardrailRequest(tool, {}, Principal())).allowed
              for tool in ("ls", "read_file", "glob", "grep", "bash", "write_file")}
    assert decide == {"ls": True, "read_file": True, "glob": True, "grep": False, "bash": True,
                      "write_file": False}
