"""One line for a provider failure: which provider, what went wrong, what to do.

A provider SDK raises its own exception classes (openai's `AuthenticationError`,
anthropic's `RateLimitError`, httpx's `ConnectError`, ...). Sorted by class name
and HTTP status, without importing any SDK, so every provider gets the same
treatment and the command line shows one line instead of a traceback.
"""

from __future__ import annotations

__all__ = ["describe_provider_error"]

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
    return f"model provider error ({provider} {name}): {text}; {advice}"
