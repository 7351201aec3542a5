"""What a thread remembers about the command-line runs that used it.

`antler run` writes `run.json` next to the thread's `user-data` directory (out
of the sandbox's sight): the config and model the last run used, and, for the
offline scripted model, how many turns of its script have been consumed. The
next `antler run`/`antler resume` of the thread with the same script continues
at that turn instead of replaying the script from its first turn, and a resume
that finds no decision to take can say which flags differ from the paused run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["load_record", "restore_script_position", "save_record", "script_identity"]

RECORD_FILE = "run.json"


def _path(thread_dir: Path) -> Path:
    return thread_dir / RECORD_FILE


def load_record(thread_dir: Path) -> dict[str, Any]:
    """The thread's record, or {} when it has none (or it cannot be read)."""
    try:
        data = json.loads(_path(thread_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_record(thread_dir: Path, record: dict[str, Any]) -> None:
    """Replace the thread's record atomically (a crash leaves the old one)."""
    thread_dir.mkdir(parents=True, exist_ok=True)
    temporary = _path(thread_dir).with_suffix(".tmp")
    temporary.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
    os.replace(temporary, _path(thread_dir))


def script_identity(model: Any) -> str | None:
    """A digest of a scripted model's turns (None for any other model): the same
    script in another process has the same identity."""
    script = getattr(model, "script", None)
    if type(model).__name__ != "ScriptedChatModel" or script is None:
        return None
    return hashlib.sha256(repr(list(script)).encode()).hexdigest()[:16]


def restore_script_position(model: Any, record: dict[str, Any]) -> int:
    """Continue `model` (scripted) where the thread's last run left its script; the
    position restored (0 for another script or another model)."""
    identity = script_identity(model)
    stored = record.get("script") or {}
    if identity is None or stored.get("identity") != identity:
        return 0
    position = int(stored.get("position") or 0)
    model.continue_at(position)
    return position
