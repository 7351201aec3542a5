"""Agent-state ownership: which plugin owns which state key, and what each may write.

Every key of the agent's state has at most one owning party. A plugin owns
the keys its manifest lists under `state: {owns: [...]}` and every key its
middleware's `state_schema` declares, except those it lists under
`state: {reads: [...]}` (it declares them only to read another plugin's key).
Two kinds of key belong to no plugin and stay writable:

- LangChain's shared channels (`SHARED_STATE_KEYS`: `messages`, `jump_to`,
  `structured_response`), which every plugin may write;
- contract channels: keys declared by a state schema of `antler.contracts`
  (`antler_stop_reason`, `promoted`, ...), which have a reducer that merges
  writers, and which a plugin may write when its own schema takes the contract.

Plugins of one distribution may own the same key (one author, one release),
and so may plugins whose schemas take it from the same class (one middleware
class added twice); other owners of one key (two distributions, a configured
extension and anything else) are refused when the chain is built
(`check_owners`), naming both and where each declared it. At run time a
hook's update that writes any other key is refused with the plugin's name
(`antler.runtime.isolation` applies `refused_keys` to every node hook's update
and to the `Command` a wrap hook returns of its own, in fused and unfused
graphs alike), and so is a `Command` returned by a tool the plugin contributes
(`antler.runtime.toolguard`).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from antler.errors import StateOwnershipError
from antler.plugin_api.spec import SHARED_STATE_KEYS, PluginSpec

CONTRACT_PACKAGE = "antler.contracts"


@dataclass(frozen=True)
class StateClaim:
    """What one plugin of a chain may do with the agent state."""

    plugin: str
    spec: PluginSpec
    owns: dict[str, str]
    """Owned key -> where the ownership was declared (manifest `state.owns` or schema)."""
    contracts: frozenset[str]
    reads: frozenset[str]
    schemas: dict[str, type]
    """Owned key -> the state schema class declaring it (keys owned through the schema)."""

    @property
    def writable(self) -> frozenset[str]:
        return frozenset(self.owns) | self.contracts | SHARED_STATE_KEYS

    @property
    def party(self) -> str:
        """Who answers for the plugin: its distribution, else the plugin alone."""
        distribution = self.spec.provenance.distribution
        return distribution if distribution and not distribution.startswith("<") \
            else f"plugin:{self.plugin}"


def key_origins(schema: Any) -> dict[str, type]:
    """Each key of a TypedDict state schema -> the class whose own body declares it."""
    if schema is None:
        return {}
    origins: dict[str, type] = {}
    for base in getattr(schema, "__orig_bases__", ()):
        base = typing.get_origin(base) or base
        if isinstance(base, type) and hasattr(base, "__annotations__") and base is not dict:
            origins.update(key_origins(base))
    for key in getattr(schema, "__annotations__", {}):
        origins.setdefault(key, schema)
    return origins


def schema_keys(middleware_class: type | None) -> dict[str, type]:
    """The keys a middleware class's `state_schema` adds to LangChain's, with their origin."""
    schema = getattr(middleware_class, "state_schema", None)
    return {key: origin for key, origin in key_origins(schema).items()
            if key not in SHARED_STATE_KEYS}


def is_contract(origin: type) -> bool:
    """Whether a state schema class is a contract channel's (declared in antler.contracts)."""
    module = getattr(origin, "__module__", "") or ""
    return module == CONTRACT_PACKAGE or module.startswith(CONTRACT_PACKAGE + ".")


def claim(name: str, spec: PluginSpec, middleware_class: type | None) -> StateClaim:
    """The state claim of plugin `name`, from its manifest entry and its class."""
    reads = set(spec.state.reads)
    owns = {key: f"state.owns at {spec.provenance}" for key in spec.state.owns}
    contracts = set()
    schemas = {}
    for key, origin in schema_keys(middleware_class).items():
        if is_contract(origin):
            contracts.add(key)
        elif key not in reads and key not in owns:
            owns[key] = (f"state_schema {origin.__module__}.{origin.__qualname__}"
                         f" [{spec.provenance}]")
            schemas[key] = origin
    return StateClaim(name, spec, owns, frozenset(contracts), frozenset(reads), schemas)


def check_owners(claims: Iterable[StateClaim]) -> dict[str, list[str]]:
    """Owners by key; `StateOwnershipError` (a `BuildError`) when owners of one key
    conflict."""
    owners: dict[str, list[StateClaim]] = {}
    for item in claims:
        for key in item.owns:
            owners.setdefault(key, []).append(item)
    problems = []
    for key, items in owners.items():
        clash = next(((a, b) for index, a in enumerate(items) for b in items[index + 1:]
                      if _rivals(a, b, key)), None)
        if clash is not None:
            first, other = clash
            problems.append(
                f"state key {key!r} has two owners: plugin {first.plugin!r} "
                f"({first.owns[key]}) and plugin {other.plugin!r} ({other.owns[key]}). "
                f"Rename the key in one of them (namespace it with the plugin's name), or, "
                f"if {other.plugin!r} only reads it, list it under `state: {{reads: [{key}]}}` "
                "in its manifest entry")
    if problems:
        raise StateOwnershipError("\n".join(problems))
    return {key: [item.plugin for item in items] for key, items in owners.items()}


def _rivals(a: StateClaim, b: StateClaim, key: str) -> bool:
    """Whether two owners of `key` conflict: other parties, and not one schema class."""
    schema = a.schemas.get(key)
    return a.party != b.party and (schema is None or schema is not b.schemas.get(key))


def written_keys(update: Any) -> list[str]:
    """The state keys `update` writes: a node hook's mapping, or a `Command`'s update read
    as LangGraph applies it (a mapping, `(key, value)` pairs, an object's annotated
    fields). Anything else is no update at all: `TypeError`, which the hook's isolation
    handles as the hook's failure."""
    if update is None:
        return []
    if isinstance(update, Mapping):
        return list(update)
    as_pairs = getattr(update, "_update_as_tuples", None)  # a Command: LangGraph's own reading
    if as_pairs is None:
        raise TypeError(f"returned {shown_value(update)}; a node hook returns a dict of state "
                        "updates (`{'key': value}`), a Command or None")
    return [key for key, _value in as_pairs()]


def shown_value(value: Any) -> str:
    """`value` for a message: its type and a bounded repr (a hook may return anything)."""
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def steering(command: Any) -> str | None:
    """What in a `Command` would carry a write past the write guard, in words (None: nothing).

    `graph=Command.PARENT` writes its update in the calling graph, and a `Send` in `goto`
    runs a node on a state its sender made up; a node name in `goto` steers nothing."""
    if getattr(command, "graph", None) is not None:
        return f"addresses graph {command.graph!r} (its update would be written there, unguarded)"
    goto = getattr(command, "goto", None)
    targets = goto if isinstance(goto, (list, tuple)) else (goto,) if goto else ()
    if all(isinstance(target, str) for target in targets):
        return None
    return ("sends a state of its own making to a node (`goto=Send(...)`), which would run "
            "that node on state no plugin wrote")


def describe_steering(plugin: str, hook: str, what: str) -> str:
    """One line: `plugin`'s `Command` in `hook` does `what` (from `steering`); what may be."""
    return (f"plugin {plugin!r}'s Command in {hook} {what}; a plugin's Command may write its "
            "plugin's keys and name a node in `goto`, nothing more")


def refused_keys(update: Any, writable: frozenset[str]) -> list[str]:
    """The keys of a node hook's `update` (a mapping or a `Command`) outside `writable`."""
    return [key for key in written_keys(update) if key not in writable]


def describe_refusal(plugin: str, hook: str, keys: list[str],
                     owners: Mapping[str, list[str]]) -> str:
    """One line: which keys `plugin`'s `hook` wrote that it does not own, and whose they are."""
    parts = []
    for key in keys:
        held = owners.get(key)
        parts.append(f"{key!r} (owned by plugin {held[0]!r})" if held
                     else f"{key!r} (owned by no plugin of this chain)")
    return (f"plugin {plugin!r} wrote state key{'s' * (len(keys) > 1)} {', '.join(parts)} in "
            f"{hook}, which it does not own; a plugin writes only the keys it owns "
            "(`state: {owns: [...]}` in its manifest, or its state_schema), the contract "
            "channels its schema takes and the shared channels "
            f"{', '.join(sorted(SHARED_STATE_KEYS))}")
