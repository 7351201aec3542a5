"""Telling what a model spec names, without importing LangChain.

The config loader checks model references while `antler chain show` and
`antler config check` stay free of LangChain imports; the model factory
(`antler.runtime.models`) uses the same rules when it builds the model.
"""

from __future__ import annotations

__all__ = ["provider_of"]

# Model-name prefixes that LangChain maps to a provider when the spec has no
# "provider:" part, so the hint still names the right package.
_PREFIX_PROVIDERS = (
    (("gpt-", "o1", "o3", "chatgpt", "text-davinci"), "openai"),
    (("claude",), "anthropic"),
    (("command",), "cohere"),
    (("accounts/fireworks",), "fireworks"),
    (("gemini",), "google_vertexai"),
    (("amazon.", "anthropic.", "meta."), "bedrock"),
    (("mistral", "mixtral"), "mistralai"),
    (("deepseek",), "deepseek"),
    (("grok",), "xai"),
    (("sonar",), "perplexity"),
    (("solar",), "upstage"),
)


def provider_of(spec: str) -> str | None:
    """The provider key a spec names or implies, if it can be told."""
    if ":" in spec:
        return spec.split(":", 1)[0].strip().lower() or None
    lowered = spec.lower()
    for prefixes, provider in _PREFIX_PROVIDERS:
        if lowered.startswith(prefixes):
            return provider
    return None
