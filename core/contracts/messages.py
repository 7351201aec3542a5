"""Reading and editing messages the same way in every plugin.

- *Hidden* (server-injected) messages: context a plugin adds to the
  conversation (a reminder, a summary, an image the model asked to see). They
  are not the user's words, so memory, title and sanitization skip them. A
  plugin marks what it injects with `hidden_marker(source)`; older markers
  (LangChain's summary ``lc_source``, ``hidden``, ``hide_from_ui``) are
  recognised too. Every marker is an ``additional_kwargs`` key the server owns
  (`antler.contracts.serverkeys`): the input boundary strips them from what a
  caller sends, so only the server can hide a message. A message's ``name``
  proves nothing, since a caller sets it freely: a caller's message named
  ``summary`` is the caller's.
- A user message a plugin re-adds under a new id (``<id>__user``, after
  putting context in its place) is still the user's: `reinserted_from`.
- The latest *genuine* user message and its original text
  (``additional_kwargs.original_user_content`` when the server kept one).
- Removing tool calls from an assistant reply: the structured `tool_calls`, the
  provider's raw copy (``additional_kwargs.tool_calls`` / ``function_call``),
  tool-use content blocks and ``invalid_tool_calls``, with ``finish_reason``
  set to ``stop`` once none remain, so no layer or provider sees a call that
  will never get a result.
- Reading what the provider said about how a reply ended (``finish_reason``,
  ``stop_reason``, ...): `provider_field` looks where the integrations put it.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from typing import Any

HIDDEN_KEY = "antler_hidden"
"""`additional_kwargs` key marking a message a plugin injected: ``{"source": plugin}``."""

_LEGACY_MARKERS = ("hidden", "hide_from_ui", "lc_source", "antler_view_image")
_LEGACY_MARKER_KEYS = frozenset(_LEGACY_MARKERS)
ORIGINAL_CONTENT_KEY = "original_user_content"
REINSERTED_SUFFIX = "__user"
"""Id suffix of a user message a plugin re-added after putting context in its place."""
TOOL_USE_BLOCKS = frozenset({"tool_use", "tool_call", "function_call", "server_tool_call"})


def hidden_marker(source: str) -> dict[str, Any]:
    """`additional_kwargs` entries marking a message `source` injected."""
    return {HIDDEN_KEY: {"source": source}}


def is_hidden(message: Any) -> bool:
    """Whether a plugin, not the user or the model, put `message` in the conversation.

    Decided by the server-owned markers alone, never by the message's ``name``.
    """
    kwargs = getattr(message, "additional_kwargs", None)
    if not kwargs:
        return False  # most messages carry no extra fields at all
    if kwargs.get(HIDDEN_KEY):
        return True
    if _LEGACY_MARKER_KEYS.isdisjoint(kwargs):
        return False  # one C-level pass over the (few) keys: the usual answer
    return any(kwargs.get(key) for key in _LEGACY_MARKERS)


def hidden_source(message: Any) -> str | None:
    """The plugin whose server-owned marker hides `message` (`hidden_marker`'s source), or None.

    How a plugin finds what it injected itself: a caller can copy a message's
    ``name`` or text, never its marker.
    """
    marker = (getattr(message, "additional_kwargs", None) or {}).get(HIDDEN_KEY)
    source = (marker.get("source") if type(marker) is dict or isinstance(marker, Mapping)
              else None)
    return source if isinstance(source, str) else None


def reinserted_id(message_id: str) -> str:
    """The id under which a plugin re-adds the user message `message_id`."""
    return f"{message_id}{REINSERTED_SUFFIX}"


def reinserted_from(message_id: str | None) -> str | None:
    """The id of the user message that `message_id` re-adds (None: it is no re-added copy)."""
    if message_id and message_id.endswith(REINSERTED_SUFFIX):
        return message_id[:-len(REINSERTED_SUFFIX)] or None
    return None


def message_text(message_or_content: Any) -> str:
    """The text of a message (or of its content): string content, or its text blocks joined."""
    content = getattr(message_or_content, "content", message_or_content)
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text") or ""))
    return "\n".join(parts)


def latest_user_message(messages: Sequence[Any]) -> Any | None:
    """The last `HumanMessage` that is not a hidden, server-injected one."""
    human = _human_message_class()
    for message in reversed(messages):
        if isinstance(message, human) and not is_hidden(message):
            return message
    return None


@functools.cache
def _human_message_class() -> type:
    """LangChain's `HumanMessage`, imported on first use (hooks ask on every model call)."""
    from langchain_core.messages import HumanMessage

    return HumanMessage


def user_text(message: Any) -> str:
    """What the user typed: the server-kept original when present, else the text."""
    original = (getattr(message, "additional_kwargs", None) or {}).get(ORIGINAL_CONTENT_KEY)
    return original if isinstance(original, str) else message_text(message)


def has_tool_call_intent(message: Any) -> bool:
    """Whether an assistant reply asks for any tool call, in any of the forms providers use."""
    if getattr(message, "tool_calls", None) or getattr(message, "invalid_tool_calls", None):
        return True
    kwargs = getattr(message, "additional_kwargs", None) or {}
    if kwargs.get("tool_calls") or kwargs.get("function_call"):
        return True
    content = getattr(message, "content", None)
    if isinstance(content, list) and any(isinstance(b, Mapping) and b.get("type") in
                                         TOOL_USE_BLOCKS for b in content):
        return True
    finish = (getattr(message, "response_metadata", None) or {}).get("finish_reason")
    return finish in ("tool_calls", "function_call")


def strip_tool_calls(message: Any, positions: Collection[int] | None = None,
                     note: str | None = None, *, keep_finish_reason: bool = False) -> Any:
    """A copy of the `AIMessage` without the tool calls at `positions` (None: all of them).

    Raw provider entries and tool-use blocks are matched by call id; raw entries
    without ids line up by position when the lists have the same length. `note`
    is appended to the content (a new text block for list content). When no
    call remains, ``finish_reason`` becomes ``stop``, unless `keep_finish_reason`
    (a guard reporting why the provider stopped keeps its word for it).
    """
    calls = list(getattr(message, "tool_calls", None) or [])
    drop = set(range(len(calls))) if positions is None else set(positions)
    dropped_ids = {call.get("id") for i, call in enumerate(calls) if i in drop} - {None}
    remaining = [call for i, call in enumerate(calls) if i not in drop]

    additional = dict(message.additional_kwargs)
    raw = additional.get("tool_calls")
    if isinstance(raw, list):
        aligned = len(raw) == len(calls)
        kept = [entry for i, entry in enumerate(raw)
                if not _dropped_entry(entry, i, dropped_ids, drop if aligned else set(),
                                      everything=positions is None)]
        if kept:
            additional["tool_calls"] = kept
        else:
            del additional["tool_calls"]
    if positions is None or not remaining:
        additional.pop("function_call", None)

    content: Any = message.content
    if isinstance(content, list):
        content = [block for block in content
                   if not _dropped_entry(block, -1, dropped_ids, set(),
                                         everything=positions is None, block=True)]
    metadata = dict(message.response_metadata)
    if note is not None:
        if isinstance(content, list):
            content = [*content, {"type": "text", "text": note}]
        else:
            content = f"{content}\n\n{note}" if str(content).strip() else note
    if not keep_finish_reason and not remaining and metadata.get("finish_reason") in (
            "tool_calls", "function_call", None) and (calls or note):
        metadata["finish_reason"] = "stop"
    update: dict[str, Any] = {"tool_calls": remaining, "content": content,
                              "additional_kwargs": additional, "response_metadata": metadata}
    if positions is None:
        update["invalid_tool_calls"] = []
    return message.model_copy(update=update)


def _dropped_entry(entry: Any, index: int, ids: set[Any], positions: set[int], *,
                   everything: bool, block: bool = False) -> bool:
    if not isinstance(entry, Mapping):
        return False
    if block:
        if entry.get("type") not in TOOL_USE_BLOCKS:
            return False
        return everything or (entry.get("id") or entry.get("call_id")) in ids
    if everything:
        return True
    entry_id = entry.get("id")
    return entry_id in ids if entry_id else index in positions


def provider_field(message: Any, key: str) -> Any:
    """What the provider reported under `key` (``finish_reason``, ``stop_reason``, ...).

    Integrations put it in ``response_metadata``; some older ones (and raw
    payloads passed through) in ``additional_kwargs``. None when neither has it.
    """
    for attribute in ("response_metadata", "additional_kwargs"):
        fields = getattr(message, attribute, None)
        # `type(...) is dict` first: the usual case, without the Mapping ABC check's cost.
        if (type(fields) is dict or isinstance(fields, Mapping)) \
                and fields.get(key) is not None:
            return fields[key]
    return None


def provider_text(message: Any, key: str) -> str | None:
    """`provider_field` as text: a string as given (stripped), an enum member by its name."""
    value = provider_field(message, key)
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip()
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


# -- input roles: what the input boundary and input_sanitization refuse ---------------------

_CLASS_OF_ROLE = {"human": "HumanMessage", "ai": "AIMessage", "tool": "ToolMessage",
                  "system": "SystemMessage"}


def message_role(message: Any) -> str:
    """The role of a message as `input.allow_roles` names it (``human``, ``ai``, ...)."""
    return str(getattr(message, "type", None) or type(message).__name__)


def refusal_text(position: int, message: Any, allowed: Collection[str], *,
                 served: bool = False) -> str:
    """Why message number `position` (1-based) of an input is refused, and how to allow it.

    `served`: the input came over LangGraph Server's API, where no client may
    seed history, so the text does not point at `graph.update_state`.
    """
    role = message_role(message)
    kind = type(message).__name__
    ident = f", id {message.id!r}" if getattr(message, "id", None) else ""
    allowed_text = ", ".join(sorted(allowed))
    if role in _CLASS_OF_ROLE:
        fix = (f"an operator who trusts its callers allows it with `input: {{allow_roles: "
               f"[{allowed_text}, {role}]}}`")
        if not served:
            fix += "; a server that seeds history uses `graph.update_state`"
    elif role == "remove":
        fix = "input adds messages and never deletes one" + (
            "" if served else " (a server edits history with `graph.update_state`)")
    else:
        fix = f"send it as a {' or '.join(_CLASS_OF_ROLE[r] for r in sorted(allowed))}"
    return (f"input message {position} ({kind}{ident}) has role {role!r}, which callers may "
            f"not send (allowed: {allowed_text}): {fix}")
