"""`models:` — the chat models a config can name, and what a model reference may be."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from antler.chain.modelspec import provider_of
from antler.plugin_api.diagnostics import did_you_mean
from antler.plugin_api.models import ModelSpec

__all__ = ["ENV_REFERENCE", "ModelEntry", "ModelSpec", "ModelsSettings",
           "is_model_reference"]


class ModelEntry(BaseModel):
    """`models.named.<name>:` — one chat model the config can refer to by name."""

    model_config = ConfigDict(extra="forbid")

    use: str = Field(
        description="An init_chat_model spec ('anthropic:claude-sonnet-4-5') or "
        "'module:Class' of a chat model class ('langchain_openai:ChatOpenAI').")
    model: str | None = Field(
        None, description="Model name passed as `model=` (needed with 'module:Class').")
    api_key: str | None = Field(
        None, description="API key; write an environment reference such as "
        "'${OPENAI_API_KEY}' so the secret stays out of the file.")
    base_url: str | None = Field(
        None, description="Endpoint of an OpenAI-compatible gateway or a local server.")
    max_tokens: int | None = Field(None, ge=1, description="Output cap per model call.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature.")
    timeout: float | None = Field(None, gt=0, description="Seconds per request.")
    max_retries: int | None = Field(
        None, ge=0, description="The provider client's own retries (llm_error_handling "
        "retries on top of them).")
    supports_vision: bool = Field(False, description="The model accepts images.")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Further constructor arguments, passed unchanged "
        "(string values may hold environment references).")

    @field_validator("model", "api_key", "base_url", "kwargs")
    @classmethod
    def _references_well_formed(cls, value: Any) -> Any:
        for text in _strings(value):
            broken = _BROKEN_REFERENCE.search(text)
            if broken:
                raise ValueError(
                    f"{broken.group(0)!r} is not an environment reference; write ${{NAME}} or "
                    "$NAME, NAME being letters, digits and '_' (not starting with a digit)")
        return value

    # Alike in shape to config/agent.py's tool `use:` check, but this one takes a
    # 'provider:model' string as well as a 'module:Class' path.
    @field_validator("use")
    @classmethod
    def _use_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; write 'provider:model' or 'module:Class'")
        return value.strip()


class ModelsSettings(BaseModel):
    """`models:` — which chat models the agent uses and what they can do.

    Every model reference (`default`, `title`, `memory`, `subagent`, and the
    `model` keys of plugin sections) is a name under `named` or a model spec.
    """

    model_config = ConfigDict(extra="forbid")

    named: dict[str, ModelEntry] = Field(
        default_factory=dict, description="Models by name, each with its provider settings.")
    default: str = Field(
        "scripted", description="The agent's model: a name under `named`, an init_chat_model "
        "spec such as 'openai:gpt-4o', 'scripted' (the offline model) or "
        "'scripted:path/to/script.yaml'.",
    )
    title: str | None = Field(
        None, description="Model for thread titles (default: `title.model`, else the agent's).")
    memory: str | None = Field(
        None, description="Model that extracts memory facts (default: `memory.model`, else "
        "the agent's).")
    subagent: str | None = Field(None, description="Model for subagents (default: `default`).")
    supports_vision: bool = Field(
        False, description="The default model accepts images (a named model says it with "
        "its own `supports_vision`).")

    @field_validator("default", "title", "memory", "subagent")
    @classmethod
    def _a_name_or_a_spec(cls, reference: str | None, info: ValidationInfo) -> str | None:
        if "named" not in info.data:
            return reference  # `named` failed on its own: said there, not once per reference
        named = info.data["named"] or {}
        if reference is not None and not is_model_reference(reference, named):
            names = ", ".join(sorted(named)) or "none"
            raise ValueError(
                f"{reference!r} is neither a model named under `models.named` (named: "
                f"{names}){did_you_mean(reference, named)} nor a model spec "
                "('provider:model', a known model name such as 'gpt-4o', or 'scripted')")
        return reference


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
ENV_REFERENCE = re.compile(rf"\$(?:\{{(?P<braced>{_NAME})\}}|(?P<bare>{_NAME}))")
"""An environment reference in a model entry's strings, `${NAME}` or `$NAME`, as the
model catalog expands it when it builds the model."""
_BROKEN_REFERENCE = re.compile(rf"\$\{{(?!{_NAME}\}})[^}}\s]{{0,40}}\}}?")
"""A `${` that does not open a `${NAME}` reference (unclosed, empty, or not a name)."""


def _strings(value: Any) -> list[str]:
    """The strings in `value` (a `kwargs` mapping holds them at any depth)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def is_model_reference(reference: str, named: dict[str, Any]) -> bool:
    """A name under `named`, 'scripted...', 'provider:model' or a name whose provider
    LangChain infers."""
    text = reference.strip()
    return (text in named or text == "scripted" or text.startswith("scripted:")
            or ":" in text or provider_of(text) is not None)
