"""Every private name Antler takes from its dependencies, in one place.

LangGraph, LangChain and stevedore keep some of what Antler needs in private
modules (`langgraph._internal`, `langgraph.pregel._write`, `stevedore._cache`),
private names of public modules (`langchain.agents.factory`'s composition of
wrap hooks) or private configurable keys (`__pregel_durability`). They may move
in any release, so nothing else in Antler imports them: it imports them from
here, and `tests/test_compat.py` fails, naming the name, as soon as an installed
version no longer has one. The dependency pins in pyproject.toml (below the
next minor) keep such a change from reaching users before that test has run
against it.

Imports are lazy (functions), so `import antler` stays free of LangGraph.
"""

from __future__ import annotations

import functools
import os
from typing import Any

__all__ = [
    "CONFIG_KEY_DURABILITY",
    "LANGCHAIN_PRIVATE_NAMES",
    "LANGGRAPH_PRIVATE_NAMES",
    "branch_spec",
    "channel_writes",
    "clear_stevedore_path_cache",
    "composed_model_response",
    "default_bound",
    "isolate_stevedore_path_cache",
    "langchain_chat_providers",
    "langchain_private",
    "langgraph_private",
    "runnable_callable",
    "task_config_keys",
    "task_state_reader",
    "update_fields",
    "wrap_composers",
    "wrap_trace_kwargs",
]

CONFIG_KEY_DURABILITY = "__pregel_durability"
"""LangGraph's configurable key for a graph's default checkpoint durability
(`langgraph._internal._constants.CONFIG_KEY_DURABILITY`)."""

LANGGRAPH_PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "langgraph._internal._runnable": ("RunnableCallable", "RunnableSeq", "set_config_context"),
    "langgraph._internal._constants": (
        "CONFIG_KEY_CHECKPOINT_NS", "CONFIG_KEY_TASK_ID", "CONFIG_KEY_THREAD_ID",
        "CONFIG_KEY_DURABILITY", "CONFIG_KEY_READ"),
    "langgraph._internal._fields": ("get_cached_annotated_keys", "get_update_as_tuples"),
    "langgraph._internal._typing": ("MISSING",),
    "langgraph.pregel._write": ("ChannelWrite", "ChannelWriteEntry", "ChannelWriteTupleEntry"),
    "langgraph.pregel._read": ("DEFAULT_BOUND",),
    "langgraph.graph._branch": ("BranchSpec",),
}
"""The private LangGraph names Antler uses, by module (checked by tests/test_compat.py)."""

LANGCHAIN_PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "langchain.agents.factory": (
        "_chain_model_call_handlers", "_chain_async_model_call_handlers",
        "_chain_tool_call_wrappers", "_chain_async_tool_call_wrappers", "_wrap_trace_kwargs",
        "_ComposedExtendedModelResponse"),
    "langchain.chat_models.base": ("_BUILTIN_PROVIDERS",),
    "langchain_core.tools.base": ("_format_output",),
}
"""The private LangChain names Antler uses, by module (checked by tests/test_compat.py)."""


def _vouched(registry: dict[str, tuple[str, ...]], registry_name: str, module: str,
             name: str) -> Any:
    import importlib

    if name not in registry.get(module, ()):
        raise KeyError(f"{module}.{name} is not a private name antler.compat vouches for; "
                       f"add it to {registry_name} (and so to its test)")
    return getattr(importlib.import_module(module), name)


@functools.cache
def langgraph_private(module: str, name: str) -> Any:
    """`name` from LangGraph's private `module` (one of `LANGGRAPH_PRIVATE_NAMES`)."""
    return _vouched(LANGGRAPH_PRIVATE_NAMES, "LANGGRAPH_PRIVATE_NAMES", module, name)


@functools.cache
def langchain_private(module: str, name: str) -> Any:
    """LangChain's private `name` of `module` (one of `LANGCHAIN_PRIVATE_NAMES`)."""
    return _vouched(LANGCHAIN_PRIVATE_NAMES, "LANGCHAIN_PRIVATE_NAMES", module, name)


def channel_writes() -> tuple[Any, Any, Any]:
    """LangGraph's (ChannelWrite, ChannelWriteEntry, ChannelWriteTupleEntry): a node's
    writers and the entries they write."""
    module = "langgraph.pregel._write"
    return (langgraph_private(module, "ChannelWrite"),
            langgraph_private(module, "ChannelWriteEntry"),
            langgraph_private(module, "ChannelWriteTupleEntry"))


def default_bound() -> Any:
    """The runnable LangGraph binds to a node that only writes (its input step's)."""
    return langgraph_private("langgraph.pregel._read", "DEFAULT_BOUND")


def branch_spec() -> Any:
    """LangGraph's `BranchSpec`, the owner of a conditional edge's writer."""
    return langgraph_private("langgraph.graph._branch", "BranchSpec")


def wrap_composers() -> dict[str, tuple[Any, Any]]:
    """LangChain's own composition of sync and async wrap layers, per wrap hook kind
    (what `create_agent` nests `wrap_model_call` and `wrap_tool_call` hooks with)."""
    module = "langchain.agents.factory"
    return {
        "wrap_model_call": (langchain_private(module, "_chain_model_call_handlers"),
                            langchain_private(module, "_chain_async_model_call_handlers")),
        "wrap_tool_call": (langchain_private(module, "_chain_tool_call_wrappers"),
                           langchain_private(module, "_chain_async_tool_call_wrappers")),
    }


def composed_model_response() -> type:
    """LangChain's `_ComposedExtendedModelResponse`: what a composed `wrap_model_call`
    stack returns (the model response and the commands its layers added, inner first)."""
    cls: type = langchain_private("langchain.agents.factory", "_ComposedExtendedModelResponse")
    return cls


def wrap_trace_kwargs(middleware: Any) -> dict[str, Any]:
    """The `traceable` arguments `create_agent` puts a middleware's wrap hook under."""
    kwargs: dict[str, Any] = langchain_private("langchain.agents.factory",
                                               "_wrap_trace_kwargs")(middleware)
    return kwargs


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
    providers = langchain_private("langchain.chat_models.base", "_BUILTIN_PROVIDERS")
    return {str(key): str(value[0]) for key, value in providers.items()}


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
