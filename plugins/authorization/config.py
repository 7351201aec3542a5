"""The `authorization:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["AuthorizationConfig"]


class AuthorizationConfig(BaseModel):
    """`authorization:` - which tools each caller may see and call.

    Example::

        authorization:
          enabled: true
          provider: rbac
          default_role: user
          provider_options:
            roles:
              admin: ["*"]
              user: ["file:read", "web_*"]   # ls, read_file, glob, grep
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None, description="Turn authorization on (it is off unless enabled).")
    provider: str = Field(
        "rbac",
        description="Name of the authorization provider, registered in the entry point group "
        "`antler.authorization_providers` (`rbac` ships with Antler).",
    )
    default_role: str | None = Field(
        None,
        description="Role of a caller whose run context names no role. The provider checks "
        "it when the agent is built: an unknown role fails the build. Without it, a run that "
        "names no role is denied every tool (and the audit log says so once per run).",
    )
    fail_closed: bool = Field(
        True,
        description="When the provider fails (raises, or answers nonsense), deny the call "
        "(true) or let it through (false). Either way the failure is audited.",
    )
    provider_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for the provider's constructor; for `rbac`: "
        "`roles: {role: [tool names or globs]}`.",
    )

    @field_validator("provider")
    @classmethod
    def _provider_named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; name a provider such as 'rbac'")
        return value.strip()

    @field_validator("default_role")
    @classmethod
    def _role_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty; leave it out for no fallback role")
        return value
