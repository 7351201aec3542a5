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

import importlib.util
import os
from typing import Any

from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel

from antler.chain.modelspec import provider_of
from antler.errors import AntlerError

from .scripted import ScriptedChatModel

__all__ = [
    "SCRIPTED_SPEC", "ModelConfigError", "check_provider", "init_provider_model",
    "known_providers", "package_for_spec", "provider_of", "resolve_chat_model",
]

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
    "upstage": "UPSTAGE_API_KEY",
    "xai": "XAI_API_KEY",
}

# Used when LangChain's own provider table cannot be read (see `known_providers`).
_FALLBACK_MODULES = {
    "anthropic": "langchain_anthropic", "azure_openai": "langchain_openai",
    "bedrock": "langchain_aws", "bedrock_converse": "langchain_aws",
    "cohere": "langchain_cohere", "deepseek": "langchain_deepseek",
    "fireworks": "langchain_fireworks", "google_genai": "langchain_google_genai",
    "google_vertexai": "langchain_google_vertexai", "groq": "langchain_groq",
    "huggingface": "langchain_huggingface", "mistralai": "langchain_mistralai",
    "ollama": "langchain_ollama", "openai": "langchain_openai",
    "perplexity": "langchain_perplexity", "together": "langchain_together",
    "xai": "langchain_xai",
}


class ModelConfigError(AntlerError, ValueError):
    """The configured chat model cannot be created; the message says which spec and why."""


def known_providers() -> dict[str, str]:
    """Provider key -> the module holding its chat model, for every provider
    `init_chat_model` knows.

    Read from LangChain's own registry (a private table, so read defensively: a
    LangChain release that renames it falls back to a built-in copy, which a test
    compares with LangChain's).
    """
    from antler.compat import langchain_chat_providers

    try:
        return langchain_chat_providers()
    except Exception:  # pragma: no cover - depends on the installed LangChain
        return dict(_FALLBACK_MODULES)


def check_provider(spec: str, *, has_key: bool = False) -> None:
    """Refuse, with one line naming the fix, a spec whose provider is unknown, whose
    integration package is not installed, or whose API key is not set.

    Nothing is imported or built. Specs without a 'provider:' part whose provider
    cannot be told from the model name are left to `init_chat_model`.
    """
    spec = spec.strip()
    if spec == SCRIPTED_SPEC or spec.startswith(SCRIPTED_SPEC + ":"):
        return
    provider = provider_of(spec)
    if provider is None:
        return
    providers = known_providers()
    if provider not in providers:
        from antler.plugin_api.diagnostics import did_you_mean

        raise ModelConfigError(
            f"model {spec!r}: unknown provider {provider!r}"
            f"{did_you_mean(provider, providers)}; write 'provider:model' with one of: "
            f"{', '.join(sorted(providers))} (or `scripted` for the offline model)")
    module = providers[provider].split(".")[0]
    if importlib.util.find_spec(module) is None:
        package = package_for_spec(spec) or module.replace("_", "-")
        raise ModelConfigError(
            f"model {spec!r}: provider {provider!r} needs the package {package}, which is not "
            f"installed; run `pip install {package}`")
    variable = _API_KEY_VARIABLES.get(provider)
    if variable and not has_key and not os.environ.get(variable):
        raise ModelConfigError(
            f"model {spec!r}: provider {provider!r} needs an API key and {variable} is not "
            f"set; export {variable}, or name the model under `models.named` with "
            f"`api_key: ${{{variable}}}`")


def package_for_spec(spec: str) -> str | None:
    """The pip package that provides the model named by ``spec``, or ``None`` if unknown."""
    provider = provider_of(spec)
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
    return init_provider_model(spec)


def _refuse_script(spec: str, script: Any) -> None:
    if script is not None:
        raise ModelConfigError(
            f"A script was given together with model {spec!r}; a script only applies to the "
            f"{SCRIPTED_SPEC!r} model. Drop the script or set the model to {SCRIPTED_SPEC!r}."
        )


def init_provider_model(spec: str, **settings: Any) -> BaseChatModel:
    """Check the provider (`check_provider`), then call ``init_chat_model(spec,
    **settings)``, turning any failure into an actionable ModelConfigError."""
    check_provider(spec, has_key=settings.get("api_key") is not None)
    try:
        model = init_chat_model(spec, **settings)
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
        provider = provider_of(spec)
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
