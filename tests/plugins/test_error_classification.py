"""The tool-failure table (`classify_error_text`) against the messages real failures carry.

Each row is a message as an OS call, an HTTP client (httpx, requests), a provider SDK
(openai, anthropic), `subprocess` or an MCP session words it. Where the library is
installed the message is produced by it (a refused socket, `raise_for_status`, the
openai client over a mock transport, a real MCP session that times out); the others are
the libraries' wordings as they print them. Then, through real agents: an exception's
class and text classify together, and tool_progress blocks a tool that keeps timing out.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
import requests
from mcp.shared.memory import create_connected_server_and_client_session

from antler.chain.config import McpServerSettings
from antler.contracts.toolmeta import TOOL_META_KEY, classify_error_text
from antler.runtime.mcp.sessions import McpSessions
from tests.mcp_server import APP
from tests.plugins.guard_support import behaving_tool, call, calls, make_agent, tool_results

# -- messages produced by the libraries themselves ---------------------------------------------


def _raised(thunk: Any) -> BaseException:
    try:
        thunk()
    except BaseException as exc:  # the exception is the value wanted
        return exc
    raise AssertionError("expected the call to raise")


def _httpx_status(code: int) -> BaseException:
    request = httpx.Request("GET", "https://api.example.com/v1/search")
    return _raised(httpx.Response(code, request=request).raise_for_status)


def _requests_status(code: int, reason: str) -> BaseException:
    response = requests.Response()
    response.status_code, response.reason = code, reason
    response.url = "https://api.example.com/v1/search"
    return _raised(response.raise_for_status)


def _openai(status: int | None, body: dict[str, Any] | None = None) -> BaseException:
    def answer(request: httpx2.Request) -> httpx2.Response:
        if status is None:
            raise httpx2.ReadTimeout("timed out", request=request)
        return httpx2.Response(status, json=body or {})

    client = openai.OpenAI(api_key="sk-test", base_url="http://provider.test/v1", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))
    return _raised(lambda: client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]))


def _open(path: str) -> None:
    with open(path):
        pass


def _refused_socket() -> BaseException:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connecting is refused
        with socket.socket() as client:
            return _raised(lambda: client.connect(("127.0.0.1", port)))


def _openai_error(status: int, message: str, code: str, kind: str) -> BaseException:
    return _openai(status, {"error": {"message": message, "type": kind, "param": None,
                                      "code": code}})


PRODUCED: list[tuple[str, Any, str]] = [
    ("socket refused", _refused_socket, "transient"),
    ("missing file", lambda: _raised(lambda: _open("/no/such/dir/a.txt")), "not_found"),
    ("directory as file", lambda: _raised(lambda: _open("/")), "invalid_input"),
    ("subprocess timeout", lambda: _raised(lambda: subprocess.run(
        [sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.01)), "transient"),
    ("subprocess exit status", lambda: _raised(lambda: subprocess.run(
        [sys.executable, "-c", "raise SystemExit(3)"], check=True)), "unknown"),
    ("command not on PATH", lambda: _raised(lambda: subprocess.run(["no-such-command-x1"])),
     "not_found"),
    ("httpx 401", lambda: _httpx_status(401), "auth"),
    ("httpx 404", lambda: _httpx_status(404), "not_found"),
    ("httpx 429", lambda: _httpx_status(429), "rate_limited"),
    ("httpx 500", lambda: _httpx_status(500), "internal"),
    ("httpx 503", lambda: _httpx_status(503), "transient"),
    ("httpx 504", lambda: _httpx_status(504), "transient"),
    ("requests 403", lambda: _requests_status(403, "Forbidden"), "auth"),
    ("requests 404", lambda: _requests_status(404, "Not Found"), "not_found"),
    ("requests 429", lambda: _requests_status(429, "Too Many Requests"), "rate_limited"),
    ("requests 500", lambda: _requests_status(500, "Internal Server Error"), "internal"),
    ("requests 502", lambda: _requests_status(502, "Bad Gateway"), "transient"),
    ("openai timeout", lambda: _openai(None), "transient"),
    ("openai missing key", lambda: _raised(lambda: openai.OpenAI(api_key=None)), "config"),
    ("openai 401", lambda: _openai_error(
        401, "Incorrect API key provided: sk-test. You can find your API key at "
        "https://platform.example/account/api-keys.", "invalid_api_key",
        "invalid_request_error"), "auth"),
    ("openai 429 rate", lambda: _openai_error(
        429, "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): "
        "Limit 30000, Used 29990, Requested 512. Please try again in 1.02s.",
        "rate_limit_exceeded", "tokens"), "rate_limited"),
    ("openai 429 quota", lambda: _openai_error(
        429, "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota", "insufficient_quota"), "rate_limited"),
    ("openai 400", lambda: _openai_error(
        400, "Invalid value for 'temperature': expected a number.", "invalid_value",
        "invalid_request_error"), "invalid_input"),
    ("openai 404 model", lambda: _openai_error(
        404, "The model `gpt-9` does not exist or you do not have access to it.",
        "model_not_found", "invalid_request_error"), "not_found"),
    ("openai 500", lambda: _openai_error(
        500, "The server had an error while processing your request.", "server_error",
        "server_error"), "internal"),
    ("openai 503", lambda: _openai_error(
        503, "The engine is currently overloaded, please try again later.", "overloaded",
        "server_error"), "transient"),
]


@pytest.mark.parametrize(("label", "produce", "expected"), PRODUCED,
                         ids=[row[0] for row in PRODUCED])
def test_a_librarys_own_failure_is_classified(label, produce, expected, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    exc = produce()
    assert classify_error_text(f"{type(exc).__name__}: {exc}")[0] == expected, str(exc)


# -- wordings as the libraries and services print them -----------------------------------------

WORDINGS: list[tuple[str, str]] = [
    # timeouts: the words, not only the class name
    ("McpError: Timed out while waiting for response to CallToolRequest. Waited 5.0 seconds.",
     "transient"),
    ("Error: upstream request timed out", "transient"),
    ("OSError: [Errno 110] Connection timed out", "transient"),
    ("ReadTimeout: HTTPSConnectionPool(host='api.example.com', port=443): Read timed out. "
     "(read timeout=10)", "transient"),
    ("ConnectTimeout: timed out", "transient"),
    ("TimeoutError: MCP server 'tools': tool 'slow' timed out after 30 s "
     "(mcp_servers.tools.call_timeout)", "transient"),
    ("Error: the request hit the gateway time-out", "transient"),
    ("grpc: StatusCode.DEADLINE_EXCEEDED: Deadline Exceeded", "transient"),
    # connections
    ("ConnectionError: HTTPSConnectionPool(host='api.example.com', port=443): Max retries "
     "exceeded with url: /v1/search (Caused by NewConnectionError('<urllib3.connection."
     "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -3] "
     "Temporary failure in name resolution'))", "transient"),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", "transient"),
    ("BrokenPipeError: [Errno 32] Broken pipe", "transient"),
    ("OSError: [Errno 101] Network is unreachable", "transient"),
    ("OSError: [Errno 113] No route to host", "transient"),
    ("RemoteProtocolError: Server disconnected without sending a response.", "transient"),
    ("RemoteDisconnected: Remote end closed connection without response", "transient"),
    ("McpError: Connection closed", "transient"),
    ("APIConnectionError: Connection error.", "transient"),
    ("Error: connect ECONNREFUSED 127.0.0.1:8080", "transient"),
    ("InternalServerError: Error code: 529 - {'type': 'error', 'error': {'type': "
     "'overloaded_error', 'message': 'Overloaded'}}", "transient"),
    ("Error: Service Unavailable", "transient"),
    ("Error: resource temporarily unavailable, try again later", "transient"),
    # auth and configuration: a person must act
    ("AuthenticationError: Error code: 401 - {'error': {'message': 'Incorrect API key "
     "provided', 'code': 'invalid_api_key'}}", "auth"),
    ("Error: authentication failed for user 'bot'", "auth"),
    ("Error: the access token has expired", "auth"),
    ("PermissionDeniedError: Error code: 403 - {'error': {'message': 'Project does not have "
     "access to model'}}", "auth"),
    ("Error: web search is not configured", "config"),
    ("ValueError: Missing Tavily API key", "config"),
    ("OpenAIError: The api_key client option must be set either by passing api_key to the "
     "client or by setting the OPENAI_API_KEY environment variable", "config"),
    ("KeyError: environment variable SERPER_API_KEY is not set", "config"),
    # rate limits
    ("ThrottlingException: Rate exceeded", "rate_limited"),
    ("ResourceExhausted: 429 RESOURCE_EXHAUSTED: Quota exceeded for quota metric", "rate_limited"),
    ("Error: too many requests, slow down", "rate_limited"),
    # permissions, missing things, bad input
    ("PermissionError: [Errno 13] Permission denied: '/etc/shadow'", "permission"),
    ("PermissionError: [Errno 1] Operation not permitted: '/proc/1/mem'", "permission"),
    ("OSError: [Errno 30] Read-only file system: '/mnt/skills/a.md'", "permission"),
    ("Error: EACCES: permission denied, open '/root/x'", "permission"),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'report.csv'", "not_found"),
    ("Error: ENOENT: no such file or directory, open 'a.txt'", "not_found"),
    ("Error executing tool get_issue: issue #12 could not be found", "not_found"),
    ('{"error": "repository does not exist"}', "not_found"),
    ("Error: search returned no results for 'x'", "no_results"),
    ("Error: 0 results", "no_results"),
    ("ValidationError: 1 validation error for search\nquery\n  Field required", "invalid_input"),
    ("TypeError: search() got an unexpected keyword argument 'limit'", "invalid_input"),
    ("IsADirectoryError: [Errno 21] Is a directory: '/mnt/user-data'", "invalid_input"),
    ("UnprocessableEntityError: Error code: 422 - {'detail': 'bad field'}", "invalid_input"),
    # 500 class
    ("Error: 500 Internal Server Error", "internal"),
    ('{"error": {"code": "internal_error", "message": "oops"}}', "internal"),
    # nothing to go on: the model may try something else
    ("CalledProcessError: Command '['make']' returned non-zero exit status 2.", "unknown"),
    ("Error: took 500ms and then the parser choked", "unknown"),
    ("Error: runtime output was empty", "unknown"),
    ("ValueError: the backend is down", "unknown"),
]


@pytest.mark.parametrize(("text", "expected"), WORDINGS, ids=[w[0][:50] for w in WORDINGS])
def test_a_printed_failure_is_classified(text, expected):
    assert classify_error_text(text)[0] == expected


def test_each_class_carries_its_recovery_and_next_action():
    expected = {
        "auth": (False, "stop"), "config": (False, "stop"), "internal": (False, "stop"),
        "rate_limited": (False, "summarize"), "transient": (False, "try_alternative"),
        "permission": (True, "try_alternative"), "not_found": (True, "rewrite_query"),
        "no_results": (True, "rewrite_query"), "invalid_input": (True, "rewrite_query"),
        "unknown": (True, "try_alternative"),
    }
    seen = {}
    for text, error_type in WORDINGS:
        got_type, recoverable, action = classify_error_text(text)
        seen[got_type] = (recoverable, action)
        assert got_type == error_type
    assert seen == expected


# -- through real agents -----------------------------------------------------------------------

STRICT = ("tool_progress: {enabled: true, stagnation_threshold: 2, warn_escalation_count: 1}\n"
          "loop_detection: {enabled: false}\n")
"""tool_progress sooner than by default (2 problems warn, 1 more blocks): fewer slow calls."""


SESSION_TIMEOUT = 0.8
"""Seconds the MCP session waits for any answer: starting it must fit, even on a busy host."""


def _mcp_timing_out() -> McpSessions:
    """The test MCP server's tools over a session whose requests time out."""
    server = McpServerSettings(command="in-memory", call_timeout=30)
    return McpSessions({"tools": server}, connectors={
        "tools": lambda: create_connected_server_and_client_session(
            APP, read_timeout_seconds=timedelta(seconds=SESSION_TIMEOUT))}).start()


@pytest.fixture
def slow_tool() -> Any:
    # The session's read timeout, kept short for the calls under test, bounds its start
    # too: on a busy host a start can miss it (the server is then left out, with a
    # warning), so start again, up to three times.
    for _attempt in range(3):
        sessions = _mcp_timing_out()
        tool = next((t for t in sessions.tools if t.name == "slow"), None)
        if tool is not None:
            break
        sessions.close()
    else:
        pytest.fail(f"the MCP test server did not start within {SESSION_TIMEOUT} s, three times")
    try:
        yield tool
    finally:
        sessions.close()


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_an_mcp_session_timeout_is_transient_and_repeated_timeouts_block_the_tool(
        tmp_path: Path, slow_tool, fuse):
    script = [*[call("slow", seconds=SESSION_TIMEOUT + 1)] * 4, "done"]
    agent, _ = make_agent(tmp_path / "home", script, STRICT, tools=[slow_tool],
                          fuse=fuse)
    with agent:
        results = tool_results(agent.invoke("go", thread_id="t"))
    first = results[0]
    assert "Timed out while waiting for response" in str(first.content)
    assert first.additional_kwargs[TOOL_META_KEY]["error_type"] == "transient"
    assert first.additional_kwargs[TOOL_META_KEY]["recoverable_by_model"] is False
    # 2 timeouts warn, 1 more blocks: the fourth call is refused without running.
    assert [r.additional_kwargs[TOOL_META_KEY]["error_type"] for r in results] == [
        "transient"] * 3 + ["blocked"]
    assert str(results[-1].content).startswith("[TOOL_BLOCKED] Tool 'slow' is blocked")


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_exceptions_and_error_texts_are_stamped_from_the_table(tmp_path: Path, fuse):
    failures: dict[str, Any] = {
        "timed_out": RuntimeError("upstream request timed out"),
        "refused": _refused_socket(),
        "throttled": _requests_status(429, "Too Many Requests"),
        "missing": _raised(lambda: _open("/no/such/dir/a.txt")),
    }

    def fail(kind: str = "") -> str:
        if kind in failures:
            raise failures[kind]
        return "Error: the search backend timed out"

    script = [calls(*[("flaky", {"kind": k}) for k in [*failures, "text"]]), "done"]
    agent, _ = make_agent(tmp_path / "home", script, tools=[behaving_tool("flaky", fail)],
                          fuse=fuse)
    with agent:
        results = tool_results(agent.invoke("go", thread_id="t"))
    assert [r.additional_kwargs[TOOL_META_KEY]["error_type"] for r in results] == [
        "transient", "transient", "rate_limited", "not_found", "transient"]
