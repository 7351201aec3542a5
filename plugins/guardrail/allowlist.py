"""The allowlist guardrail: only tools on the list may run.

Registered as ``allowlist`` in ``antler.guardrail_providers``. Options::

    allow: ["file:read", "web_*"]   # required; glob patterns (fnmatch, case-sensitive)
    deny: [web_capture]             # optional; wins over allow

A pattern may name a tool group (``file:read``: ls, read_file, glob, grep;
``file:write``: write_file, str_replace; ``bash``), which stands for its tools
(`antler.contracts.toolgroups`).

A call is denied when its tool matches a ``deny`` pattern, allowed when it
matches an ``allow`` pattern, and denied otherwise. It looks at the tool name
only, never at the arguments or the principal; pure and in-memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any

from antler.plugin_api import (
    Decision,
    GuardrailProvider,
    GuardrailRequest,
    ProviderConfigError,
    expand_tool_groups,
)

__all__ = ["AllowlistGuardrail"]


class AllowlistGuardrail(GuardrailProvider):
    """Allow exactly the tools on the list (minus the ones on ``deny``)."""

    def __init__(self, allow: Sequence[str] | None = None, deny: Sequence[str] = ()) -> None:
        if allow is None:
            raise ProviderConfigError(
                "the allowlist guardrail needs guardrails.provider_options.allow: a list of "
                "the tool names (or globs) that may run"
            )
        self.allow = _patterns(allow, "allow")
        self.deny = _patterns(deny, "deny")

    def evaluate(self, request: GuardrailRequest) -> Decision:
        name = request.tool_name
        for pattern in self.deny:
            if fnmatchcase(name, pattern):
                return Decision.deny(f"tool {name!r} is on the deny list ({pattern!r})",
                                     rule=f"deny:{pattern}")
        for pattern in self.allow:
            if fnmatchcase(name, pattern):
                return Decision.allow(f"tool {name!r} is allowed by {pattern!r}",
                                      rule=f"allow:{pattern}")
        return Decision.deny(f"tool {name!r} is not on the allowlist", rule="not_listed")

    async def aevaluate(self, request: GuardrailRequest) -> Decision:
        return self.evaluate(request)


def _patterns(value: Any, key: str) -> tuple[str, ...]:
    where = f"guardrails.provider_options.{key}"
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ProviderConfigError(f"{where} must be a list of tool names or globs, got "
                                  f"{value!r}")
    bad = [p for p in value if not isinstance(p, str) or not p.strip()]
    if bad:
        raise ProviderConfigError(f"{where}: patterns must be non-empty strings, got {bad!r}")
    return tuple(expand_tool_groups(value))
