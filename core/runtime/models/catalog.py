"""The operator's named models: `models.named` entries turned into chat models on demand.

A config names its models once and refers to them by name everywhere a model is
asked for (`models.default`, `models.title`, `title.model`, ...)::

    models:
      default: main
      title: small
      named:
        main:
          use: anthropic:claude-sonnet-4-5
          api_key: ${ANTHROPIC_API_KEY}
          max_tokens: 8192
          supports_vision: true
        small:
          use: langchain_openai:ChatOpenAI
          model: gpt-4o-mini
          base_url: https://gateway.example.com/v1
          api_key: $GATEWAY_KEY

`use` is either an `init_chat_model` spec ('provider:model') or 'module:Class' of a
chat model class, constructed with `model=` and the entry's settings. An entry is
built only when something asks for it, once per catalog. A reference that is not a
name is passed to :func:`resolve_chat_model` unchanged, so plain specs keep working.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel

from antler.chain.config.models import ENV_REFERENCE
from antler.errors import ReflectionError
from antler.plugin_api.context import MODEL_CATALOG
from antler.plugin_api.models import side_call_model
from antler.plugin_api.reflection import resolve_object

from .factory import (
    SCRIPTED_SPEC,
    ModelConfigError,
    check_provider,
    init_provider_model,
    resolve_chat_model,
)

__all__ = [
    "ModelCatalog", "expand_env", "is_class_path", "resolve_reference", "side_call_model",
]

_CLASS_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Z]\w*$")


def is_class_path(use: str) -> bool:
    """Whether `use` names a class ('langchain_openai:ChatOpenAI'), not a provider spec."""
    return bool(_CLASS_PATH.match(use.strip()))


def expand_env(value: str, where: str) -> str:
    """`value` with `$VAR` / `${VAR}` replaced from the environment.

    Raises:
        ModelConfigError: naming `where` and the variable when one is not set.
    """
    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        if name not in os.environ:
            raise ModelConfigError(
                f"{where} refers to ${name}, which is not set in the environment; export "
                f"{name} (or write the value into the config, which is not recommended for "
                "secrets)")
        return os.environ[name]

    return ENV_REFERENCE.sub(replace, value)


class ModelCatalog:
    """Named model entries (`models.named`), built on first use and kept."""

    def __init__(self, entries: Mapping[str, Any] | None = None) -> None:
        self.entries: dict[str, Any] = dict(entries or {})
        self._built: dict[str, BaseChatModel] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def supports_vision(self, reference: str | None) -> bool | None:
        """The entry's `supports_vision`, or None when `reference` is not a name."""
        entry = self.entries.get(reference) if reference else None
        return None if entry is None else bool(getattr(entry, "supports_vision", False))

    def resolve(self, reference: str | BaseChatModel | None, **kwargs: Any) -> BaseChatModel:
        """The chat model `reference` names: a catalog name, a spec, or a model object."""
        if isinstance(reference, str) and reference.strip() in self.entries:
            name = reference.strip()
            if name not in self._built:
                self._built[name] = self._build(name)
            return self._built[name]
        return resolve_chat_model(reference, **kwargs)

    def check(self, reference: str | None) -> None:
        """Fail early, with one clear line, if `reference` cannot be built: a missing
        provider package, API key or environment variable. Builds nothing."""
        if not isinstance(reference, str):
            return
        name = reference.strip()
        entry = self.entries.get(name)
        if entry is None:
            check_provider(name)
            return
        settings = self._settings(name, entry)
        if not is_class_path(entry.use):
            check_provider(entry.use, has_key="api_key" in settings)

    def _settings(self, name: str, entry: Any) -> dict[str, Any]:
        where = f"models.named.{name}"
        settings: dict[str, Any] = {}
        for key in ("model", "api_key", "base_url", "max_tokens", "temperature", "timeout",
                    "max_retries"):
            value = getattr(entry, key, None)
            if value is not None:
                settings[key] = expand_env(value, f"{where}.{key}") if isinstance(value, str) \
                    else value
        for key, value in dict(getattr(entry, "kwargs", {}) or {}).items():
            settings[key] = expand_env(value, f"{where}.kwargs.{key}") \
                if isinstance(value, str) else value
        return settings

    def _build(self, name: str) -> BaseChatModel:
        entry = self.entries[name]
        settings = self._settings(name, entry)
        use = entry.use.strip()
        if use == SCRIPTED_SPEC or use.startswith(SCRIPTED_SPEC + ":"):
            return resolve_chat_model(use)
        if not is_class_path(use):
            return init_provider_model(use, **settings)
        try:
            cls = resolve_object(use, f"models.named.{name}.use")
        except ReflectionError as exc:
            raise ModelConfigError(f"models.named.{name}.use: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, BaseChatModel)):
            raise ModelConfigError(
                f"models.named.{name}.use: {use!r} is not a chat model class (a subclass of "
                "langchain_core's BaseChatModel)")
        try:
            return cls(**settings)
        except Exception as exc:  # the class's own validation: report it as config
            raise ModelConfigError(
                f"models.named.{name}: {use} rejected its settings: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            ) from exc


def resolve_reference(services: Mapping[str, Any], reference: Any) -> BaseChatModel:
    """The chat model `reference` (a model, a catalog name or a spec) stands for, using
    the build's catalog (`services[MODEL_CATALOG]`) when there is one."""
    if isinstance(reference, BaseChatModel):
        return reference
    catalog = services.get(MODEL_CATALOG)
    if isinstance(catalog, ModelCatalog):
        return catalog.resolve(reference)
    return resolve_chat_model(reference)
