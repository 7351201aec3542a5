"""Finding the shared store and the memory facts in a build's services."""

from __future__ import annotations

from typing import Any

from antler.plugin_api import MEMORY_STORE, PATHS, STORE, STORE_OPENER, Services, resolve_base

from .store import DEFAULT_MAX_FACTS, MemoryStore

__all__ = ["memory_store", "shared_store"]


def shared_store(services: dict[str, Any]) -> Any:
    """The build's `store` service; a build without one (a chain built outside
    `create_agent`) gets the default SQLite store under the base directory."""
    store = services.get(STORE)
    if store is None:
        paths = services.get(PATHS)
        open_store = Services(services).get(STORE_OPENER)
        store = open_store("sqlite", paths.base if paths is not None else resolve_base())
        services[STORE] = store
    return store


def memory_store(services: dict[str, Any], *, max_facts: int = DEFAULT_MAX_FACTS) -> Any:
    """The build's `memory_store` service (anything with `facts(user_id)`), created over
    the shared store and registered when absent."""
    memory = services.get(MEMORY_STORE)
    if memory is None:
        memory = MemoryStore(shared_store(services), max_facts=max_facts)
        services[MEMORY_STORE] = memory
    return memory
