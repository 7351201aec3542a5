"""The real LangGraph Server (`langgraph dev`) serving Antler from the repository's langgraph.json.

The session's one server (tests/runtime/langgraph_dev.py), on a free loopback port,
with the example auth handler's token table, an operator config of scripted models
and a fresh `ANTLER_HOME`. Over HTTP, with the `langgraph_sdk` client: a two-turn
conversation whose second turn sees the first (the server's checkpoint), whose
identity is the authenticated user's even though the client claims another,
and a second user refused on the first user's thread. `langgraph dev` runs
the graph under blockbuster, so a blocking call on its event loop fails a run.

Locally the tests skip, with the reason, when the server cannot start (the
`dev` extra is not installed); under `CI=true` they fail instead.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from tests.runtime.langgraph_dev import Server


@pytest.fixture(scope="module")
def server(langgraph_server: Server) -> Server:
    """The session's server (tests/runtime/conftest.py)."""
    return langgraph_server


@dataclass
class Conversation:
    thread_id: str
    metadata: dict[str, Any]
    values: dict[str, Any]


@pytest.fixture(scope="module")
def conversation(server) -> Conversation:
    """Carol's two turns on a new thread; the first claims to be mallory, an admin. Carol
    is this module's own user: no other test's thread gives her memories to inject."""
    carol = server.client("tok-carol")
    thread = carol.threads.create()
    for text, context in (("hello there", {"user_id": "mallory", "roles": ["admin"]}),
                          ("second", None)):
        result = carol.runs.wait(thread["thread_id"], "antler", context=context,
                                 input={"messages": [{"role": "user", "content": text}]})
        assert not (isinstance(result, dict) and "__error__" in result), result
    state = carol.threads.get_state(thread["thread_id"])
    return Conversation(thread["thread_id"], carol.threads.get(thread["thread_id"])["metadata"],
                        state["values"])


def test_the_second_turn_sees_the_first_through_the_servers_checkpoint(conversation):
    # dynamic_context's date reminder is the one system message the history holds.
    turns = [(m["type"], m["content"]) for m in conversation.values["messages"]
             if m["type"] != "system"]
    assert turns == [("human", "hello there"), ("ai", ""), ("tool", "written"),
                     ("ai", "first answer"), ("human", "second"), ("ai", "second answer")]
    assert conversation.values["title"] == "Greeting thread"


def test_the_run_is_the_authenticated_users_not_the_one_the_client_claims(server, conversation):
    thread_dir = server.home / "users" / "carol" / "threads" / conversation.thread_id
    assert conversation.values["thread_data"]["outputs_path"] == str(
        thread_dir / "user-data" / "outputs")
    assert (thread_dir / "user-data" / "outputs" / "hello.txt").read_text() == "hello\n"
    assert not (server.home / "users" / "mallory").exists()
    assert conversation.metadata["owner"] == "carol"


def test_a_second_user_is_refused_on_the_first_users_thread(server, conversation):
    import httpx

    bob = server.client("tok-bob")
    # The server answers 404 for a thread the auth filter hides: bob learns nothing.
    with pytest.raises(httpx.HTTPStatusError) as read:
        bob.threads.get_state(conversation.thread_id)
    with pytest.raises(httpx.HTTPStatusError) as run:
        bob.runs.wait(conversation.thread_id, "antler",
                      input={"messages": [{"role": "user", "content": "let me in"}]})
    assert (read.value.response.status_code, run.value.response.status_code) == (404, 404)
    assert conversation.thread_id not in {t["thread_id"] for t in bob.threads.search()}
    carol = server.client("tok-carol")
    values = carol.threads.get_state(conversation.thread_id)["values"]
    assert len(values["messages"]) == len(conversation.values["messages"])


@pytest.mark.parametrize("token", [None, "tok-mallory"])
def test_a_request_without_a_known_token_is_refused(server, token):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{server.url}/threads", data=b"{}", headers=headers,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
