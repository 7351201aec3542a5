"""Deferred tools: the catalog, the `promoted` channel and `tool_search`'s scope.

With ``tool_search: {enabled: true}`` (the section of the deferred_tool_filter
and mcp_routing plugins) every MCP tool is *deferred*: it is
compiled into the agent (so it can run) but its schema reaches the model only
once it is *promoted*, by the model calling ``tool_search`` or by mcp_routing
matching the user's words. What the pieces agree on lives here:

`DeferredCatalog`
    The deferred tools of one agent build, immutable, identified by a hash of
    their sorted names and schemas. The platform builds it after
    authorization's build-time selection, so it holds only tools some caller
    may use.
`DeferredTools`
    The build's service (``services["deferred_tools"]``) holding the catalog
    and the generated ``tool_search`` tool once the tools are known. Plugins
    get it at build time and read it at run time.
The ``promoted`` state channel
    ``{"catalog_hash": ..., "names": [...]}``: what this thread promoted. Its
    reducer unions names written under the same hash and replaces them when
    the hash differs, so a changed catalog invalidates old promotions. A
    middleware that reads or writes it declares `PromotedState`; callers
    cannot set it in graph input. A chain with such a middleware defers its
    MCP tools (the platform adds ``tool_search``); without one it does not.
The discovery scope
    A plugin that narrows the run's tools (an active skill's allowed-tools)
    runs the ``tool_search`` call inside `limit_discovery(allowed)`; the tool
    then neither returns nor promotes a tool outside `allowed`.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentState
from langchain.agents.middleware.types import OmitFromInput

__all__ = [
    "DEFERRED_TOOLS",
    "MAX_SEARCH_RESULTS",
    "PROMOTED_KEY",
    "TOOL_SEARCH",
    "CatalogEntry",
    "DeferredCatalog",
    "DeferredTools",
    "PromotedState",
    "discovery_scope",
    "limit_discovery",
    "merge_promoted",
    "promoted_names",
    "promotion",
]

TOOL_SEARCH = "tool_search"
DEFERRED_TOOLS = "deferred_tools"
"""Service name of the build's `DeferredTools`."""
PROMOTED_KEY = "promoted"
MAX_SEARCH_RESULTS = 5


@dataclass(frozen=True)
class CatalogEntry:
    """One deferred tool: its model-facing schema and its routing."""

    name: str
    description: str
    schema: Mapping[str, Any]
    """The OpenAI-style function schema (name, description, parameters)."""
    server: str | None = None
    routing: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class DeferredCatalog:
    """The immutable set of deferred tools of one build."""

    entries: tuple[CatalogEntry, ...]
    hash: str = field(init=False)

    def __post_init__(self) -> None:
        names = [entry.name for entry in self.entries]
        if len(set(names)) != len(names):
            raise ValueError(f"deferred tool names repeat: {sorted(names)}")
        payload = json.dumps(sorted([entry.name, entry.schema] for entry in self.entries),
                             sort_keys=True, ensure_ascii=False, default=str)
        object.__setattr__(self, "hash", hashlib.sha256(payload.encode()).hexdigest()[:16])

    @property
    def names(self) -> frozenset[str]:
        return frozenset(entry.name for entry in self.entries)

    def get(self, name: str) -> CatalogEntry | None:
        return next((entry for entry in self.entries if entry.name == name), None)

    def search(self, query: str, allowed: Collection[str] | None = None,
               limit: int = MAX_SEARCH_RESULTS) -> list[CatalogEntry]:
        """The entries `query` finds, best first, among `allowed` (None: all).

        ``select:a,b`` names tools exactly (no limit); ``+word rest`` keeps the
        tools whose name contains `word` and ranks them by `rest`; anything else
        is a case-insensitive regular expression over name and description (an
        invalid one is taken literally). At most `limit` results otherwise.
        """
        pool = [e for e in self.entries if allowed is None or e.name in allowed]
        query = query.strip()
        if query.lower().startswith("select:"):
            wanted = [name.strip() for name in query[len("select:"):].split(",")]
            by_name = {entry.name: entry for entry in pool}
            return [by_name[name] for name in dict.fromkeys(wanted) if name in by_name]
        if query.startswith("+"):
            head, _, rest = query[1:].partition(" ")
            pool = [e for e in pool if head.strip().lower() in e.name.lower()]
            query = rest.strip()
            if not query:
                return sorted(pool, key=lambda e: e.name)[:limit]
        pattern = _pattern(query)
        scored = []
        for entry in pool:
            in_name = bool(pattern.search(entry.name))
            in_text = bool(pattern.search(entry.description))
            if in_name or in_text:
                scored.append((not in_name, entry.name, entry))
        return [entry for *_, entry in sorted(scored, key=lambda t: (t[0], t[1]))][:limit]


def _pattern(query: str) -> re.Pattern[str]:
    try:
        return re.compile(query, re.IGNORECASE)
    except re.error:
        return re.compile(re.escape(query), re.IGNORECASE)


class DeferredTools:
    """The build's deferred setup: filled once, when the agent's tools are known."""

    def __init__(self) -> None:
        self.catalog: DeferredCatalog | None = None
        self.tool: Any = None

    def install(self, catalog: DeferredCatalog, tool: Any) -> None:
        if self.catalog is not None:
            raise RuntimeError("the deferred catalog of a build is set once")
        self.catalog = catalog
        self.tool = tool

    def is_tool_search(self, tool: Any) -> bool:
        """Whether `tool` is this build's generated ``tool_search`` (not a same-named one)."""
        return self.tool is not None and tool is self.tool

    def hidden(self, state: Mapping[str, Any] | None) -> frozenset[str]:
        """The deferred names the thread has not promoted (empty without a catalog)."""
        if self.catalog is None:
            return frozenset()
        return self.catalog.names - promoted_names(state, self.catalog.hash)


# -- the `promoted` channel -------------------------------------------------------------


def merge_promoted(current: Any, new: Any) -> Any:
    """The channel's reducer: same catalog hash -> union of names; another hash -> replace."""
    if not isinstance(new, Mapping) or not isinstance(new.get("catalog_hash"), str):
        return current
    names = [str(name) for name in new.get("names") or ()]
    if isinstance(current, Mapping) and current.get("catalog_hash") == new["catalog_hash"]:
        names = [*map(str, current.get("names") or ()), *names]
    return {"catalog_hash": new["catalog_hash"], "names": sorted(set(names))}


class PromotedState(AgentState[Any]):
    """State schema of a middleware that reads or writes the ``promoted`` channel."""

    promoted: NotRequired[Annotated[dict[str, Any], OmitFromInput, merge_promoted]]


def promotion(catalog_hash: str, names: Sequence[str]) -> dict[str, Any]:
    """The state update promoting `names` of the catalog `catalog_hash`."""
    return {PROMOTED_KEY: {"catalog_hash": catalog_hash, "names": sorted(set(names))}}


def promoted_names(state: Mapping[str, Any] | None, catalog_hash: str) -> frozenset[str]:
    """The names promoted under `catalog_hash` (promotions of another catalog do not count)."""
    value = state.get(PROMOTED_KEY) if isinstance(state, Mapping) else None
    if not isinstance(value, Mapping) or value.get("catalog_hash") != catalog_hash:
        return frozenset()
    return frozenset(str(name) for name in value.get("names") or ())


# -- the discovery scope ----------------------------------------------------------------

_SCOPE: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "antler_discovery_scope", default=None)


@contextlib.contextmanager
def limit_discovery(allowed: Collection[str]) -> Iterator[None]:
    """Within the block, ``tool_search`` finds and promotes only tools in `allowed`."""
    outer = _SCOPE.get()
    scope = frozenset(allowed) if outer is None else outer & frozenset(allowed)
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def discovery_scope() -> frozenset[str] | None:
    """The names ``tool_search`` may return now (None: no limit)."""
    return _SCOPE.get()
