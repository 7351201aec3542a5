"""The settings the provider-backed gates (authorization, guardrails) configure alike.

Each names a provider registered in its entry point group, hands it keyword
arguments, and says what a failing provider means (`antler.plugin_api.evaluate`
applies `fail_closed`). The sections differ in their defaults and examples only.
"""

from __future__ import annotations

from typing import Any

from pydantic import AfterValidator, Field

__all__ = ["fail_closed_field", "provider_name", "provider_options_field"]


def provider_name(example: str) -> AfterValidator:
    """The check of a `provider:` name: stripped, and not blank (the error names `example`)."""
    def named(value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise ValueError(f"is empty; name a provider such as {example!r}")
        return value.strip()

    return AfterValidator(named)


def fail_closed_field() -> Any:
    """The `fail_closed:` setting (a pydantic `Field`)."""
    return Field(
        True,
        description="When the provider fails (raises, or answers nonsense), deny the call "
        "(true) or let it through (false). Either way the failure is audited.",
    )


def provider_options_field(example: str) -> Any:
    """The `provider_options:` setting (a pydantic `Field`); `example`: what the shipped
    provider takes."""
    return Field(default_factory=dict,
                 description=f"Keyword arguments for the provider's constructor; {example}.")
