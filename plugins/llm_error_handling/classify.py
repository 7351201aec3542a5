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

_QUOTA_CODES = {"insufficient_quota", "billing_hard_limit_reached", "quota_exceeded",
                "insufficient_balance", "payment_required", "billing_error"}
_QUOTA_TEXT = re.compile(
    r"quota|billing|insufficient (?:balance|credit|funds)|credit balance|payment required|"
    r"spend(?:ing)? limit|余额不足|欠费|额度", re.IGNORECASE)
_AUTH_CODES = {"invalid_api_key", "authentication_error", "permission_error",
               "permission_denied", "unauthorized", "forbidden"}
_AUTH_TEXT = re.compile(
    r"api[ _-]?key|unauthori[sz]ed|authenticat|permission denied|forbidden|"
    r"invalid (?:token|credentials)|鉴权|认证失败", re.IGNORECASE)
_BURST_CODES = {"rate_limit_exceeded", "rate_limit_error", "too_many_requests",
                "requests", "tokens", "throttlingexception", "throttled"}
_BURST_TEXT = re.compile(
    r"rate.?limit|too many requests|throttl|requests per (?:min|sec)|tokens per min|"
    r"\b[rt]pm\b|请求过于频繁|限流", re.IGNORECASE)
_BUSY_CODES = {"overloaded_error", "overloaded", "server_busy", "engine_overloaded"}
_BUSY_TEXT = re.compile(
    r"overloaded|server (?:is )?busy|at capacity|over capacity|currently unavailable|"
    r"try again later|服务繁忙|系统繁忙|繁忙", re.IGNORECASE)
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

    Quota and auth come first: an exhausted account answers 429 like a rate
    limit, and retrying it only spends time. Any other rate limit is ``burst``
    (too many calls right now); an overloaded provider is ``busy``; timeouts,
    dropped connections, 408/409/425 and 5xx answers, and a response with no
    generation (IndexError) are ``transient``. Everything else, invalid
    requests and context overflows included, is ``generic`` and not retried.
    Structured signals (exception type, status, error code) decide before the
    message text does.
    """
    codes, text, status = _codes(error), _text(error), status_of(error)
    if codes & _QUOTA_CODES or status == 402 or _QUOTA_TEXT.search(text):
        return "quota"
    if (isinstance(error, (ModelAuthenticationError, ModelPermissionDeniedError))
            or status in (401, 403) or codes & _AUTH_CODES):
        return "auth"
    if isinstance(error, ModelRateLimitError) or status == 429 or codes & _BURST_CODES:
        return "burst"
    if status == 529 or codes & _BUSY_CODES:
        return "busy"
    for reason, pattern in (("auth", _AUTH_TEXT), ("burst", _BURST_TEXT), ("busy", _BUSY_TEXT)):
        if pattern.search(text):
            return reason
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
    "burst": "The model provider kept rate-limiting the call after {attempts}. Wait a moment "
             "and try again, or lower the request rate.",
    "transient": "The model provider kept failing (timeouts or server errors) after "
                 "{attempts}. Try again shortly.",
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
