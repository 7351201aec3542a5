"""The RBAC authorization provider: roles map to the tools they may use.

Registered as ``rbac`` in ``antler.authorization_providers``. Options::

    roles:
      admin: ["*"]                  # glob patterns (fnmatch, case-sensitive)
      user: ["file:read", "web_*"]  # a tool group: ls, read_file, glob, grep

A principal may use a tool when any of its roles lists a matching pattern. A
pattern may name a tool group (``file:read``, ``file:write``, ``bash``; see
`antler.contracts.toolgroups`), which stands for its tools.
Roles the provider does not know grant nothing. It governs tools only: any
other resource is denied. Pure and in-memory, so sync and async answer alike
without a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from antler.plugin_api import (
    Action,
    AuthorizationProvider,
    Decision,
    Principal,
    ProviderConfigError,
    did_you_mean,
    expand_tool_groups,
)

__all__ = ["RBACProvider"]


class RBACProvider(AuthorizationProvider):
    """Role -> allowed tool names or glob patterns."""

    def __init__(self, roles: Mapping[str, Sequence[str]] | None = None,
                 default_role: str | None = None) -> None:
        self.roles = _checked_roles(roles)
        self.validate_default_role(default_role)

    def validate_default_role(self, role: str | None) -> None:
        if role is None or role in self.roles:
            return
        known = ", ".join(repr(r) for r in sorted(self.roles)) or "none"
        raise ProviderConfigError(
            f"authorization.default_role {role!r} is not a role of the rbac provider"
            f"{did_you_mean(role, self.roles)}; known roles: {known}. Declare it under "
            "authorization.provider_options.roles or choose a known role."
        )

    def compile_principals(self, base: Principal) -> list[Principal]:
        """The base principal, then one per declared role: every role's tools are compiled."""
        return [base, *(Principal(base.user_id, (role,), base.is_internal, base.attributes)
                        for role in sorted(self.roles))]

    def authorize(self, principal: Principal, action: Action) -> Decision:
        if action.resource != "tool":
            return Decision.deny(f"the rbac provider governs tools, not {action.resource!r}",
                                 rule="resource")
        for role in principal.roles:
            for pattern in self.roles.get(role, ()):
                if fnmatchcase(action.target, pattern):
                    return Decision.allow(f"role {role!r} allows {pattern!r}",
                                          rule=f"{role}:{pattern}")
        if not principal.roles:
            return Decision.deny("the caller has no role", rule="no_role")
        return Decision.deny(
            f"no role of the caller ({', '.join(principal.roles)}) allows "
            f"tool {action.target!r}", rule="no_match")

    async def aauthorize(self, principal: Principal, action: Action) -> Decision:
        return self.authorize(principal, action)


def _checked_roles(roles: Any) -> dict[str, tuple[str, ...]]:
    where = "authorization.provider_options.roles"
    if roles is None:
        return {}
    if not isinstance(roles, Mapping):
        raise ProviderConfigError(
            f"{where} must map role names to lists of tool names, got {type(roles).__name__}")
    checked: dict[str, tuple[str, ...]] = {}
    for role, patterns in roles.items():
        if not isinstance(role, str) or not role.strip():
            raise ProviderConfigError(f"{where}: role names must be non-empty strings, "
                                      f"got {role!r}")
        if isinstance(patterns, str) or not isinstance(patterns, Sequence):
            raise ProviderConfigError(
                f"{where}.{role} must be a list of tool names or globs, got {patterns!r} "
                f"(write [{patterns!r}] for one)" if isinstance(patterns, str) else
                f"{where}.{role} must be a list of tool names or globs, got "
                f"{type(patterns).__name__}")
        bad = [p for p in patterns if not isinstance(p, str) or not p.strip()]
        if bad:
            raise ProviderConfigError(f"{where}.{role}: tool patterns must be non-empty "
                                      f"strings, got {bad!r}")
        checked[role] = tuple(expand_tool_groups(patterns))
    return checked
