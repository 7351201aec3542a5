"""The `guardrails:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from antler.plugins._lib.providergate import (
    fail_closed_field,
    provider_name,
    provider_options_field,
)

__all__ = ["GuardrailsConfig"]


class GuardrailsConfig(BaseModel):
    """`guardrails:` - an explicitly configured provider evaluates every tool call.

    There is no default provider: enabling guardrails without naming one is a
    config error, so nobody believes a guardrail is active when none is.

    Example::

        guardrails:
          enabled: true
          provider: allowlist
          provider_options:
            allow: ["file:read", "web_*"]   # ls, read_file, glob, grep
            deny: [web_capture]
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None, description="Turn guardrails on (they are off unless enabled).")
    provider: Annotated[str | None, provider_name("allowlist")] = Field(
        None,
        description="Name of the guardrail provider, registered in the entry point group "
        "`antler.guardrail_providers` (`allowlist` ships with Antler). Required when enabled.",
    )
    fail_closed: bool = fail_closed_field()
    provider_options: dict[str, Any] = provider_options_field(
        "for `allowlist`: `allow: [tool names or globs]`, optional `deny: [...]`")

    @model_validator(mode="after")
    def _provider_when_enabled(self) -> GuardrailsConfig:
        if self.enabled and self.provider is None:
            raise ValueError(
                "guardrails are enabled but no `provider` is configured; name one (for "
                "example `provider: allowlist` with `provider_options: {allow: [...]}`) or "
                "set `enabled: false`"
            )
        if self.enabled and self.provider == "allowlist" and "allow" not in self.provider_options:
            raise ValueError(  # else the run would fail to build it, after `config check`
                "the allowlist provider needs `provider_options.allow`: the tool names or "
                "globs that may run (`allow: ['*']` with a `deny` list allows all the others)"
            )
        return self
