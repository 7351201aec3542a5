"""llm_error_handling: provider errors sorted, retried or turned into an error reply."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from email.utils import formatdate
from typing import Any

import httpx
import openai
import pytest
from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.exceptions import (
    ContextOverflowError,
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelInvalidRequestError,
    ModelPermissionDeniedError,
    ModelRateLimitError,
    ModelTimeoutError,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.errors import GraphInterrupt
from langgraph.runtime import Runtime
from pydantic import ValidationError

from antler.chain.config import parse_config
from antler.contracts.fallback import error_fallback_of
from antler.contracts.runcontext import RunContext
from antler.contracts.stop_reason import stop_reason_of
from antler.errors import ConfigError
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.plugins.llm_error_handling import breaker as breaker_module
from antler.plugins.llm_error_handling.breaker import (
    CircuitBreaker,
    ConcurrencyLimiter,
    process_limiter,
)
from antler.plugins.llm_error_handling.classify import classify, retry_after_seconds
from antler.plugins.llm_error_handling.config import LlmErrorHandlingConfig
from antler.plugins.llm_error_handling.middleware import LlmErrorHandlingMiddleware
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

from .model_guard_support import MODE_IDS, MODES, QUIET, guarded_agent, run

REQUEST = httpx.Request("POST", "https://api.example.com/v1/chat")


def openai_error(cls: type, status: int, code: str | None, message: str,
                 headers: dict[str, str] | None = None) -> Exception:
    body = {"message": message, "type": code, "code": code}
    response = httpx.Response(status, request=REQUEST, headers=headers or {},
                              json={"error": body})
    return cls(message, response=response, body=body)


def anthropic_error(name: str, status: int, kind: str, message: str,
                    headers: dict[str, str] | None = None) -> Exception:
    """The `anthropic` SDK's exception class `name`, as the SDK raises it.

    The SDK is imported here, when a test needs it: importing it costs two CPU-seconds,
    which every parallel worker would otherwise spend collecting this module."""
    import anthropic

    body = {"type": "error", "error": {"type": kind, "message": message}}
    response = httpx.Response(status, request=REQUEST, headers=headers or {}, json=body)
    return getattr(anthropic, name)(message, response=response, body=body)


ON_THE_ANTHROPIC_WORKER = pytest.mark.xdist_group("anthropic-sdk")
"""The tests that import the SDK run on one worker, which alone imports it."""


class AnthropicError:
    """An `anthropic_error(...)` made when the test runs, named by its class."""

    def __init__(self, name: str, status: int, kind: str, message: str) -> None:
        self.name, self.args = name, (name, status, kind, message)

    def __call__(self) -> Exception:
        return anthropic_error(*self.args)


BURST_MESSAGE = ("Request rate increased too quickly. To ensure system stability, please "
                 "adjust your client logic to scale requests more smoothly over time.")
BURST = openai_error(openai.RateLimitError, 429, "limit_burst_rate", BURST_MESSAGE)
"""A provider's burst-rate refusal (an OpenAI-compatible endpoint's `limit_burst_rate`)."""


# -- classification ------------------------------------------------------------------------


@pytest.mark.parametrize("error, reason", [
    (openai_error(openai.RateLimitError, 429, "rate_limit_exceeded",
                  "Rate limit reached for gpt-4o on requests per min (RPM)"), "transient"),
    (openai_error(openai.RateLimitError, 429, "insufficient_quota",
                  "You exceeded your current quota"), "quota"),
    (openai_error(openai.AuthenticationError, 401, "invalid_api_key",
                  "Incorrect API key provided"), "auth"),
    (openai_error(openai.PermissionDeniedError, 403, None, "Not allowed"), "auth"),
    (openai_error(openai.InternalServerError, 500, None, "Internal error"), "transient"),
    (openai_error(openai.BadRequestError, 400, "context_length_exceeded",
                  "This model's maximum context length is 128000 tokens"), "generic"),
    (openai.APITimeoutError(request=REQUEST), "transient"),
    (openai.APIConnectionError(request=REQUEST), "transient"),
    pytest.param(AnthropicError("RateLimitError", 429, "rate_limit_error",
                                "Number of requests has exceeded your rate limit"),
                 "transient", marks=ON_THE_ANTHROPIC_WORKER),
    pytest.param(AnthropicError("InternalServerError", 529, "overloaded_error", "Overloaded"),
                 "busy", marks=ON_THE_ANTHROPIC_WORKER),
    pytest.param(AnthropicError("AuthenticationError", 401, "authentication_error",
                                "invalid x-api-key"), "auth", marks=ON_THE_ANTHROPIC_WORKER),
    pytest.param(AnthropicError("BadRequestError", 400, "invalid_request_error",
                                "Your credit balance is too low to access the Anthropic API"),
                 "quota", marks=ON_THE_ANTHROPIC_WORKER),
    (ModelRateLimitError("slow down"), "transient"),
    (ModelAuthenticationError("no"), "auth"),
    (ModelPermissionDeniedError("no"), "auth"),
    (ModelTimeoutError("timed out"), "transient"),
    (ModelConnectionError("reset"), "transient"),
    (ModelAPIError("upstream 502"), "transient"),
    (ContextOverflowError("too long"), "generic"),
    (ModelInvalidRequestError("bad schema"), "generic"),
    (TimeoutError(), "transient"),
    (ConnectionResetError(), "transient"),
    (IndexError("list index out of range"), "transient"),  # a response without generations
    (RuntimeError("服务繁忙 请稍后再试"), "busy"),
    (RuntimeError("The server is overloaded"), "busy"),
    (RuntimeError("账户余额不足"), "quota"),
    (RuntimeError("Error code: 503 - upstream connect error"), "generic"),
    (ValueError("unexpected tool schema"), "generic"),
], ids=lambda value: type(value).__name__ if isinstance(value, Exception)
    else getattr(value, "name", value))
def test_errors_are_sorted_by_reason(error, reason):
    if isinstance(error, AnthropicError):
        error = error()
    assert classify(error) == reason


def stream_error(message: str, kind: str | None = "server_error",
                 code: str | None = None) -> Exception:
    """The openai SDK's error for an ``error`` event inside a stream: no HTTP status."""
    return openai.APIError(message, REQUEST, body={"message": message, "type": kind,
                                                   "code": code})


PROVIDER_BODIES = [
    # busy, said in words only (no status, or a status that says something else)
    (stream_error("The model is under high demand. Please retry."), "busy"),
    (stream_error("Service temporarily unavailable"), "busy"),
    (stream_error("当前模型负载较高\uff0c请稍后重试"), "busy"),
    (stream_error("服务器负载过高\uff0c请稍后再试"), "busy"),
    (stream_error("该模型当前访问量过大\uff0c请您稍后再试"), "busy"),
    (stream_error("系统繁忙\uff0c请稍后再试"), "busy"),
    (openai_error(openai.BadRequestError, 400, None,
                  "The model is currently under heavy load, please retry later"), "busy"),
    # busy, by code before status: an overloaded provider answering 429
    (openai_error(openai.RateLimitError, 429, "ServerOverloaded",
                  "The service is currently unable to handle additional requests due to "
                  "server overload."), "busy"),
    (openai_error(openai.InternalServerError, 503, "engine_overloaded_error",
                  "The engine is currently overloaded, please try again later"), "busy"),
    (openai_error(openai.InternalServerError, 503, None,
                  "The model is overloaded. Please try again later."), "busy"),
    # rate limits, English and Chinese: transient; a burst code: burst
    (stream_error("您当前使用该API的并发数过高\uff0c请降低并发", kind=None), "transient"),
    (stream_error("请求过于频繁\uff0c请稍后再试", kind=None), "transient"),
    (openai_error(openai.RateLimitError, 429, "limit_requests",
                  "Requests rate limit exceeded, please try again later."), "transient"),
    (BURST, "burst"),
    # quota and auth are never mistaken for busy
    (stream_error("您的账户已欠费\uff0c请充值后重试", kind=None), "quota"),
    (openai_error(openai.RateLimitError, 429, None,
                  "You exceeded your current quota, please check your plan and billing "
                  "details."), "quota"),
    (openai_error(openai.AuthenticationError, 401, None,
                  "Service temporarily unavailable for this key"), "auth"),
    # an invalid request stays generic
    (openai_error(openai.BadRequestError, 400, "invalid_request_error",
                  "'messages' must contain at least one message"), "generic"),
]


@pytest.mark.parametrize("error, reason", PROVIDER_BODIES,
                         ids=[f"{type(e).__name__}-{r}-{i}"
                              for i, (e, r) in enumerate(PROVIDER_BODIES)])
def test_provider_bodies_are_sorted_by_code_then_by_phrase(error, reason):
    assert classify(error) == reason


@pytest.mark.parametrize("fuse, use_async", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("message", ["The model is under high demand.",
                                     "Service temporarily unavailable",
                                     "当前服务负载较高\uff0c请稍后重试"])
def test_a_busy_provider_is_retried_whatever_its_wording(tmp_path, registry, fuse, use_async,
                                                          message):
    sleeps: list[float] = []
    agent, model = guarded_agent(tmp_path, registry, [
        {"error": {"kind": "generic", "message": message}}, "Hello!"],
        fuse=fuse, sleeps=sleeps)
    with agent:
        state = run(agent, "hi", use_async=use_async)
    assert state["messages"][-1].content == "Hello!"
    assert model.position == 2 and len(sleeps) == 1
    assert stop_reason_of(state) is None


def test_a_bare_status_code_is_enough():
    class ProviderError(Exception):
        def __init__(self, status_code: int) -> None:
            super().__init__("failed")
            self.status_code = status_code

    assert [classify(ProviderError(s)) for s in (408, 409, 425, 429, 500, 503, 529, 401, 402,
                                                  400, 404)] == [
        "transient", "transient", "transient", "transient", "transient", "transient", "busy",
        "auth", "quota", "generic", "generic"]


def test_retry_after_in_seconds_milliseconds_and_http_dates():
    def with_headers(headers: dict[str, str]) -> Exception:
        return openai_error(openai.RateLimitError, 429, None, "slow down", headers)

    assert retry_after_seconds(with_headers({"retry-after": "7"})) == 7
    assert retry_after_seconds(with_headers({"Retry-After": "0.5"})) == 0.5
    assert retry_after_seconds(with_headers({"retry-after-ms": "1500",
                                             "retry-after": "9"})) == 1.5
    now = time.time()
    assert retry_after_seconds(with_headers({"retry-after": formatdate(now + 30)}),
                               now=now) == pytest.approx(30, abs=1)
    assert retry_after_seconds(with_headers({"retry-after": formatdate(now - 30)}),
                               now=now) == 0
    assert retry_after_seconds(with_headers({"retry-after": "soon"})) is None
    assert retry_after_seconds(with_headers({})) is None
    assert retry_after_seconds(RuntimeError("x")) is None


# -- config --------------------------------------------------------------------------------


def test_config_defaults_and_refusals():
    config = LlmErrorHandlingConfig()
    assert (config.retry_max_attempts, config.retry_base_delay_ms, config.retry_cap_delay_ms,
            config.burst_retry_max_attempts, config.burst_retry_base_delay_ms,
            config.max_concurrent_calls) == (3, 1000, 8000, 2, 5000, 0)
    assert (config.circuit_breaker.failure_threshold,
            config.circuit_breaker.recovery_timeout_sec) == (5, 60)
    with pytest.raises(ValidationError, match="retry_cap_delay_ms"):
        LlmErrorHandlingConfig(retry_base_delay_ms=9000, retry_cap_delay_ms=1000)
    with pytest.raises(ValidationError):
        LlmErrorHandlingConfig(retry_max_attempts=0)


def test_the_section_is_validated_and_cannot_disable_the_plugin(registry):
    config = parse_config("llm_error_handling: {retry_max_attempts: 5, circuit_breaker: "
                          "{failure_threshold: 2}}", registry)
    section = config.section("llm_error_handling")
    assert section.retry_max_attempts == 5 and section.circuit_breaker.failure_threshold == 2
    with pytest.raises(ConfigError, match="retry_max_atempts"):
        parse_config("llm_error_handling: {retry_max_atempts: 5}", registry)
    with pytest.raises(ConfigError, match="cannot be disabled"):
        parse_config("llm_error_handling: {enabled: false}", registry)


# -- the hook on its own -------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(events: list[Any] | None = None, model_name: str = "m1") -> ModelRequest:
    runtime = Runtime(context=RunContext(thread_id="t", run_id="r1"),
                      stream_writer=(events if events is not None else []).append)
    return ModelRequest(model=ScriptedChatModel([], model_name=model_name),
                        messages=[HumanMessage("hi")], runtime=runtime, state={"messages": []})


def failing(*outcomes: Any) -> tuple[Any, list[int]]:
    """A handler raising each exception in turn, then returning the first non-exception."""
    calls: list[int] = []

    def handler(_request: ModelRequest) -> Any:
        calls.append(1)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return ModelResponse([AIMessage(outcome)])

    return handler, calls


def reply_of(result: Any) -> AIMessage:
    if isinstance(result, ExtendedModelResponse):
        return result.model_response.result[0]
    return result.result[0]


def test_backoff_is_jittered_between_base_and_three_times_the_previous_wait():
    sleeps: list[float] = []
    middleware = LlmErrorHandlingMiddleware(
        LlmErrorHandlingConfig(retry_max_attempts=6, circuit_breaker={"failure_threshold": 9}),
        sleep=sleeps.append, rng=random.Random(7))
    handler, calls = failing(*[ModelTimeoutError("slow")] * 5, "ok")
    assert reply_of(middleware.wrap_model_call(request(), handler)).content == "ok"
    assert len(calls) == 6 and len(sleeps) == 5
    previous = 1.0
    for wait in sleeps:
        assert 1.0 <= wait <= min(8.0, max(1.0, 3 * previous))
        previous = wait
    assert len(set(sleeps)) == 5  # jittered, not a fixed schedule


def test_the_first_burst_retry_is_jittered_too():
    waits = set()
    for seed in range(5):
        sleeps: list[float] = []
        middleware = LlmErrorHandlingMiddleware(sleep=sleeps.append, rng=random.Random(seed))
        handler, _ = failing(BURST, "ok")
        middleware.wrap_model_call(request(), handler)
        [wait] = sleeps
        assert 5.0 <= wait <= 8.0
        waits.add(wait)
    assert len(waits) == 5


def test_each_retry_is_announced_on_the_custom_stream():
    events: list[Any] = []
    middleware = LlmErrorHandlingMiddleware(sleep=lambda s: None)
    handler, _ = failing(openai_error(openai.RateLimitError, 429, "rate_limit_exceeded",
                                      "Rate limit reached", {"retry-after": "2"}), "ok")
    middleware.wrap_model_call(request(events), handler)
    [event] = events
    assert event["event"] == "llm_retry"
    assert (event["attempt"], event["max_attempts"], event["wait_ms"], event["reason"]) == (
        1, 3, 2000, "transient")
    assert "RateLimitError" in event["message"] and "HTTP 429" in event["message"]


def test_a_retry_after_beyond_the_limit_gives_up_at_once():
    sleeps: list[float] = []
    middleware = LlmErrorHandlingMiddleware(sleep=sleeps.append)
    handler, calls = failing(openai_error(openai.RateLimitError, 429, None, "slow down",
                                          {"retry-after": "3600"}), "ok")
    reply = reply_of(middleware.wrap_model_call(request(), handler))
    assert calls == [1] and sleeps == []
    assert "asked to wait 3600 s" in reply.content
    assert error_fallback_of(reply)["error_type"] == "transient"


def test_interrupts_propagate_and_give_back_a_half_open_trial():
    clock = Clock()
    middleware = LlmErrorHandlingMiddleware(
        LlmErrorHandlingConfig(retry_max_attempts=1,
                               circuit_breaker={"failure_threshold": 1,
                                                "recovery_timeout_sec": 10}),
        sleep=lambda s: None, clock=clock)
    handler, _ = failing(ModelTimeoutError("slow"))
    middleware.wrap_model_call(request(), handler)  # opens the circuit
    clock.now += 11
    interrupted, calls = failing(GraphInterrupt(()))
    with pytest.raises(GraphInterrupt):
        middleware.wrap_model_call(request(), interrupted)
    assert calls == [1]
    ok, calls = failing("fine")  # the trial permit was given back: this call is the trial
    assert reply_of(middleware.wrap_model_call(request(), ok)).content == "fine"
    assert middleware.breaker("m1").state == "closed"


def test_the_circuit_opens_refuses_then_lets_one_trial_through():
    clock = Clock()
    sleeps: list[float] = []
    middleware = LlmErrorHandlingMiddleware(
        LlmErrorHandlingConfig(retry_max_attempts=2,
                               circuit_breaker={"failure_threshold": 3,
                                                "recovery_timeout_sec": 30}),
        sleep=sleeps.append, clock=clock)
    handler, calls = failing(ModelAPIError("502"))
    middleware.wrap_model_call(request(), handler)      # failures 1 and 2
    reply = reply_of(middleware.wrap_model_call(request(), handler))  # 3: opens, no retry
    assert len(calls) == 3 and middleware.breaker("m1").state == "open"
    assert len(sleeps) == 1  # no wait before giving up on an open circuit
    assert error_fallback_of(reply)["error_type"] == "transient"

    refused = middleware.wrap_model_call(request(), handler)
    assert len(calls) == 3  # the provider was not called
    text = reply_of(refused).content
    assert "paused for 30 s" in text and "m1" in text
    assert error_fallback_of(reply_of(refused))["error_type"] == "circuit_open"
    other, _ = failing("other model answers")
    assert reply_of(middleware.wrap_model_call(request(model_name="m2"), other)).content == (
        "other model answers")  # one breaker per model

    clock.now += 31
    reply = reply_of(middleware.wrap_model_call(request(), handler))  # the trial fails
    assert len(calls) == 4 and middleware.breaker("m1").state == "open"
    clock.now += 31
    ok, _ = failing("back")
    assert reply_of(middleware.wrap_model_call(request(), ok)).content == "back"
    assert middleware.breaker("m1").state == "closed"


def test_a_success_resets_the_count_and_a_clean_breaker_stays_closed():
    breaker = CircuitBreaker(failure_threshold=3, recovery_timeout=5, clock=Clock())
    breaker.success()                                # nothing to reset
    assert (breaker.state, breaker.failures) == ("closed", 0) and breaker.allow()
    breaker.failure()
    breaker.failure()
    breaker.success()                                # the count starts over
    breaker.failure()
    breaker.failure()
    assert breaker.state == "closed" and breaker.failures == 2 and breaker.allow()
    breaker.failure()
    assert breaker.state == "open" and not breaker.allow()


def test_non_retried_errors_and_burst_limits_do_not_count_and_free_the_trial():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=5, clock=clock)
    breaker.failure()
    clock.now += 6
    assert breaker.allow() and not breaker.allow()  # one trial at a time
    breaker.release()                                # the trial ended in an auth error
    assert breaker.allow()                           # the next call may try
    middleware = LlmErrorHandlingMiddleware(
        LlmErrorHandlingConfig(circuit_breaker={"failure_threshold": 2}), sleep=lambda s: None)
    for error in (ModelAuthenticationError("no"), BURST, ValueError("bad")):
        handler, _ = failing(error, error)
        middleware.wrap_model_call(request(), handler)
    assert middleware.breaker("m1").state == "closed"
    assert middleware.breaker("m1").failures == 0


@pytest.mark.parametrize("outcomes, attempts", [
    (("fine",), 1),
    ((ModelAPIError("502"), "fine"), 2),
    ((ModelAPIError("502"), ModelAPIError("502"), "fine"), 3),
    ((ModelAPIError("502"),) * 4, 3),
    ((ModelAuthenticationError("no"),), 1),
    ((BURST, BURST, BURST), 2),
])
def test_an_uncapped_call_counts_attempts_and_failures_as_a_capped_one(monkeypatch, outcomes,
                                                                      attempts):
    # Without a cap the first attempt skips the attempt loop's bookkeeping; what it
    # counts (attempts, waits, the breaker's failures, the reply) is the loop's.
    monkeypatch.setattr(breaker_module, "_PROCESS_LIMITER", None)
    seen = []
    for cap in (0, 4):
        sleeps: list[float] = []
        middleware = LlmErrorHandlingMiddleware(
            LlmErrorHandlingConfig(max_concurrent_calls=cap,
                                   circuit_breaker={"failure_threshold": 10}),
            sleep=sleeps.append, rng=random.Random(7))
        assert (middleware.limiter is None) == (cap == 0)
        handler, calls = failing(*outcomes)
        reply = reply_of(middleware.wrap_model_call(request(), handler))
        marker = error_fallback_of(reply)
        seen.append((len(calls), sleeps, middleware.breaker("m1").failures,
                     middleware.breaker("m1").state, reply.content,
                     marker and marker.get("detail")))
    assert seen[0] == seen[1]
    assert seen[0][0] == attempts


def test_the_concurrency_cap_bounds_attempts_across_threads():
    limiter = ConcurrencyLimiter(2)
    active, entered, peak = [0], [0], [0]
    changed = threading.Condition()

    def work() -> None:
        with limiter.hold():
            with changed:
                active[0] += 1
                entered[0] += 1
                peak[0] = max(peak[0], active[0])
                changed.notify_all()
                # Stay until a second call is in too (a loaded machine may start the
                # threads one after another), unless no other is left to come.
                changed.wait_for(lambda: active[0] >= 2 or entered[0] == 6, timeout=10)
            time.sleep(0.01)  # a third call that got past the cap would be seen meanwhile
            with changed:
                active[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 2


def test_a_task_cancelled_while_waiting_for_the_cap_holds_no_permit():
    limiter = ConcurrencyLimiter(1)

    async def scenario() -> bool:
        async with limiter.ahold():
            waiter = asyncio.ensure_future(_enter(limiter))
            await asyncio.sleep(0.02)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        async with limiter.ahold():  # the permit came back: no deadlock
            return True

    assert asyncio.run(asyncio.wait_for(scenario(), timeout=5))


async def _enter(limiter: ConcurrencyLimiter) -> None:
    async with limiter.ahold():
        pass


def test_the_process_cap_is_fixed_by_the_first_agent_asking(monkeypatch, caplog):
    monkeypatch.setattr(breaker_module, "_PROCESS_LIMITER", None)
    assert process_limiter(0) is None
    first = process_limiter(3)
    assert process_limiter(3) is first
    assert process_limiter(5) is first and first.limit == 3
    assert "already caps model calls at 3" in caplog.text
    middleware = LlmErrorHandlingMiddleware(LlmErrorHandlingConfig(max_concurrent_calls=9))
    assert middleware.limiter is first


# -- in a real graph -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry():
    return discover()


@pytest.mark.parametrize("fuse, use_async", MODES, ids=MODE_IDS)
def test_a_rate_limit_is_retried_after_retry_after_and_the_run_answers(
        tmp_path, registry, fuse, use_async):
    sleeps: list[float] = []
    agent, model = guarded_agent(tmp_path, registry, [
        {"error": {"kind": "rate_limit", "retry_after": 1.5}}, "Hello!"],
        fuse=fuse, sleeps=sleeps)
    with agent:
        assert agent.chain.names.index("llm_error_handling") == (
            agent.chain.names.index("dangling_tool_call") + 1)
        state = run(agent, "hi", use_async=use_async)
    assert state["messages"][-1].content == "Hello!"
    assert sleeps == [1.5]
    first, second = model.calls
    assert [m.content for m in first] == [m.content for m in second]  # the same request again
    assert stop_reason_of(state) is None


@pytest.mark.parametrize("fuse, use_async", MODES, ids=MODE_IDS)
def test_giving_up_returns_a_marked_error_reply_and_records_the_stop_reason(
        tmp_path, registry, fuse, use_async):
    sleeps: list[float] = []
    agent, model = guarded_agent(tmp_path, registry, [{"error": "timeout"}] * 3,
                                 fuse=fuse, sleeps=sleeps)
    with agent:
        state = run(agent, "hi", use_async=use_async)
    reply = state["messages"][-1]
    assert isinstance(reply, AIMessage) and not reply.tool_calls
    marker = error_fallback_of(reply)
    assert marker["error_type"] == "transient"
    assert "after 3 attempts" in reply.content and marker["reason"] == reply.content
    assert "ModelTimeoutError" in marker["detail"]
    assert model.position == 3 and len(sleeps) == 2
    stop = stop_reason_of(state)
    assert stop["reason"] == "error_fallback" and stop["detail"] == "transient"


@pytest.mark.parametrize("kind, error_type", [("auth", "auth"), ("quota", "quota"),
                                              ("permission", "auth"),
                                              ("context_overflow", "generic"),
                                              ("generic", "generic")])
def test_auth_quota_and_generic_errors_are_never_retried(tmp_path, registry, kind,
                                                         error_type):
    sleeps: list[float] = []
    agent, model = guarded_agent(tmp_path, registry, [{"error": kind}, "never reached"],
                                 sleeps=sleeps)
    with agent:
        state = agent.invoke("hi", thread_id="t1")
    assert model.position == 1 and sleeps == []
    assert error_fallback_of(state["messages"][-1])["error_type"] == error_type


@pytest.mark.parametrize("fuse, use_async", MODES, ids=MODE_IDS)
def test_a_plain_rate_limit_is_transient_a_burst_limit_gets_two_slower_attempts(
        tmp_path, registry, fuse, use_async):
    """DeerFlow's split: a 429 is transient (3 attempts from 1 s); only the provider's
    `limit_burst_rate` code is a burst (2 attempts from 5 s)."""
    sleeps: list[float] = []
    agent, model = guarded_agent(tmp_path, registry, [{"error": "rate_limit"}] * 3 + ["x"],
                                 fuse=fuse, sleeps=sleeps)
    with agent:
        state = run(agent, "hi", use_async=use_async)
    assert model.position == 3 and len(sleeps) == 2 and all(1 <= s <= 8 for s in sleeps)
    reply = state["messages"][-1]
    assert error_fallback_of(reply)["error_type"] == "transient"
    assert "after 3 attempts" in reply.content

    sleeps.clear()
    burst = {"error": {"kind": "rate_limit", "code": "limit_burst_rate",
                       "message": BURST_MESSAGE}}
    agent, model = guarded_agent(tmp_path, registry, [burst] * 3 + ["x"], fuse=fuse,
                                 sleeps=sleeps)
    with agent:
        state = run(agent, "hi", use_async=use_async)
    assert model.position == 2 and len(sleeps) == 1 and 5 <= sleeps[0] <= 8
    reply = state["messages"][-1]
    assert error_fallback_of(reply)["error_type"] == "burst"
    assert "rate rose too fast, after 2 attempts" in reply.content


@ON_THE_ANTHROPIC_WORKER
def test_real_provider_exceptions_through_the_graph(tmp_path, registry):
    overloaded = anthropic_error("InternalServerError", 529, "overloaded_error", "Overloaded")
    quota = openai_error(openai.RateLimitError, 429, "insufficient_quota", "quota exceeded")
    raised = iter([overloaded, None, quota])

    def turn(messages: list[Any]) -> str:
        error = next(raised)
        if error is not None:
            raise error
        return "recovered"

    sleeps: list[float] = []
    agent, _ = guarded_agent(tmp_path, registry, [turn, turn, turn], sleeps=sleeps)
    with agent:
        assert agent.invoke("one", thread_id="t1")["messages"][-1].content == "recovered"
        state = agent.invoke("two", thread_id="t1")
    assert len(sleeps) == 1
    assert error_fallback_of(state["messages"][-1])["error_type"] == "quota"


def test_the_repaired_request_is_what_is_retried(tmp_path, registry):
    """A dangling tool call in the history is answered in both attempts' requests."""
    agent, model = guarded_agent(tmp_path, registry, [
        {"error": {"kind": "server", "retry_after": 0}}, "done"])
    with agent:
        agent.graph.update_state(agent.run_config("t1"), {"messages": [
            HumanMessage("earlier"),
            AIMessage("", tool_calls=[{"name": "bash", "args": {}, "id": "lost"}])]})
        agent.invoke("go on", thread_id="t1")
    for request_messages in model.calls:
        repaired = [m for m in request_messages if isinstance(m, ToolMessage)]
        assert [m.tool_call_id for m in repaired] == ["lost"]


def test_retry_events_reach_the_custom_stream(tmp_path, registry):
    agent, _ = guarded_agent(tmp_path, registry, [
        {"error": {"kind": "overloaded", "retry_after": 0}}, "ok"])
    with agent:
        events = [payload for mode, payload in agent.graph.stream(
            agent.input("hi"), config=agent.run_config("t1"), context=agent.context("t1"),
            stream_mode=["custom", "updates"])
            if mode == "custom" and payload.get("event") == "llm_retry"]
    assert [(e["event"], e["reason"], e["attempt"]) for e in events] == [
        ("llm_retry", "busy", 1)]


def test_a_failing_subagent_reports_failure_and_its_stop_reason_to_the_lead(tmp_path,
                                                                             registry):
    lead = ScriptedChatModel([
        {"tool_calls": [{"name": "task", "args": {"description": "research",
                                                  "prompt": "find it"}}]},
        "The subagent could not finish.",
    ])
    sub = ScriptedChatModel([{"error": "auth"}])
    with create_agent(parse_config(QUIET, registry), model=lead, subagent_model=sub,
                      checkpointer="memory", base_dir=tmp_path, registry=registry,
                      runtime=RuntimeOptions(subagents_enabled=True)) as agent:
        assert "llm_error_handling" in agent.chain.names
        state = agent.invoke("delegate", thread_id="t1")
    result = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert result.status == "error"
    assert result.additional_kwargs["subagent_status"] == "failed"
    assert result.additional_kwargs["subagent_stop_reason"] == "error_fallback"
    assert "rejected the credentials" in result.content
    assert state["messages"][-1].content == "The subagent could not finish."


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_it_encloses_every_model_wrapper_of_the_request_it_retries(registry, chain):
    """Only the input sanitizer, the history budget and the repair run once per model step."""
    from antler.chain.chainplan import plan_chain
    from antler.plugin_api.context import RuntimeOptions as Options
    from antler.runtime.demo import all_optional_config

    plan = plan_chain(all_optional_config(registry), chain, Options(
        plan_mode=True, supports_vision=True, subagents_enabled=True), registry=registry)
    wrappers = [name for name in plan.order
                if "wrap_model_call" in (registry.specs[name].hooks or ())]
    outer = wrappers[:wrappers.index("llm_error_handling")]
    assert outer == ["input_sanitization", "tool_output_budget", "dangling_tool_call"], wrappers


class StreamChunkTimeoutError(TimeoutError):
    """What a provider client raises when a streamed answer stalls between chunks."""


class StallingModel(ScriptedChatModel):
    """A scripted model whose first `stalls[0]` calls stall mid-stream (a shared counter:
    the agent may call a copy of the model)."""

    stalls: Any  # a list kept as is (a validated `list[int]` would be a copy)

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self._stall()
        return super()._generate(*args, **kwargs)

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        self._stall()
        return await super()._agenerate(*args, **kwargs)

    def _stall(self) -> None:
        if self.stalls[0] > 0:
            self.stalls[0] -= 1
            raise StreamChunkTimeoutError("no chunk for 30 s")


@pytest.mark.parametrize("fuse, use_async", MODES, ids=MODE_IDS)
def test_a_stalled_stream_is_tried_twice_whatever_the_attempt_budget(tmp_path, registry, fuse,
                                                                    use_async):
    sleeps: list[float] = []
    stalls = [2]
    model = StallingModel(["Hello!"], stalls=stalls)
    agent = create_agent(parse_config(QUIET, registry), model=model, checkpointer="memory",
                         base_dir=tmp_path, registry=registry, fuse=fuse,
                         services={"llm_retry_sleep": sleeps.append})
    with agent:
        state = run(agent, "hi", use_async=use_async)
    reply = state["messages"][-1]
    assert error_fallback_of(reply) is not None  # given up after the second stall
    assert len(sleeps) == 1 and stalls == [0]  # two attempts; "Hello!" never asked for
    assert stop_reason_of(state)["reason"] == "error_fallback"


def test_other_timeouts_keep_the_configured_attempts():
    middleware = LlmErrorHandlingMiddleware(sleep=lambda s: None)
    handler, calls = failing(ModelTimeoutError("slow"), ModelTimeoutError("slow"), "ok")
    assert reply_of(middleware.wrap_model_call(request(), handler)).content == "ok"
    assert len(calls) == 3
