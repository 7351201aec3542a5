"""Per-user memory on disk: `{base}/users/{user_id}/memory.json`.

One JSON file per user holds that user's facts, each with the thread it came
from and when it was first and last seen. Writes are atomic (a temporary file
in the same directory, then `os.replace`), so a crash mid-write leaves the old
file intact. Every read-merge-write holds an advisory lock on
`memory.json.lock` next to the file, so writers in several processes (parallel
`antler run`s) keep each other's facts. A file that cannot be read (not UTF-8,
not JSON, not a memory file) is moved aside with a warning naming both paths,
never overwritten, so nothing a user had remembered is silently lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from antler.runtime.paths import validate_id

__all__ = ["MEMORY_FILENAME", "MemoryFact", "MemoryStore", "normalize_fact"]

logger = logging.getLogger(__name__)

MEMORY_FILENAME = "memory.json"
FORMAT_VERSION = 1
DEFAULT_MAX_FACTS = 100

_TRAILING = re.compile("[\\s.!\u3002\uff01]+$")  # also the CJK full stop and "!"


def normalize_fact(content: str) -> str:
    """The dedupe key of a fact: case-folded, whitespace collapsed, no final full stop."""
    return _TRAILING.sub("", " ".join(content.split())).casefold()


def _now() -> str:
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

        created = text("created_at") or _now()
        return cls(content=content, source_thread=text("source_thread"), created_at=created,
                   updated_at=text("updated_at") or created, agent_name=text("agent_name"),
                   id=text("id") or "")


class MemoryStore:
    """Reads and writes the per-user memory files under one base directory.

    `max_facts` caps the facts kept per user; past it, the facts seen least
    recently are dropped. Safe across threads and processes.
    """

    def __init__(self, base: str | os.PathLike[str], *,
                 max_facts: int = DEFAULT_MAX_FACTS) -> None:
        if max_facts < 1:
            raise ValueError(f"max_facts must be at least 1, got {max_facts!r}")
        self.base = Path(base).expanduser().absolute()
        self.max_facts = max_facts
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def path_for(self, user_id: str) -> Path:
        """The memory file of `user_id` (the id is validated: it becomes a directory name)."""
        validate_id("user id", user_id)
        return self.base / "users" / user_id / MEMORY_FILENAME

    def facts(self, user_id: str) -> list[MemoryFact]:
        """The user's facts, oldest first; empty when the user has no memory yet."""
        path = self.path_for(user_id)
        if not path.exists():
            return []  # nothing to read, so no lock file to leave behind
        with self._lock(user_id, path):
            facts, problem = self._read(path)
            if problem is not None and path.exists():
                self._set_aside(path, problem)
                if facts:
                    self._write(path, user_id, facts)
            return facts

    def add_facts(self, user_id: str, contents: Iterable[str], *,
                  source_thread: str | None = None,
                  agent_name: str | None = None) -> list[MemoryFact]:
        """Merge `contents` into the user's memory; return the facts that were new.

        A fact already known (same text up to case, spacing and a final full
        stop) is not added again; its `updated_at` is refreshed instead.
        """
        path = self.path_for(user_id)
        with self._lock(user_id, path):
            facts, problem = self._read(path)
            if problem is not None:
                self._set_aside(path, problem)
            index = {normalize_fact(fact.content): fact for fact in facts}
            now = _now()
            added: list[MemoryFact] = []
            touched = False
            for content in contents:
                content = " ".join(str(content).split())
                key = normalize_fact(content)
                if not key:
                    continue
                if key in index:
                    index[key].updated_at = now
                    touched = True
                    continue
                fact = MemoryFact(content=content, source_thread=source_thread,
                                  created_at=now, updated_at=now, agent_name=agent_name)
                index[key] = fact
                facts.append(fact)
                added.append(fact)
            if not added and not touched and problem is None:
                return []
            if len(facts) > self.max_facts:
                # Keep the most recently seen; among equals, the most recently added.
                ranked = sorted(enumerate(facts), key=lambda item: (item[1].updated_at, item[0]),
                                reverse=True)
                kept = {position for position, _fact in ranked[: self.max_facts]}
                facts = [fact for position, fact in enumerate(facts) if position in kept]
                added = [fact for fact in added if any(fact is f for f in facts)]
            self._write(path, user_id, facts)
            return added

    # -- disk --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self, user_id: str, path: Path) -> Iterator[None]:
        """This user's file to ourselves: a thread lock here, a file lock for other processes.

        The lock file is never replaced (the memory file is), so every process
        locks the same inode.
        """
        with self._locks_guard:
            local = self._locks.setdefault(user_id, threading.Lock())
        with local:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path.with_name(path.name + ".lock"),
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    @staticmethod
    def _read(path: Path) -> tuple[list[MemoryFact], str | None]:
        """(facts, problem): `problem` says why (part of) the file could not be used."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return [], None
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return [], f"not UTF-8 text (byte {exc.start})"
        except ValueError as exc:
            return [], f"not valid JSON ({exc})"
        if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
            return [], "not a memory file (expected an object with a 'facts' list)"
        facts = [fact for fact in map(MemoryFact.from_json, data["facts"]) if fact is not None]
        dropped = len(data["facts"]) - len(facts)
        return facts, (f"{dropped} unreadable fact entr{'y' if dropped == 1 else 'ies'}"
                       if dropped else None)

    @staticmethod
    def _set_aside(path: Path, problem: str) -> None:
        """Keep a copy of a damaged file next to it before it is rewritten."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        backup = path.with_name(f"{path.name}.corrupt-{stamp}-{uuid.uuid4().hex[:6]}")
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, backup)
            logger.warning("memory file %s: %s; set it aside as %s and started afresh from "
                           "what was readable", path, problem, backup)

    @staticmethod
    def _write(path: Path, user_id: str, facts: list[MemoryFact]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "version": FORMAT_VERSION,
            "user_id": user_id,
            "updated_at": _now(),
            "facts": [asdict(fact) for fact in facts],
        }
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                        suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(document, handle, ensure_ascii=False, indent=2)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise
