"""The namespaces Antler keeps in LangGraph's shared store, and whose items each holds.

Plugins keep what outlives a thread in the store the agent is given (under
LangGraph Server, the server's own store, which clients reach over its store
API too). Every namespace Antler writes starts with `STORE_ROOT`:

- `MEMORY_NAMESPACE` + ``(user_id,)``: one user's memory facts;
- `PENDING_NAMESPACE`: memory updates waiting to be applied, of every user:
  the server's own, nobody's to read.

`owner_of` says whose items a namespace holds, by exact components, so an
auth handler can scope store access: a user may reach a namespace that is
theirs and no other. A namespace outside `STORE_ROOT` belongs to the user its
first component names; one under `STORE_ROOT` to the user at its documented
position, or to no one. A user whose id equals a component Antler uses
(``antler``, ``memory``) gains nothing by it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MEMORY_NAMESPACE", "PENDING_NAMESPACE", "STORE_ROOT", "owner_of"]

STORE_ROOT = "antler"
"""First component of every namespace Antler writes."""
MEMORY_NAMESPACE = (STORE_ROOT, "memory")
"""A user's memory facts live under this prefix followed by the user's id."""
PENDING_NAMESPACE = (STORE_ROOT, "memory_pending")
"""Memory updates of every user waiting for their debounce; the server's alone."""


def owner_of(namespace: Sequence[str] | None) -> str | None:
    """The user whose items `namespace` (or a search under it) holds; None: no user's."""
    parts = tuple(namespace or ())
    if not parts or not all(isinstance(part, str) and part for part in parts):
        return None
    if parts[0] != STORE_ROOT:
        return parts[0]
    user_at = len(MEMORY_NAMESPACE)
    if parts[:user_at] == MEMORY_NAMESPACE and len(parts) > user_at:
        return parts[user_at]
    return None
