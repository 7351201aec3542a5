"""The run context is computed once per run, and never shared between runs it does not fit."""

from __future__ import annotations

import contextvars
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.runnables.config import var_child_runnable_config

from antler.contracts.runcontext import (
    AUTH_USER_KEY,
    RunContext,
    run_context,
    run_id_of,
    run_key_of,
    thread_id_of,
)
from tests.runtime.test_server_identity import bash_result, serve_run, served


def inside(config: dict[str, Any], call: Any) -> Any:
    """`call()` as a hook of a graph run with `config` would make it."""
    def run() -> Any:
        var_child_runnable_config.set(config)
        return call()
    return contextvars.copy_context().run(run)


def test_a_served_runs_context_is_computed_once_and_is_the_authenticated_users():
    runtime = SimpleNamespace(context={"user_id": "mallory", "run_id": "r1"})
    config = {"configurable": {"thread_id": "t9", AUTH_USER_KEY: {"identity": "alice"}}}

    first, second = inside(config, lambda: (run_context(runtime), run_context(runtime)))

    assert first is second
    assert (first.user_id, first.thread_id, first.run_id) == ("alice", "t9", "r1")
    assert inside(config, lambda: run_key_of(runtime)) == ("t9", "r1")


def test_another_user_or_thread_with_the_same_client_context_gets_its_own():
    client = {"user_id": "mallory"}
    runtime = SimpleNamespace(context=client)

    def identity(user: str, thread: str) -> tuple[str, str | None]:
        config = {"configurable": {"thread_id": thread, AUTH_USER_KEY: {"identity": user}}}
        context = inside(config, lambda: run_context(runtime))
        return context.user_id, context.thread_id

    assert identity("alice", "t1") == ("alice", "t1")
    assert identity("bob", "t1") == ("bob", "t1")
    assert identity("alice", "t2") == ("alice", "t2")


def test_a_run_context_outside_the_server_is_the_one_given():
    given = RunContext(thread_id="t1", user_id="carol", run_id="r7")
    runtime = SimpleNamespace(context=given)
    config = {"configurable": {"thread_id": "other"}, "run_id": "langgraph-run"}
    assert inside(config, lambda: run_context(runtime)) is given
    assert inside(config, lambda: (thread_id_of(runtime), run_id_of(runtime))) == ("t1", "r7")
    # Without ids of its own, the config's are used.
    bare = SimpleNamespace(context=None)
    assert inside(config, lambda: run_key_of(bare)) == ("other", "langgraph-run")


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_served_runs_of_two_users_sharing_one_client_context_keep_their_roles(
        tmp_path, fuse):
    client = {"user_id": "mallory", "roles": ["agent"]}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    viewer = serve_run(served(tmp_path / "a", fuse=fuse),
                       {"identity": "alice", "roles": ["viewer"]}, context=client)
    runner = serve_run(served(tmp_path / "b", fuse=fuse),
                       {"identity": "bob", "roles": ["agent"]}, context=client)
    assert bash_result(viewer).status == "error"
    assert bash_result(runner).content.strip() == "ran"
    assert "/users/bob/threads/t1/" in runner["thread_data"]["workspace_path"]


def test_the_context_owns_its_attributes_whatever_their_values():
    """Atomic values are shared with a new dict, anything else is copied deeply: no change
    to the caller's dict, or to anything in it, reaches the context."""
    from antler.contracts.runcontext import RunContext

    flat = {"tenant": "acme", "level": 3, "beta": True, "quota": 1.5, "raw": b"x", "none": None}
    nested = {"tenant": "acme", "groups": ["staff"], "limits": {"daily": 10}}
    flat_context, nested_context = RunContext(attributes=flat), RunContext(attributes=nested)
    flat["tenant"] = "evil"
    flat["admin"] = True
    nested["groups"].append("admin")
    nested["limits"]["daily"] = 10**9
    nested["tenant"] = "evil"
    assert flat_context.attributes == {"tenant": "acme", "level": 3, "beta": True,
                                       "quota": 1.5, "raw": b"x", "none": None}
    assert nested_context.attributes == {"tenant": "acme", "groups": ["staff"],
                                         "limits": {"daily": 10}}
    # A copy made from a context (a delegated task's) owns its dict as well.
    from dataclasses import replace

    child = replace(nested_context, run_id="sub")
    nested_context.attributes["groups"].append("admin")
    assert child.attributes["groups"] == ["staff"]
    assert RunContext(roles=["a", "b"]).roles == ("a", "b")
