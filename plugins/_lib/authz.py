"""Deprecated: these names are on the plugin SDK, `antler.plugin_api`.

Kept until antler 0.2; each name warns (`DeprecationWarning`) with the import to write.
"""

import warnings
from typing import Any

import antler.plugin_api

_MOVED = frozenset([
        "AUTHORIZATION_AUDIT_LOGGER", "AUTHORIZATION_PROVIDER",
        "AUTHORIZATION_PROVIDER_GROUP", "GUARDRAIL_AUDIT_LOGGER", "GUARDRAIL_PROVIDER",
        "GUARDRAIL_PROVIDER_GROUP", "TOOL_META_KEY", "Action", "AuthorizationProvider",
        "AuthzError", "Decision", "GuardrailProvider", "GuardrailRequest", "Principal",
        "ProviderConfigError", "ProviderLoadError", "UnknownProviderError", "aevaluate",
        "audit_decision", "available_authorization_providers",
        "available_guardrail_providers", "denied_tool_message", "evaluate",
        "load_authorization_provider", "load_guardrail_provider",
        "principal_from_context", "resolve_authorization_provider", "tool_name"
])


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} is deprecated and will be removed in antler 0.2: "
                  f"use `from antler.plugin_api import {name}`", DeprecationWarning,
                  stacklevel=2)
    return getattr(antler.plugin_api, name)
