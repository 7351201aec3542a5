"""Every private name Antler takes from its dependencies, in one place.

LangGraph and stevedore keep some of what Antler needs in private modules
(`langgraph._internal`, `stevedore._cache`) or private configurable keys
(`__pregel_durability`). They may move in any release, so nothing else in
Antler imports them: it imports them from here, and `tests/test_compat.py`
fails, naming the name, as soon as an installed version no longer has one.
The dependency pins in pyproject.toml (below the next minor) keep such a
change from reaching users before that test has run against it.

Imports are lazy (functions), so `import antler` stays free of LangGraph.
"""

from __future__ import annotations

import functools
import os
from typing import Any

__all__ = [
    "CONFIG_KEY_DURABILITY",
    "LANGGRAPH_PRIVATE_NAMES",
    "clear_stevedore_path_cache",
    "isolate_stevedore_path_cache",
    "langchain_chat_providers",
    "langgraph_private",
    "runnable_callable",
    "task_state_reader",
]

CONFIG_KEY_DURABILITY = "__pregel_durability"
"""LangGraph's configurable key for a graph's default checkpoint durability
(`langgraph._internal._constants.CONFIG_KEY_DURABILITY`)."""

LANGGRAPH_PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "langgraph._internal._runnable": ("RunnableCallable",),
    "langgraph._internal._constants": (
        "CONFIG_KEY_CHECKPOINT_NS", "CONFIG_KEY_TASK_ID", "CONFIG_KEY_THREAD_ID",
        "CONFIG_KEY_DURABILITY", "CONFIG_KEY_READ"),
    "langgraph._internal._fields": ("get_cached_annotated_keys", "get_update_as_tuples"),
}
"""The private LangGraph names Antler uses, by module (checked by tests/test_compat.py)."""


@functools.cache
def langgraph_private(module: str, name: str) -> Any:
    """`name` from LangGraph's private `module` (one of `LANGGRAPH_PRIVATE_NAMES`)."""
    import importlib

    if name not in LANGGRAPH_PRIVATE_NAMES.get(module, ()):
        raise KeyError(f"{module}.{name} is not a private name antler.compat vouches for; "
                       "add it to LANGGRAPH_PRIVATE_NAMES (and so to its test)")
    return getattr(importlib.import_module(module), name)


def runnable_callable() -> Any:
    """LangGraph's `RunnableCallable` (the class of a graph node's function runnable)."""
    return langgraph_private("langgraph._internal._runnable", "RunnableCallable")


def task_config_keys() -> tuple[str, str, str]:
    """LangGraph's configurable keys of (thread id, checkpoint namespace, task id)."""
    module = "langgraph._internal._constants"
    return (langgraph_private(module, "CONFIG_KEY_THREAD_ID"),
            langgraph_private(module, "CONFIG_KEY_CHECKPOINT_NS"),
            langgraph_private(module, "CONFIG_KEY_TASK_ID"))


def task_state_reader(config: Any) -> Any:
    """The function a running LangGraph task reads channels with, ``read(keys, fresh)``, or
    None outside a task (`CONFIG_KEY_READ` of its configurable)."""
    key = langgraph_private("langgraph._internal._constants", "CONFIG_KEY_READ")
    return (config.get("configurable") or {}).get(key)


def langchain_chat_providers() -> dict[str, str]:
    """Provider key -> module of its chat model, from LangChain's private registry
    behind `init_chat_model` (`langchain.chat_models.base._BUILTIN_PROVIDERS`)."""
    from langchain.chat_models import base

    return {str(key): str(value[0]) for key, value in base._BUILTIN_PROVIDERS.items()}


def update_fields() -> tuple[Any, Any]:
    """LangGraph's (get_cached_annotated_keys, get_update_as_tuples): reading a node's
    dataclass or model return value as channel updates."""
    module = "langgraph._internal._fields"
    return (langgraph_private(module, "get_cached_annotated_keys"),
            langgraph_private(module, "get_update_as_tuples"))


def _stevedore_path_cache() -> Any:
    """stevedore's per-`sys.path` entry point cache object, or None when it has none."""
    try:
        from stevedore import _cache
    except ImportError:  # pragma: no cover - a stevedore without a path cache
        return None
    return getattr(_cache, "_c", None)


def clear_stevedore_path_cache() -> None:
    """Forget stevedore's in-memory entry point cache (new distributions are seen)."""
    cache = _stevedore_path_cache()
    internal = getattr(cache, "_internal", None)
    if isinstance(internal, dict):
        internal.clear()


def isolate_stevedore_path_cache(monkeypatch: Any, cache_dir: str) -> None:
    """Point stevedore's path cache at `cache_dir` and empty it, for one test."""
    cache = _stevedore_path_cache()
    if cache is not None:
        # The cache object read XDG_CACHE_HOME when stevedore was imported.
        monkeypatch.setattr(cache, "_dir", os.path.join(cache_dir, "python-entrypoints"))
        monkeypatch.setattr(cache, "_internal", {})
