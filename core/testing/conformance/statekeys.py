"""The state keys a middleware adds, and those Antler's own plugins declare."""

from __future__ import annotations

import functools
import tempfile
from typing import Any

__all__ = ["base_state_keys", "builtin_state_keys", "is_private_key", "key_origins",
           "own_state_keys"]


def base_state_keys() -> set[str]:
    from langchain.agents.middleware import AgentState

    return set(AgentState.__annotations__)


def own_state_keys(cls: type | None) -> set[str]:
    """The state keys a middleware class adds to the agent's (LangChain's excluded)."""
    schema = getattr(cls, "state_schema", None)
    if schema is None:
        return set()
    return set(getattr(schema, "__annotations__", {})) - base_state_keys()


def key_origins(schema: Any) -> dict[str, type]:
    """Each key of a TypedDict state schema -> the class whose own body declares it."""
    from antler.chain.stateowners import key_origins as declaring_classes

    return declaring_classes(schema)


def is_private_key(cls: type, key: str) -> bool:
    import typing

    from langchain.agents.middleware.types import OmitFromSchema

    try:
        hints = typing.get_type_hints(getattr(cls, "state_schema", None),
                                      include_extras=True)
    except Exception:  # an annotation that does not resolve: not provably private
        return False
    found: list[Any] = []

    def walk(hint: Any) -> None:
        for arg in getattr(hint, "__metadata__", ()):
            found.append(arg)
        for arg in typing.get_args(hint):
            walk(arg)
    walk(hints.get(key))
    return any(isinstance(item, OmitFromSchema) and item.input and item.output
               for item in found)


@functools.cache
def builtin_state_keys() -> dict[str, tuple[str, type]]:
    """Every state key Antler's own plugins declare -> (plugin, the class declaring it).

    Read from the chains of `examples/all-optional.yaml` (every optional built-in
    on), lead and subagent, with every runtime condition true.
    """
    from importlib import resources

    from antler.chain.config import parse_config
    from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
    from antler.plugin_api.registry import BUILTIN_DISTRIBUTION, discover
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    registry = discover()
    text = resources.files("antler").joinpath("examples/all-optional.yaml").read_text()
    config = parse_config(text, registry, "all-optional.yaml")
    keys: dict[str, tuple[str, type]] = {}
    for chain in ("lead", "subagent"):
        runtime = RuntimeOptions(plan_mode=True, supports_vision=True,
                                 subagents_enabled=chain == "lead")
        with tempfile.TemporaryDirectory() as home:
            agent = create_agent(config, chain=chain, model=ScriptedChatModel(["-"]),
                                 checkpointer=None, runtime=runtime, registry=registry,
                                 base_dir=home, services={TITLE_MODEL: ScriptedChatModel([]),
                                                          MEMORY_MODEL: ScriptedChatModel([])})
            try:
                for entry in agent.chain.entries:
                    source = registry.sources.get(entry.name)
                    if source is None or source.distribution != BUILTIN_DISTRIBUTION:
                        continue
                    schema = getattr(type(entry.middleware), "state_schema", None)
                    origins = key_origins(schema)
                    for key in own_state_keys(type(entry.middleware)):
                        keys.setdefault(key, (entry.name, origins[key]))
            finally:
                agent.close()
    return keys
