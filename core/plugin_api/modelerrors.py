"""One line for a provider failure: which provider, what went wrong, what to do.

A provider SDK raises its own exception classes (openai's `AuthenticationError`,
anthropic's `RateLimitError`, httpx's `ConnectError`, ...). Sorted by class name
and HTTP status, without importing any SDK, so every provider gets the same
treatment and the command line shows one line instead of a traceback.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

__all__ = ["describe_provider_error", "unreachable"]

# (class-name fragments, HTTP statuses) -> what the operator should do.
_ADVICE: tuple[tuple[tuple[str, ...], tuple[int, ...], str], ...] = (
    (("authentication", "unauthorized", "invalidapikey"), (401,),
     "check the API key (its environment variable or the model's `api_key`)"),
    (("permissiondenied", "forbidden"), (403,),
     "the key has no access to this model or endpoint; check its permissions"),
    (("notfound",), (404,), "check the model name and `base_url`"),
    (("ratelimit", "quota", "resourceexhausted"), (429,),
     "the provider is throttling: wait and retry, lower `llm_error_handling."
     "max_concurrent_calls`, or check the account's quota"),
    (("badrequest", "invalidrequest", "unprocessable"), (400, 422),
     "the provider refused the request; check the model's settings (max_tokens, "
     "temperature) and that the model supports tools"),
    (("timeout",), (408, 504), "the provider did not answer in time; retry or raise `timeout`"),
    (("connect", "network", "remoteprotocol"), (),
     "the provider cannot be reached; check the network, proxy and `base_url`"),
    (("internalserver", "serviceunavailable", "overloaded", "apistatus"), (500, 502, 503, 529),
     "the provider failed on its side; retry later"),
)

_PROVIDER_MODULES = {
    "openai": "openai", "anthropic": "anthropic", "google": "google", "groq": "groq",
    "mistralai": "mistralai", "cohere": "cohere", "httpx": "network", "httpcore": "network",
    "botocore": "bedrock", "ollama": "ollama", "requests": "network",
}


def _status(exc: BaseException) -> int | None:
    for attr in ("status_code", "status", "http_status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the errors it was raised from, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _connect_failure(error: BaseException) -> str | None:
    """Why one error of the chain says the connection was never made, or None."""
    name = type(error).__name__
    if isinstance(error, socket.gaierror):
        return "DNS: the host name does not resolve"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, OSError) and error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return "no route to the host"
    if name.endswith("ConnectTimeout"):
        return "timeout while connecting"
    return None


def unreachable(exc: BaseException) -> str | None:
    """'cannot reach HOST:PORT (connection refused / DNS / timeout ...)' when `exc` is a
    provider call that never connected, else None (the server answered, or failed later).

    Provider SDKs wrap the socket's error (openai's `APIConnectionError` around
    httpx's `ConnectError` around `ConnectionRefusedError`); the host is the
    request's, which the HTTP client's errors carry.
    """
    chain = list(_chain(exc))
    cause = next((why for why in map(_connect_failure, chain) if why is not None), None)
    if cause is None:
        if not any(type(error).__name__ == "ConnectError" for error in chain):
            return None
        innermost = str(chain[-1]).strip() or type(chain[-1]).__name__
        cause = f"connection failed: {innermost}"
    where = None
    for error in chain:
        url = getattr(getattr(error, "request", None), "url", None)
        if url is not None:
            parts = urlsplit(str(url))
            if parts.hostname:
                where = parts.hostname + (f":{parts.port}" if parts.port else "")
                break
    return f"cannot reach {where or 'the provider'} ({cause})"


def describe_provider_error(exc: BaseException) -> str | None:
    """'<provider> <ErrorClass>: <first line>; <what to do>' for an error raised by a
    model provider's SDK or HTTP client, else None."""
    module = type(exc).__module__.split(".")[0]
    provider = _PROVIDER_MODULES.get(module)
    if provider is None:
        if not module.startswith("langchain_"):
            return None
        provider = module.removeprefix("langchain_")
    name = type(exc).__name__
    lowered = name.lower().replace("_", "")
    status = _status(exc)
    advice = "run again with --debug for the traceback"
    for fragments, statuses, what in _ADVICE:
        if any(f in lowered for f in fragments) or (status is not None and status in statuses):
            advice = what
            break
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
    if len(text) > 300:
        text = text[:297] + "..."
    cannot = unreachable(exc)
    if cannot is not None:
        text, advice = cannot, "check the network, a proxy and the model's `base_url`"
    return f"model provider error ({provider} {name}): {text}; {advice}"
