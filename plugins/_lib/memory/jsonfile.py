"""Per-user memory in JSON files: `{base}/users/{user_id}/memory.json`.

Memory now lives in the shared store (`.store.MemoryStore`); these files are
what earlier versions kept, read by `antler memory import` to move them over.

One JSON file per user holds that user's facts, each with the thread it came
from and when it was first and last seen. Writes are atomic (a temporary file
in the same directory, then `os.replace`), so a crash mid-write leaves the old
file intact. Every read-merge-write holds an advisory lock on
`memory.json.lock` next to the file, so writers in several processes keep
each other's facts. A file that cannot be read (not UTF-8, not JSON, not a
memory file) is moved aside with a warning naming both paths, never
overwritten, so nothing a user had remembered is silently lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
import uuid
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from antler.plugin_api import jsonsource, validate_id

from .store import DEFAULT_MAX_FACTS, MemoryFact, merge_facts, now_text

__all__ = ["FORMAT_VERSION", "MEMORY_FILENAME", "MemoryFile"]

logger = logging.getLogger(__name__)

MEMORY_FILENAME = "memory.json"
FORMAT_VERSION = 1


class _UserLock:
    """One user's lock within this process (a weak table's value)."""

    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


class MemoryFile:
    """Reads and writes the per-user memory files under one base directory.

    The JSON files are what memory was kept in before the shared store; they
    stay readable (and writable) so `antler memory import` can move them over.

    `max_facts` caps the facts kept per user; past it, the facts seen least
    recently are dropped. Safe across threads and processes.
    """

    def __init__(self, base: str | os.PathLike[str], *,
                 max_facts: int = DEFAULT_MAX_FACTS) -> None:
        if max_facts < 1:
            raise ValueError(f"max_facts must be at least 1, got {max_facts!r}")
        self.base = Path(base).expanduser().absolute()
        self.max_facts = max_facts
        # A user's thread lock lives while a call holds or waits for it (a weak table),
        # so a long-lived server keeps none for users it served once.
        self._locks: weakref.WeakValueDictionary[str, _UserLock] = (
            weakref.WeakValueDictionary())
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
            merge = merge_facts(facts, contents, max_facts=self.max_facts,
                                source_thread=source_thread, agent_name=agent_name)
            if not merge.added and not merge.touched and problem is None:
                return []
            self._write(path, user_id, merge.facts)
            return merge.added

    # -- disk --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self, user_id: str, path: Path) -> Iterator[None]:
        """This user's file to ourselves: a thread lock here, a file lock for other processes.

        The lock file is never replaced (the memory file is), so every process
        locks the same inode.
        """
        with self._locks_guard:
            local = self._locks.get(user_id)
            if local is None:
                local = self._locks[user_id] = _UserLock()
        with local.lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path.with_name(path.name + ".lock"),
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    @classmethod
    def read(cls, path: Path) -> list[MemoryFact]:
        """The readable facts of the memory file at `path`, without locking or repairing it."""
        return cls._read(path)[0]

    @staticmethod
    def _read(path: Path) -> tuple[list[MemoryFact], str | None]:
        """(facts, problem): `problem` says why (part of) the file could not be used."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return [], None
        try:
            data = jsonsource.loads(raw.decode("utf-8"))
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
            "updated_at": now_text(),
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
