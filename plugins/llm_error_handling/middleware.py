"""LLM error handling: a failed model call is retried or becomes an error reply, never a crash.

A provider fails in more ways than one, and each wants its own answer. Every
exception a model call raises is sorted into a reason (`classify`: the error
code, type and HTTP status first, then a table of provider phrases in English
and Chinese): ``quota`` and ``auth`` would fail again, so they are answered at
once; ``transient`` (rate limits, timeouts, dropped connections, 5xx),
``busy`` (overloaded, "under high demand", "负载较高" ... "请稍后重试") and
``burst`` (the provider's ``limit_burst_rate``: the request rate rose too
fast) are retried; anything else is ``generic`` and answered at once. A plain
429 is ``transient`` (3 attempts from 1 s), as DeerFlow sorts it; ``burst``
gets 2 attempts from 5 s and, like the non-retried reasons, does not count
towards the circuit breaker.
When it gives up, the middleware *returns* an assistant message carrying the
error-fallback marker (`antler.contracts.fallback`) with a sentence saying
what went wrong and what to do, so the run ends with that reply instead of a
traceback, `antler run` exits 1 with the reason, and a `task` result built from
it is marked failed. The stop reason ``error_fallback`` (detail: the error
reason) is recorded with the reply. A call that never connected (refused, DNS,
a timeout while connecting) is retried as ``transient`` and its sentence names
the host it could not reach. Interrupts (`GraphBubbleUp`) always pass
through, and so do Antler's own errors (`AntlerError`: a scripted model out of
script, a misconfiguration): they are bugs to fix, not provider failures.

Retries wait for the provider's ``Retry-After`` (or ``retry-after-ms``) when
it sends one, up to `max_retry_after_sec`; otherwise a decorrelated jittered
backoff, uniform between the base delay and three times the previous wait,
capped. A call is attempted at most `retry_max_attempts` times, fewer for
a burst limit (`burst_retry_max_attempts`) and for an exception known to
repeat itself (`EXCEPTION_MAX_ATTEMPTS`: a stream that stalled mid-answer,
``StreamChunkTimeoutError``, is tried twice). Each retry is logged and sent
on the custom stream as an ``llm_retry`` event {attempt, max_attempts,
wait_ms, reason, message}. A circuit breaker per model (`CircuitBreaker`)
stops calling a model after `failure_threshold` consecutive transient or busy
failures, answers at once while it is open, then lets one trial call through.
An optional process-wide cap bounds the calls in flight; it bounds each
attempt, not the waits between.

Hooks: `wrap_model_call` / `awrap_model_call`.

Where it sits: after `dangling_tool_call`, so the repaired request is the one
retried, and outer of every later model wrapper (authorization's tool filter,
todo's reminder, token_budget's warning, ...): a retry runs them again, so what
they inject is in the retried request too. `input_sanitization` stays outside
it, so sanitizing runs once per model step.

Configuration (`llm_error_handling:`): `retry_max_attempts` (3),
`retry_base_delay_ms` (1000), `retry_cap_delay_ms` (8000),
`burst_retry_max_attempts` (2), `burst_retry_base_delay_ms` (5000),
`max_retry_after_sec` (60), `max_concurrent_calls` (0: no cap) and
`circuit_breaker: {failure_threshold: 5, recovery_timeout_sec: 60}`. An
application may provide the service `llm_retry_sleep` (a callable taking
seconds, sync or async) to replace the real sleep, as tests do.

Example::

    llm_error_handling:
      retry_max_attempts: 4
      max_concurrent_calls: 8
      circuit_breaker: {failure_threshold: 3, recovery_timeout_sec: 30}
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command

from antler.plugin_api import (
    AntlerError,
    BuildContext,
    StopReasonState,
    error_fallback_message,
    error_fallback_of,
    record_stop_reason,
    unreachable,
)

from .breaker import CircuitBreaker, process_limiter
from .classify import RETRIED, classify, describe, retry_after_seconds, status_of
from .config import LlmErrorHandlingConfig

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["EXCEPTION_MAX_ATTEMPTS", "RETRY_EVENT", "SLEEP_SERVICE", "LlmErrorHandlingMiddleware",
           "build"]

logger = logging.getLogger(__name__)

RETRY_EVENT = "llm_retry"
"""The custom stream event sent before each retry."""

EXCEPTION_MAX_ATTEMPTS = {"StreamChunkTimeoutError": 2}
"""Most attempts for an exception class (by name, its bases included), below the config's."""

SLEEP_SERVICE = "llm_retry_sleep"
"""Optional service: the callable that waits between attempts (seconds)."""

_DETAIL_CHARS = 500


class LlmErrorHandlingMiddleware(AgentMiddleware[StopReasonState, Any, Any]):
    """Retries failed model calls by reason and turns a final failure into an error reply."""

    state_schema = StopReasonState

    def __init__(self, config: LlmErrorHandlingConfig | None = None, *,
                 sleep: Callable[[float], Any] | None = None, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.config = config or LlmErrorHandlingConfig()
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.clock = clock
        self.limiter = process_limiter(self.config.max_concurrent_calls)
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    def breaker(self, model: str) -> CircuitBreaker:
        """The circuit breaker of the model named `model` (created on first use)."""
        found = self._breakers.get(model)  # a dict lookup needs no lock; a creation does
        if found is not None:
            return found
        with self._lock:
            if model not in self._breakers:
                settings = self.config.circuit_breaker
                self._breakers[model] = CircuitBreaker(
                    settings.failure_threshold, settings.recovery_timeout_sec, self.clock)
            return self._breakers[model]

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> Any:
        """Call the model; retry by reason; return an error reply when giving up."""
        if self.limiter is None:
            # The usual first attempt: no cap to hold, and a closed circuit, which admits
            # it with no other effect (`_Call.refusal`); the attempts are counted only
            # once one fails.
            breaker = self.breaker(_model_name(request.model))
            if breaker.state == "closed":
                try:
                    response = handler(request)
                except (GraphBubbleUp, AntlerError):
                    breaker.release()
                    raise
                except Exception as error:
                    return self._retried(_Call(self, request, attempt=1), error, handler)
                breaker.success()
                return response
        return self._retried(_Call(self, request), None, handler)

    def _retried(self, call: _Call, error: Exception | None,
                 handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> Any:
        """The attempts of `call` (after `error`, when its last attempt failed)."""
        request = call.request
        while True:
            if error is not None:
                outcome = call.failed(error)
                if isinstance(outcome, AIMessage):
                    return _give_up(outcome, request)
                (self.sleep or time.sleep)(outcome)
                error = None
            refusal = call.refusal()
            if refusal is not None:
                return _give_up(refusal, request)
            try:
                with self.limiter.hold() if self.limiter else contextlib.nullcontext():
                    response = handler(request)
            except (GraphBubbleUp, AntlerError):
                call.breaker.release()
                raise
            except Exception as failure:
                error = failure
                continue
            call.breaker.success()
            return response

    # The async twin of `wrap_model_call`, the same loop around `_Call`: it awaits the
    # limiter, the handler and the wait, which one body could not do for both.
    async def awrap_model_call(
            self, request: ModelRequest[Any],
            handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]) -> Any:
        """Async form of `wrap_model_call`."""
        call = _Call(self, request)
        while True:
            refusal = call.refusal()
            if refusal is not None:
                return _give_up(refusal, request)
            try:
                async with self.limiter.ahold() if self.limiter else _no_limit():
                    response = await handler(request)
            except (GraphBubbleUp, AntlerError):
                call.breaker.release()
                raise
            except Exception as error:
                outcome = call.failed(error)
                if isinstance(outcome, AIMessage):
                    return _give_up(outcome, request)
                if self.sleep is None:
                    await asyncio.sleep(outcome)
                else:
                    waited = self.sleep(outcome)
                    if inspect.isawaitable(waited):
                        await waited
                continue
            call.breaker.success()
            return response


@contextlib.asynccontextmanager
async def _no_limit() -> Any:
    yield


def _give_up(reply: AIMessage, request: ModelRequest[Any]) -> ExtendedModelResponse[Any]:
    """The error reply as the model's answer, recording the run's stop reason with it."""
    marker = error_fallback_of(reply) or {}
    update = record_stop_reason("error_fallback", request.runtime, detail=marker.get("error_type"))
    return ExtendedModelResponse(ModelResponse([reply]), Command(update=update))


class _Call:
    """One model call's attempts: what to do after each failure."""

    def __init__(self, middleware: LlmErrorHandlingMiddleware, request: ModelRequest[Any], *,
                 attempt: int = 0) -> None:
        self.middleware = middleware
        self.config = middleware.config
        self.request = request
        self.model = _model_name(request.model)
        self.breaker = middleware.breaker(self.model)
        self.attempt = attempt
        """Attempts made so far (a call that failed on the fast path starts at 1)."""
        self.previous_wait = 0.0

    def refusal(self) -> AIMessage | None:
        """The error reply when the model's circuit is open; else count the attempt."""
        if not self.breaker.allow():
            wait = self.breaker.retry_in()
            text = describe("circuit_open", model=self.model, wait=wait)
            return self.fallback("circuit_open", text, f"circuit open for {self.model}")
        self.attempt += 1
        return None

    def failed(self, error: Exception) -> float | AIMessage:
        """Seconds to wait before the next attempt, or the error reply that ends the call."""
        reason = classify(error)
        if reason in ("transient", "busy"):
            self.breaker.failure()
        else:
            self.breaker.release()  # says nothing about the model's health
        detail = _detail(error)
        if reason not in RETRIED:
            logger.warning("model call failed (%s), not retried: %s", reason, detail)
            return self.fallback(reason, describe(reason, error=detail), detail)
        limit = self.max_attempts(reason, error)
        if self.attempt >= limit or self.breaker.state == "open":
            logger.warning("model call failed (%s) after %d attempts: %s", reason,
                           self.attempt, detail)
            cannot = unreachable(error)
            text = (describe("unreachable", attempts=self.attempt, cannot=cannot)
                    if cannot is not None else describe(reason, attempts=self.attempt))
            return self.fallback(reason, text, detail)
        asked = retry_after_seconds(error)
        if asked is not None and asked > self.config.max_retry_after_sec:
            text = describe("retry_after_too_long", wait=asked,
                            limit=self.config.max_retry_after_sec)
            return self.fallback(reason, text, detail)
        wait = asked if asked is not None else self.backoff(reason)
        logger.warning("model call failed (%s); attempt %d of %d in %.2f s: %s", reason,
                       self.attempt + 1, limit, wait, detail)
        self.emit(reason, limit, wait, detail)
        return wait

    def max_attempts(self, reason: str, error: BaseException | None = None) -> int:
        """The configured attempts, lowered by the reason's and the exception's own limit."""
        limit = self.config.retry_max_attempts
        if reason == "burst":
            limit = min(limit, self.config.burst_retry_max_attempts)
        if error is not None:
            for cls in type(error).__mro__:
                own = EXCEPTION_MAX_ATTEMPTS.get(cls.__name__)
                if own is not None:
                    limit = min(limit, own)
        return limit

    def backoff(self, reason: str) -> float:
        """Decorrelated jitter: uniform in [base, min(cap, max(base, 3 x previous wait))]."""
        base = (self.config.burst_retry_base_delay_ms if reason == "burst"
                else self.config.retry_base_delay_ms) / 1000
        cap = max(self.config.retry_cap_delay_ms / 1000, base)
        high = min(cap, max(base, 3 * (self.previous_wait or base)))
        self.previous_wait = self.middleware.rng.uniform(base, high)
        return self.previous_wait

    def emit(self, reason: str, limit: int, wait: float, detail: str) -> None:
        writer = getattr(getattr(self.request, "runtime", None), "stream_writer", None)
        if not callable(writer):
            return
        event = {"event": RETRY_EVENT, "attempt": self.attempt, "max_attempts": limit,
                 "wait_ms": round(wait * 1000), "reason": reason, "message": detail}
        with contextlib.suppress(Exception):  # no stream consumer: nothing to tell
            writer(event)

    def fallback(self, reason: str, text: str, detail: str) -> AIMessage:
        return error_fallback_message(text, error_type=reason, reason=text,
                                      detail=f"{detail} (model {self.model}, attempts "
                                             f"{self.attempt})")


def _model_name(model: Any) -> str:
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _detail(error: BaseException) -> str:
    status = status_of(error)
    text = f"{type(error).__name__}: {error}"
    if status is not None:
        text += f" (HTTP {status})"
    cannot = unreachable(error)
    if cannot is not None:
        text += f"; {cannot}"
    return text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS - 3] + "..."


def build(ctx: BuildContext) -> LlmErrorHandlingMiddleware:
    """Factory named in the manifest: the `llm_error_handling:` section, and the sleep service."""
    config = ctx.plugin_config(LlmErrorHandlingConfig)
    return LlmErrorHandlingMiddleware(config, sleep=ctx.services.items.get(SLEEP_SERVICE))
