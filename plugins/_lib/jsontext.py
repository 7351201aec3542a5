"""JSON a model or a tool wrote as text: decoded only when it is a whole list or object."""

from __future__ import annotations

from typing import Any

from antler.plugin_api import jsonsource

__all__ = ["json_container"]


def json_container(text: str) -> list[Any] | dict[str, Any] | None:
    """The list or object `text` holds (blanks around it allowed), or None.

    Only text that starts like a JSON list or object and parses as one counts,
    so ``"[draft] plan"`` is None; parsing stays within the parse limits
    (`jsonsource.loads`).
    """
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        decoded = jsonsource.loads(stripped)
    except ValueError:
        return None
    return decoded if isinstance(decoded, (list, dict)) else None
