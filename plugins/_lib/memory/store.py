"""Per-user memory in the shared store: one item per fact.

A user's facts are the items of namespace `("antler", "memory", user_id)` of
the `store` service (LangGraph's `BaseStore`: SQLite under the base directory,
or Postgres), so every process and every replica of a deployment reads and
writes the same memory. An item's key is a digest of the fact's dedupe form
(`normalize_fact`): two processes learning the same fact at once write the
same item instead of two copies, and no lock is needed between them.

Each item holds the fact (its text, the thread it came from, when it was
first and last seen, the agent) and `seq`, its place in the order facts were
learned. Past `max_facts`, the facts seen least recently are deleted.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from antler.plugin_api import MEMORY_NAMESPACE, validate_id

__all__ = [
    "DEFAULT_MAX_FACTS",
    "MEMORY_NAMESPACE",
    "MemoryFact",
    "MemoryStore",
    "merge_facts",
    "normalize_fact",
    "now_text",
    "search_all",
]

DEFAULT_MAX_FACTS = 100
_PAGE = 500

_TRAILING = re.compile("[\\s.!\u3002\uff01]+$")  # also the CJK full stop and "!"


def normalize_fact(content: str) -> str:
    """The dedupe key of a fact: case-folded, whitespace collapsed, no final full stop."""
    return _TRAILING.sub("", " ".join(content.split())).casefold()


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class MemoryFact:
    """One durable fact about a user."""

    content: str
    source_thread: str | None
    created_at: str
    updated_at: str
    agent_name: str | None = None
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = uuid.uuid4().hex[:12]

    @classmethod
    def from_json(cls, data: Any) -> MemoryFact | None:
        """A fact from its stored form, or None when the entry is unusable."""
        if not isinstance(data, dict) or not isinstance(data.get("content"), str):
            return None
        content = data["content"].strip()
        if not content:
            return None

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) and value else None

        created = text("created_at") or now_text()
        return cls(content=content, source_thread=text("source_thread"), created_at=created,
                   updated_at=text("updated_at") or created, agent_name=text("agent_name"),
                   id=text("id") or "")


@dataclass
class Merge:
    """What `merge_facts` did: the facts to keep, and which of them are new or touched."""

    facts: list[MemoryFact]
    added: list[MemoryFact]
    touched: list[MemoryFact]
    dropped: list[MemoryFact]


def merge_facts(facts: list[MemoryFact], contents: Iterable[str], *, max_facts: int,
                source_thread: str | None = None, agent_name: str | None = None) -> Merge:
    """Merge `contents` into `facts` (oldest first).

    A fact already known (same text up to case, spacing and a final full stop)
    is not added again; its `updated_at` is refreshed instead. Past
    `max_facts`, the facts seen least recently are dropped (among equals, the
    earliest learned).
    """
    facts = list(facts)
    index = {normalize_fact(fact.content): fact for fact in facts}
    now = now_text()
    added: list[MemoryFact] = []
    touched: list[MemoryFact] = []
    for content in contents:
        content = " ".join(str(content).split())
        key = normalize_fact(content)
        if not key:
            continue
        if key in index:
            index[key].updated_at = now
            touched.append(index[key])
            continue
        fact = MemoryFact(content=content, source_thread=source_thread, created_at=now,
                          updated_at=now, agent_name=agent_name)
        index[key] = fact
        facts.append(fact)
        added.append(fact)
    dropped: list[MemoryFact] = []
    if len(facts) > max_facts:
        ranked = sorted(enumerate(facts), key=lambda item: (item[1].updated_at, item[0]),
                        reverse=True)
        kept = {position for position, _fact in ranked[:max_facts]}
        dropped = [fact for position, fact in enumerate(facts) if position not in kept]
        facts = [fact for position, fact in enumerate(facts) if position in kept]
        added = [fact for fact in added if any(fact is f for f in facts)]
        touched = [fact for fact in touched if any(fact is f for f in facts)]
    return Merge(facts, added, touched, dropped)


def search_all(store: Any, namespace: tuple[str, ...]) -> list[Any]:
    """Every item of `namespace` in `store` (the store's search returns pages)."""
    items: list[Any] = []
    while len(page := store.search(namespace, limit=_PAGE, offset=len(items))) == _PAGE:
        items.extend(page)
    return [*items, *page]


async def asearch_all(store: Any, namespace: tuple[str, ...]) -> list[Any]:
    """Async form of `search_all`."""
    items: list[Any] = []
    while len(page := await store.asearch(namespace, limit=_PAGE, offset=len(items))) == _PAGE:
        items.extend(page)
    return [*items, *page]


def _in_order(items: list[Any]) -> list[Any]:
    return sorted(items, key=lambda item: (item.value.get("seq", 0), item.key))


def fact_key(content: str) -> str:
    """The store key of a fact: a digest of its dedupe form."""
    return hashlib.sha256(normalize_fact(content).encode("utf-8")).hexdigest()[:32]


class MemoryStore:
    """The per-user facts in a LangGraph `BaseStore` (the `store` service).

    `max_facts` caps the facts kept per user; past it, the facts seen least
    recently are dropped. Safe across threads, processes and replicas: writers
    of the same fact write the same key.
    """

    def __init__(self, store: Any, *, max_facts: int = DEFAULT_MAX_FACTS) -> None:
        if max_facts < 1:
            raise ValueError(f"max_facts must be at least 1, got {max_facts!r}")
        self.store = store
        self.max_facts = max_facts

    @staticmethod
    def namespace(user_id: str) -> tuple[str, ...]:
        """The user's namespace (the id is validated like a directory name)."""
        return (*MEMORY_NAMESPACE, validate_id("user id", user_id))

    def _items(self, user_id: str) -> list[Any]:
        return _in_order(search_all(self.store, self.namespace(user_id)))

    async def _aitems(self, user_id: str) -> list[Any]:
        return _in_order(await asearch_all(self.store, self.namespace(user_id)))

    @staticmethod
    def _facts(items: list[Any]) -> list[MemoryFact]:
        return [fact for fact in (MemoryFact.from_json(item.value) for item in items)
                if fact is not None]

    def facts(self, user_id: str) -> list[MemoryFact]:
        """The user's facts, oldest first; empty when the user has no memory yet."""
        return self._facts(self._items(user_id))

    async def afacts(self, user_id: str) -> list[MemoryFact]:
        """Async form of `facts`."""
        return self._facts(await self._aitems(user_id))

    def add_facts(self, user_id: str, contents: Iterable[str], *,
                  source_thread: str | None = None,
                  agent_name: str | None = None) -> list[MemoryFact]:
        """Merge `contents` into the user's memory; return the facts that were new."""
        items = self._items(user_id)
        seqs = {item.key: item.value.get("seq", 0) for item in items}
        merge = merge_facts(self._facts(items), contents, max_facts=self.max_facts,
                            source_thread=source_thread, agent_name=agent_name)
        namespace = self.namespace(user_id)
        next_seq = time.time_ns()
        for position, fact in enumerate([*merge.touched, *merge.added]):
            key = fact_key(fact.content)
            seq = seqs.get(key) or next_seq + position
            self.store.put(namespace, key, {**asdict(fact), "seq": seq}, index=False)
        for fact in merge.dropped:
            self.store.delete(namespace, fact_key(fact.content))
        return merge.added

    def import_facts(self, user_id: str, facts: Iterable[MemoryFact]) -> int:
        """Copy `facts` (with their dates) into the user's memory; return how many were new.

        Facts already there are left as they are; the cap applies afterwards.
        """
        namespace = self.namespace(user_id)
        known = {item.key for item in self._items(user_id)}
        seq = time.time_ns()
        imported = 0
        for position, fact in enumerate(facts):
            key = fact_key(fact.content)
            if key in known or not normalize_fact(fact.content):
                continue
            known.add(key)
            self.store.put(namespace, key, {**asdict(fact), "seq": seq + position},
                           index=False)
            imported += 1
        if imported:
            self.add_facts(user_id, [])  # applies the cap
        return imported
