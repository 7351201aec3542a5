"""Server-owned message keys: `additional_kwargs` entries a caller must never supply.

Plugins and the core mark messages with entries in ``additional_kwargs`` that
later hooks trust: a tool result's status, an injected image, an answered
clarification, the user's original text, a read mark. A caller that could put
the same entry on a message of its own input could forge any of them. So every
such key is declared:

- the core's contracts declare theirs here, in `CORE_SERVER_OWNED_KEYS`;
- a plugin declares the keys it writes and trusts in its manifest entry
  (``server_owned_keys: [...]``), as it declares ``emits_tags``.

`server_owned_keys` merges both into one list, and the input boundary
(input_sanitization's ``before_agent``) strips every listed key from what a
run that is not internal receives as input. `antler chain show --json` and
`antler plugins list --json` print the list.

The same module names the private state channel the graph's input step fills
with the ids of the messages a run received (`ARRIVALS_KEY`): the core writes
it, the boundary guard reads it, so the guard knows exactly which messages came
from the caller, whatever the server seeded with ``update_state``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

__all__ = [
    "ARRIVALS_KEY",
    "CORE",
    "CORE_SERVER_OWNED_KEYS",
    "server_owned_keys",
    "strip_server_owned",
]

CORE = "antler"
"""The owner named for the core's own keys."""

CORE_SERVER_OWNED_KEYS: dict[str, str] = {
    "antler_tool_meta": "toolmeta: a tool result's status, error type and next action",
    "antler_tool_output": "tooloutput: a result saved whole under outputs/.tool-results",
    "antler_error_fallback": "fallback: a reply standing in for a failed model call",
    "antler_hidden": "messages: a message a plugin injected",
    "hidden": "messages: an older hidden-message marker",
    "hide_from_ui": "messages: an older hidden-message marker",
    "lc_source": "messages: LangChain's summary marker",
    "original_user_content": "messages: the user's own text, without server context",
    "subagent_token_usage": "usage: a subagent's token usage on its task result",
    "subagent_token_usage_attributed": "usage: that usage was merged into the reply",
    "subagent_status": "delegation: how a task ended",
    "subagent_stop_reason": "delegation: why a subagent stopped",
    "subagent_result_brief": "delegation: the start of a subagent's answer",
    "subagent_result_sha256": "delegation: the digest of a subagent's answer",
    "task_description": "delegation: what the task asked",
}
"""The core contracts' keys, with the contract that trusts each."""

ARRIVALS_KEY = "antler_input_arrivals"
"""Private state channel: ``{"ids": [...]}``, the messages of this run's graph input."""


def server_owned_keys(specs: Iterable[Any]) -> dict[str, list[str]]:
    """Every server-owned key, sorted, with who declares it (`CORE` and plugin names).

    `specs` are plugin specs (anything with ``name`` and ``server_owned_keys``).
    """
    owners: dict[str, list[str]] = {key: [CORE] for key in CORE_SERVER_OWNED_KEYS}
    for spec in specs:
        for key in getattr(spec, "server_owned_keys", None) or ():
            owners.setdefault(key, []).append(spec.name)
    return dict(sorted(owners.items()))


def strip_server_owned(message: Any, keys: Collection[str]) -> tuple[Any, list[str]]:
    """`message` without the `keys` in its ``additional_kwargs``, and the keys removed.

    The message itself is returned (not a copy) when it carries none of them.
    Pass `keys` as a set: the message's few entries are looked up in it.
    """
    kwargs = getattr(message, "additional_kwargs", None)
    if type(kwargs) is not dict and not isinstance(kwargs, Mapping):  # dict: no ABC check
        return message, []
    found = [key for key in kwargs if key in keys]
    if not found:
        return message, []
    kept = {key: value for key, value in kwargs.items() if key not in found}
    return message.model_copy(update={"additional_kwargs": kept}), found
