"""Token usage: reading a reply's usage, and the run's totals that `antler run` prints.

A model reply states its usage in ``AIMessage.usage_metadata``
(``input_tokens``, ``output_tokens``, ``total_tokens``); `usage_of` reads it
the same way everywhere and rejects malformed values instead of guessing.

The token_usage plugin keeps one graph state key, `USAGE_KEY`
(``antler_token_usage``), for the current run: ``{"run_id", "calls": {message
id: usage}, "subagents": {tool call id: usage}, "input_tokens",
"output_tokens", "total_tokens"}``. A subagent's usage arrives in its `task`
result (``subagent_token_usage``); once merged into the dispatching reply,
the result is marked `ATTRIBUTED_KEY` in the same update, so it is never
counted twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

USAGE_KEY = "antler_token_usage"
SUBAGENT_USAGE_KEY = "subagent_token_usage"
"""`task` result `additional_kwargs` key with the subagent's usage (see delegation)."""
ATTRIBUTED_KEY = "subagent_token_usage_attributed"
"""`task` result `additional_kwargs` flag: its usage was merged into the dispatching reply."""
FIELDS = ("input_tokens", "output_tokens", "total_tokens")

Usage = dict[str, int]


def normalize_usage(value: Any) -> Usage | None:
    """``{input_tokens, output_tokens, total_tokens}`` from a usage mapping, or None if malformed.

    The total defaults to input + output; negative, non-integer or missing
    input/output counts make the whole value unusable.
    """
    if type(value) is not dict and not isinstance(value, Mapping):  # dict: no ABC check
        return None
    counts = {}
    for key in FIELDS[:2]:
        count = value.get(key)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return None
        counts[key] = count
    total = value.get("total_tokens", counts["input_tokens"] + counts["output_tokens"])
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        return None
    counts["total_tokens"] = total
    return counts


def usage_of(message: Any) -> Usage | None:
    """The usage a reply states (its ``usage_metadata``), or None."""
    return normalize_usage(getattr(message, "usage_metadata", None))


def add_usage(*values: Mapping[str, int] | None) -> Usage:
    """The field-wise sum of usage values (None counts as nothing)."""
    inputs = outputs = totals = 0
    for value in values:
        if not value:
            continue
        get = value.get
        inputs += int(get("input_tokens", 0) or 0)
        outputs += int(get("output_tokens", 0) or 0)
        totals += int(get("total_tokens", 0) or 0)
    return {"input_tokens": inputs, "output_tokens": outputs, "total_tokens": totals}


def run_usage_of(state: Mapping[str, Any], run_id: str | None = None) -> dict[str, Any] | None:
    """The recorded usage of the run (with `run_id`: only when that run recorded it)."""
    value = state.get(USAGE_KEY) if isinstance(state, Mapping) else None
    if not isinstance(value, Mapping):
        return None
    if run_id is not None and value.get("run_id") != run_id:
        return None
    return dict(value)


def describe_usage(value: Mapping[str, Any]) -> str:
    """One line for people: the run's totals and how many model calls made them."""
    calls = len(value.get("calls") or {})
    subagents = len(value.get("subagents") or {})
    text = (f"{value.get('total_tokens', 0)} tokens ({value.get('input_tokens', 0)} in, "
            f"{value.get('output_tokens', 0)} out) over {calls} model "
            f"call{'s' if calls != 1 else ''}")
    if subagents:
        text += f" and {subagents} subagent task{'s' if subagents != 1 else ''}"
    return text
