"""Providers found by name in an entry point group: the names there, and the error text
for a name that is not one of them.

Authorization, guardrail and sandbox providers are all loaded this way
(`providers`, `sandbox`); each raises its own error class with this text.
"""

from __future__ import annotations

import difflib
from importlib.metadata import entry_points

__all__ = ["registered_names", "unknown_name"]


def registered_names(group: str) -> list[str]:
    """The names registered in entry point group `group`, sorted."""
    return sorted({ep.name for ep in entry_points(group=group)})


def unknown_name(kind: str, name: str, group: str, available: list[str]) -> str:
    """Why `name` is not a `kind` provider: the closest registered name, all of them,
    and where providers register."""
    close = difflib.get_close_matches(name, available, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(repr(n) for n in available) if available else "none"
    return (f"Unknown {kind} provider {name!r}.{hint} Available providers: {listed}. "
            f"Providers register under the entry point group {group!r}.")
