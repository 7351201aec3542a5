"""The example LangGraph Server auth handler (`antler.contrib.server_auth`), in process.

`tests/runtime/test_server.py` checks the same handler behind the real server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from langgraph_sdk import Auth

from antler.contrib import server_auth
from antler.contrib.server_auth import TOKENS_ENV, TokenTableError, load_token_table

TABLE = '{"tok-alice": {user: alice, roles: [agent]}, "tok-root": {user: root, roles: [admin]}}'


@dataclass
class User:
    identity: str
    roles: list[str] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


@dataclass
class Ctx:
    user: User
    action: str = "create"
    resource: str = "threads"
    permissions: list[str] = field(default_factory=list)


@pytest.fixture
def handler(monkeypatch):
    """The handler module with the table `TABLE` (as if read from $ANTLER_AUTH_TOKENS)."""
    monkeypatch.setattr(server_auth, "_TABLE", load_token_table(TABLE))
    return server_auth


def status_of(call: Any) -> int:
    with pytest.raises(Auth.exceptions.HTTPException) as caught:
        asyncio.run(call)
    return caught.value.status_code


def test_a_bearer_token_from_the_table_is_its_user_with_roles(handler):
    user = asyncio.run(handler.authenticate("Bearer tok-alice"))
    assert user["identity"] == "alice" and user["roles"] == ["agent"]


@pytest.mark.parametrize("header", [None, "", "tok-alice", "Basic tok-alice", "Bearer ",
                                    "Bearer tok-mallory"])
def test_a_missing_malformed_or_unknown_token_is_401(handler, header):
    assert status_of(handler.authenticate(header)) == 401


def test_without_a_token_table_every_request_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(server_auth, "_TABLE", load_token_table(None))
    with pytest.raises(Auth.exceptions.HTTPException, match=TOKENS_ENV) as caught:
        asyncio.run(server_auth.authenticate("Bearer anything"))
    assert caught.value.status_code == 401


def test_created_threads_carry_their_owner_and_reads_are_filtered_by_it(handler):
    metadata: dict[str, Any] = {"topic": "x"}
    value = {"thread_id": "t", "metadata": metadata}
    assert asyncio.run(handler.own_threads(Ctx(User("alice")), value)) == {"owner": "alice"}
    # In place: the server stores the dict it passed in.
    assert metadata == {"topic": "x", "owner": "alice"}
    read = {"thread_id": "t"}
    assert asyncio.run(handler.own_threads(Ctx(User("bob"), action="read"), read)) == {
        "owner": "bob"}


def test_assistants_are_shared_for_reading_and_changed_only_by_admins(handler):
    assert asyncio.run(handler.shared_assistants(Ctx(User("alice"), action="search"), {}))
    assert status_of(handler.shared_assistants(Ctx(User("alice"), action="update"), {})) == 403
    assert asyncio.run(handler.shared_assistants(
        Ctx(User("root", roles=["admin"]), action="create"), {}))


def test_store_namespaces_are_the_users_own_by_exact_components(handler):
    def allowed(user: str, namespace: Any, action: str = "put") -> bool:
        call = handler.own_namespace(Ctx(User(user), action=action, resource="store"),
                                     {"namespace": namespace})
        try:
            return bool(asyncio.run(call))
        except Auth.exceptions.HTTPException as refused:
            assert refused.status_code == 403 and user in refused.detail
            return False

    assert allowed("alice", ("alice", "notes"))
    assert allowed("alice", ("antler", "memory", "alice"))
    assert allowed("alice", ("antler", "memory", "alice"), action="search")
    assert not allowed("alice", ("bob", "notes"))
    assert not allowed("alice", ())
    assert not allowed("alice", None)
    # A user whose id is a component of Antler's namespaces gains nothing by it.
    for user in ("antler", "memory", "memory_pending"):
        for namespace in [("antler", "memory", "alice"), ("antler", "memory"), ("antler",),
                          ("antler", "memory_pending"), ("antler", user), ("alice",),
                          ("antler", "memory", "alice", user)]:
            assert not allowed(user, namespace), (user, namespace)
            assert not allowed(user, namespace, action="search"), (user, namespace)
        assert allowed(user, ("antler", "memory", user))
    assert allowed("memory", ("memory", "notes"))
    assert not allowed("antler", ("antler", "notes"))


def test_listing_store_namespaces_without_a_prefix_lists_the_users_own(handler):
    value: dict[str, Any] = {"namespace": None}
    assert asyncio.run(handler.own_namespace(
        Ctx(User("alice"), action="list_namespaces", resource="store"), value))
    assert value["namespace"] == ("alice",)
    assert status_of(handler.own_namespace(
        Ctx(User("antler"), action="list_namespaces", resource="store"),
        {"namespace": None})) == 403


def test_what_the_handler_has_no_rule_for_is_refused(handler):
    ctx = Ctx(User("alice"), action="create", resource="something_new")
    assert status_of(handler.refuse_unknown(ctx, {})) == 403


def test_a_token_file_is_read_and_its_mistakes_are_named(tmp_path):
    good = tmp_path / "tokens.yaml"
    good.write_text("s3cret: {user: alice, roles: [agent]}\n", encoding="utf-8")
    table = load_token_table(str(good))
    assert len(table) == 1 and table.lookup("s3cret").user == "alice"
    assert table.lookup("s3cre") is None

    bad = tmp_path / "bad.yaml"
    for text, message in [
        ("s3cret: alice\n", "needs `user: <id>`"),
        ("s3cret: {user: alice, role: [x]}\n", "unknown keys"),
        ("s3cret: {user: alice, roles: agent}\n", "list of names"),
        ("- s3cret\n", "must map tokens"),
        ("s3cret: {user: [\n", "not valid YAML"),
    ]:
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(TokenTableError, match=message) as caught:
            load_token_table(str(bad))
        assert str(bad) in str(caught.value) and "s3cret" not in str(caught.value)
    with pytest.raises(TokenTableError, match="cannot be read"):
        load_token_table(str(tmp_path / "missing.yaml"))
