"""Turn the ``model`` setting of a config into a chat model.

The setting is a string: ``"scripted"`` for the offline :class:`ScriptedChatModel`,
``"scripted:path/to/script.yaml"`` for one that replays a file, or any spec
LangChain's ``init_chat_model`` understands (``"openai:gpt-4o"``,
``"anthropic:claude-sonnet-4-5"``...). Provider failures - a missing integration
package, a missing API key - are reported as :class:`ModelConfigError` naming the
spec and the fix, because the raw provider error rarely says which config
setting caused it.
"""

from __future__ import annotations

from typing import Any

from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel

from antler.errors import AntlerError

from .scripted import ScriptedChatModel

__all__ = ["SCRIPTED_SPEC", "ModelConfigError", "package_for_spec", "resolve_chat_model"]

SCRIPTED_SPEC = "scripted"

# Provider key (the part before ':') -> the pip package holding its integration.
# Keys not listed follow the usual convention: `langchain-<key with - for _>`.
_PROVIDER_PACKAGES = {
    "anthropic_bedrock": "langchain-aws",
    "azure_ai": "langchain-azure-ai",
    "azure_openai": "langchain-openai",
    "bedrock": "langchain-aws",
    "bedrock_converse": "langchain-aws",
    "bedrock_mantle_anthropic": "langchain-aws",
    "bedrock_mantle_openai": "langchain-aws",
    "google_anthropic_vertex": "langchain-google-vertexai",
    "langsmith": "langchain-openai",
    "nvidia": "langchain-nvidia-ai-endpoints",
}

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

# Where the common providers read their API key from.
_API_KEY_VARIABLES = {
    "anthropic": "ANTHROPIC_API_KEY",
    "azure_openai": "AZURE_OPENAI_API_KEY",
    "cohere": "COHERE_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "fireworks": "FIREWORKS_API_KEY",
    "google_genai": "GOOGLE_API_KEY",
    "groq": "GROQ_API_KEY",
    "mistralai": "MISTRAL_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "perplexity": "PPLX_API_KEY",
    "together": "TOGETHER_API_KEY",
    "xai": "XAI_API_KEY",
}


class ModelConfigError(AntlerError, ValueError):
    """The configured chat model cannot be created; the message says which spec and why."""


def _provider_of(spec: str) -> str | None:
    """The provider key a spec names or implies, if it can be told."""
    if ":" in spec:
        return spec.split(":", 1)[0].strip().lower() or None
    lowered = spec.lower()
    for prefixes, provider in _PREFIX_PROVIDERS:
        if lowered.startswith(prefixes):
            return provider
    return None


def package_for_spec(spec: str) -> str | None:
    """The pip package that provides the model named by ``spec``, or ``None`` if unknown."""
    provider = _provider_of(spec)
    if provider is None:
        return None
    return _PROVIDER_PACKAGES.get(provider, "langchain-" + provider.replace("_", "-"))


def resolve_chat_model(spec: str | BaseChatModel | None, *, script: Any = None) -> BaseChatModel:
    """Return the chat model a config asks for.

    * ``None`` or ``"scripted"``: a :class:`ScriptedChatModel` replaying ``script``.
    * ``"scripted:PATH"``: a :class:`ScriptedChatModel` replaying the YAML file at PATH.
    * a :class:`BaseChatModel`: returned unchanged.
    * anything else: ``langchain.chat_models.init_chat_model(spec)``.

    ``script`` only applies to the bare ``"scripted"`` spec; passing it with any
    other spec is a configuration mistake and is refused rather than ignored.

    Raises:
        ModelConfigError: naming the spec, the underlying cause and the fix.
    """
    if isinstance(spec, BaseChatModel):
        _refuse_script(spec.__class__.__name__, script)
        return spec
    if spec is None:
        return ScriptedChatModel(script)
    if not isinstance(spec, str) or not spec.strip():
        raise ModelConfigError(
            f"Model spec {spec!r} is empty or not a string. Use 'scripted' for the offline "
            "model or a 'provider:model' spec such as 'openai:gpt-4o'."
        )
    spec = spec.strip()
    if spec == SCRIPTED_SPEC:
        return ScriptedChatModel(script)
    if spec.startswith(SCRIPTED_SPEC + ":"):
        _refuse_script(spec, script)
        path = spec[len(SCRIPTED_SPEC) + 1 :].strip()
        if not path:
            raise ModelConfigError(
                f"Model spec {spec!r} names no script file; write 'scripted:path/to/script.yaml'."
            )
        try:
            return ScriptedChatModel.from_yaml(path)
        except ValueError as error:
            raise ModelConfigError(f"Model spec {spec!r} failed: {error}") from error
    _refuse_script(spec, script)
    return _init_provider_model(spec)


def _refuse_script(spec: str, script: Any) -> None:
    if script is not None:
        raise ModelConfigError(
            f"A script was given together with model {spec!r}; a script only applies to the "
            f"{SCRIPTED_SPEC!r} model. Drop the script or set the model to {SCRIPTED_SPEC!r}."
        )


def _init_provider_model(spec: str) -> BaseChatModel:
    """Call ``init_chat_model`` and turn any failure into an actionable ModelConfigError."""
    try:
        model = init_chat_model(spec)
    except ImportError as error:
        package = package_for_spec(spec)
        fix = (
            f"Install the provider package: `pip install {package}`."
            if package
            else "Install the LangChain integration package for this provider."
        )
        raise ModelConfigError(
            f"Model spec {spec!r} failed: its provider package is not installed ({error}). {fix}"
        ) from error
    except Exception as error:
        provider = _provider_of(spec)
        if provider is None:
            fix = (
                "Name the provider explicitly as 'provider:model', e.g. 'openai:gpt-4o' or "
                "'anthropic:claude-sonnet-4-5'."
            )
        else:
            variable = _API_KEY_VARIABLES.get(provider)
            key_hint = f"that {variable} is set" if variable else "the provider's credentials"
            fix = (
                f"Check {key_hint} and that the model name is right; the provider package is "
                f"{package_for_spec(spec)}."
            )
        raise ModelConfigError(
            f"Model spec {spec!r} failed: {type(error).__name__}: {error}. {fix}"
        ) from error
    if not isinstance(model, BaseChatModel):
        raise ModelConfigError(
            f"Model spec {spec!r} produced a {type(model).__name__}, not a chat model."
        )
    return model
