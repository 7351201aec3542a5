"""Sorting a failed model call into a reason, and reading the provider's Retry-After.

Provider SDKs disagree on types but agree on shape: an HTTP status
(``status_code``), an error code (``code``, or ``body["error"]["code"/"type"]``),
a message, and the response's headers. langchain-core's taxonomy
(`ModelRateLimitError`, `ModelAuthenticationError`, ...) is used where an
integration raises it; everything else is read by that shape, so the
`openai` and `anthropic` exceptions and plain `TimeoutError`s sort alike.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from langchain_core.exceptions import (
    ModelAuthenticationError,
    ModelError,
    ModelPermissionDeniedError,
    ModelRateLimitError,
)

__all__ = ["REASONS", "RETRIED", "classify", "describe", "retry_after_seconds", "status_of"]

REASONS = ("quota", "auth", "burst", "transient", "busy", "generic")
"""Every reason, in the order `classify` tests them."""

RETRIED = frozenset({"burst", "transient", "busy"})
"""Reasons worth another attempt; quota, auth and generic failures would fail again."""

# -- structured signals: error codes and types a provider states ----------------------------

_QUOTA_CODES = {"insufficient_quota", "billing_hard_limit_reached", "quota_exceeded",
                "insufficient_balance", "payment_required", "billing_error",
                "arrearage", "accountoverdueerror"}
_AUTH_CODES = {"invalid_api_key", "authentication_error", "permission_error",
               "permission_denied", "unauthorized", "forbidden", "invalidapikey",
               "authenticationerror"}
_BURST_CODES = {"limit_burst_rate"}
"""Codes saying the request *rate rose too fast*: the provider wants a slower ramp."""
_BUSY_CODES = {"overloaded_error", "overloaded", "server_busy", "engine_overloaded",
               "engine_overloaded_error", "serveroverloaded", "service_unavailable",
               "model_overloaded"}
_RATE_CODES = {"rate_limit_exceeded", "rate_limit_error", "too_many_requests", "requests",
               "tokens", "throttlingexception", "throttled", "throttling", "limit_requests",
               "resource_exhausted", "ratelimitexceeded"}

# -- the phrase table: what providers write when the status and code say nothing -------------
# Checked in this order after the structured signals (a rate limit that adds "try again
# later" is a rate limit, so it comes before busy). English and Chinese, as the providers
# answer; `tests/plugins/test_llm_error_handling.py` holds a real body for each family.

_PHRASES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern, re.IGNORECASE)) for reason, pattern in (
        ("quota", r"quota|billing|insufficient (?:balance|credit|funds)|credit balance"
                  r"|payment required|spend(?:ing)? limit|余额不足|欠费|额度|充值"),
        ("auth", r"api[ _-]?key|unauthori[sz]ed|authenticat|permission denied|forbidden"
                 r"|invalid (?:token|credentials)|鉴权|认证失败|身份验证"),
        ("burst", r"burst rate|rate increased too quickly|scale requests more smoothly"),
        ("rate", r"rate.?limit|too many requests|throttl|requests per (?:min|sec)"
                 r"|tokens per min|\b[rt]pm\b|请求过于频繁|频率过高|并发数过高|请求过多|限流"),
        ("busy", r"overloaded|server (?:is )?busy|system (?:is )?busy|\bbusy\b|at capacity"
                 r"|over capacity|high demand|heavy (?:load|traffic)|high (?:load|traffic)"
                 r"|currently unavailable|temporarily unavailable|service unavailable"
                 r"|try again later|retry later|繁忙|负载(?:较高|过高|过大|高)|过载"
                 r"|访问量过大|请求量过大|稍后(?:重试|再试)|暂时不可用|服务不可用"),
    )
)
_TRANSIENT_NAMES = re.compile(
    r"timeout|timedout|connection|connect|serviceunavailable|internalserver|"
    r"remoteprotocol|readerror|streamchunk|gateway", re.IGNORECASE)
_TRANSIENT_STATUS = {408, 409, 425, 429}


def status_of(error: BaseException) -> int | None:
    """The HTTP status an error carries, directly or on its response."""
    for holder in (error, getattr(error, "response", None)):
        status = getattr(holder, "status_code", None) or getattr(holder, "status", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _codes(error: BaseException) -> set[str]:
    """Every error code/type the error states, lower-cased."""
    found = [getattr(error, "code", None), getattr(error, "type", None)]
    body = getattr(error, "body", None)
    for part in (body, body.get("error") if isinstance(body, Mapping) else None):
        if isinstance(part, Mapping):
            found += [part.get("code"), part.get("type")]
    return {str(code).lower() for code in found if isinstance(code, (str, int))
            and not isinstance(code, bool)}


def _text(error: BaseException) -> str:
    body = getattr(error, "body", None)
    inner = body.get("error") if isinstance(body, Mapping) else None
    message = inner.get("message") if isinstance(inner, Mapping) else None
    return f"{error} {message or ''}"


def classify(error: BaseException) -> str:
    """The reason a model call failed: one of `REASONS`.

    Structured signals decide first: a stated error code (quota, auth, burst,
    busy, rate limit), then the exception type and HTTP status (402 quota,
    401/403 auth, 529 busy). Then the phrase table, in order quota, auth,
    burst, rate limit, busy (English and Chinese): an exhausted account that
    answers 429 is ``quota``, not retried; an overloaded provider that says so
    in words only is ``busy``. Last, timeouts, dropped connections, a plain
    rate limit (429), 408/409/425 and 5xx answers, and a response with no
    generation (IndexError) are ``transient``. Everything else, invalid
    requests and context overflows included, is ``generic`` and not retried.

    A plain rate limit is ``transient`` (3 attempts from 1 s, Retry-After
    honoured), as DeerFlow sorts it; ``burst`` (2 attempts from 5 s) is kept
    for a provider that says the rate *rose too fast* (``limit_burst_rate``).
    """
    codes, text, status = _codes(error), _text(error), status_of(error)
    for reason, known in (("quota", _QUOTA_CODES), ("auth", _AUTH_CODES),
                          ("burst", _BURST_CODES), ("busy", _BUSY_CODES),
                          ("transient", _RATE_CODES)):
        if codes & known:
            return reason
    if status == 402:
        return "quota"
    if (isinstance(error, (ModelAuthenticationError, ModelPermissionDeniedError))
            or status in (401, 403)):
        return "auth"
    if status == 529:
        return "busy"
    for reason, pattern in _PHRASES:
        if pattern.search(text):
            return "transient" if reason == "rate" else reason
    if isinstance(error, ModelRateLimitError):
        return "transient"
    if isinstance(error, ModelError) and error.is_retryable:
        return "transient"
    if isinstance(error, (TimeoutError, ConnectionError, IndexError)):
        return "transient"
    if any(_TRANSIENT_NAMES.search(cls.__name__) for cls in type(error).__mro__[:-2]):
        return "transient"
    if status is not None and (status in _TRANSIENT_STATUS or 500 <= status < 600):
        return "transient"
    return "generic"


def _header(error: BaseException, name: str) -> str | None:
    for holder in (getattr(error, "response", None), error):
        headers = getattr(holder, "headers", None)
        if headers is None:
            continue
        try:
            value = headers.get(name)
            if value is None and isinstance(headers, Mapping):
                value = next((v for k, v in headers.items() if str(k).lower() == name), None)
        except Exception:  # an unusual headers object: no hint rather than a crash
            continue
        if value is not None:
            return str(value)
    return None


def retry_after_seconds(error: BaseException, now: float | None = None) -> float | None:
    """The wait the provider asked for (``retry-after-ms``, ``retry-after``), or None.

    ``retry-after`` is seconds or an HTTP date; a date in the past means 0.
    """
    millis = _header(error, "retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = _header(error, "retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(when - (time.time() if now is None else now), 0.0)


_MESSAGES = {
    "quota": "The model provider refused the call: the account's quota or billing limit is "
             "used up. Check the plan and billing of the provider account, then try again.",
    "auth": "The model provider rejected the credentials. Check the API key (and its access "
            "to this model) in the environment, then try again.",
    "burst": "The model provider kept refusing the call because the request rate rose too "
             "fast, after {attempts}. Wait a moment and try again, or lower the request rate.",
    "transient": "The model provider kept failing (rate limits, timeouts or server errors) "
                 "after {attempts}. Try again shortly.",
    "unreachable": "The model call failed after {attempts}: {cannot}. Check the network, a "
                   "proxy and the model's `base_url`, then try again.",
    "busy": "The model provider is overloaded and did not answer after {attempts}. Try again "
            "shortly.",
    "generic": "The model call failed and was not retried: {error}",
    "circuit_open": "Calls to the model {model} are paused for {wait:.0f} s after repeated "
                    "failures. Try again after that.",
    "retry_after_too_long": "The model provider asked to wait {wait:.0f} s before retrying, "
                            "longer than the {limit:.0f} s allowed. Try again later.",
}


def describe(reason: str, **facts: Any) -> str:
    """The sentence the user reads for `reason` (facts: attempts, error, model, wait, limit)."""
    attempts = facts.get("attempts", 1)
    facts["attempts"] = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    return _MESSAGES[reason].format(**facts)
