"""The `authorization:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from antler.plugins._lib.providergate import (
    fail_closed_field,
    provider_name,
    provider_options_field,
)

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
    provider: Annotated[str, provider_name("rbac")] = Field(
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
    fail_closed: bool = fail_closed_field()
    provider_options: dict[str, Any] = provider_options_field(
        "for `rbac`: `roles: {role: [tool names or globs]}`")

    @field_validator("default_role")
    @classmethod
    def _role_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty; leave it out for no fallback role")
        return value
