"""System message coalescing: every request has at most one system message, and it leads.

Several providers accept a single system message, and only as the first
message; others accept more but read later ones inconsistently. Plugins that
add context with system authority (dynamic_context's date reminder, which
sits inside the history) would otherwise produce requests such providers
refuse.

Hooks: `wrap_model_call` (and `awrap_model_call`), request only. When the
request's messages hold no `SystemMessage`, the request passes unchanged (the
cached prefix stays the same). Otherwise the request's system message and
every `SystemMessage` among its messages are merged, in order and separated
by blank lines, into one system message (the first one's id; their
`additional_kwargs` merged, later ones winning), and removed from the
messages; all other messages keep their order. Of several date reminders
only the newest is kept. List content is flattened to its text. The
conversation in the state is never changed. Every model call merges much the
same parts (the prompt, a date reminder, durable context), in this thread and
in others, so a merge is kept and reused for parts of equal text and
`additional_kwargs` (the first one's id equal too): everything a merge reads.

Where it sits: the innermost model wrapper of the guards (before
`@guards_end`), so it merges the system messages every outer wrapper added;
in the subagent chain, right after subagent_date_context. Extension and tail
wrappers come later and add only hidden user-role messages.

Configuration: none (always on).

Example: a request of ``[system "You are..."]`` + ``[human, system <reminder>,
ai, human]`` reaches the model as ``[system "You are...\\n\\n<reminder>"]`` +
``[human, ai, human]``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage

from antler.plugin_api import BuildContext, HistoryFold, message_text
from antler.plugins._lib.requestcopy import overridden

__all__ = ["SystemMessageCoalescingMiddleware", "build", "coalesce", "merge", "merged_parts"]

REMINDER_FLAG = "dynamic_context_reminder"
"""The flag dynamic_context puts on a date reminder (a contract of state, not an import)."""


Positions = tuple[int, ...]
KEPT_MERGES = 256
"""Merged system messages kept for reuse before the middleware starts over."""


def system_positions(before: Positions, messages: Sequence[Any], done: int = 0) -> Positions:
    """`before` and the positions of the `SystemMessage`s in `messages` from `done` on."""
    found = tuple(i for i, m in enumerate(messages[done:] if done else messages, done)
                  if isinstance(m, SystemMessage))
    return before + found if found else before


def coalesce(system: SystemMessage | None, messages: Sequence[Any],
             positions: Positions | None = None,
             ) -> tuple[SystemMessage | None, list[Any]] | None:
    """(one system message, the other messages), or None when nothing needs merging.

    `positions` are those of the `SystemMessage`s in `messages` when the caller
    already knows them (the middleware keeps them per thread).
    """
    if positions is None:
        positions = system_positions((), messages)
    if not positions:
        return None
    return merge(merged_parts(system, messages, positions)), others(messages, positions)


def merged_parts(system: SystemMessage | None, messages: Sequence[Any],
                 positions: Positions) -> list[Any]:
    """The system messages that go into the merged one, in order (older reminders left out)."""
    inner = [messages[i] for i in positions]
    reminders = [m for m in inner if (m.additional_kwargs or {}).get(REMINDER_FLAG)]
    parts = [system, *inner] if system is not None else inner
    if len(reminders) < 2:
        return parts  # no older reminder to leave out (the usual request)
    dropped = {id(m) for m in reminders[:-1]}
    return [m for m in parts if id(m) not in dropped]


def merge(parts: Sequence[Any]) -> SystemMessage:
    """One system message of `parts`: their text joined, their `additional_kwargs` merged."""
    kwargs: dict[str, Any] = {}
    for part in parts:
        kwargs.update(part.additional_kwargs or {})
    text = "\n\n".join(t for t in (message_text(p).strip() for p in parts) if t)
    return SystemMessage(content=text, id=parts[0].id, additional_kwargs=kwargs)


def others(messages: Sequence[Any], positions: Positions) -> list[Any]:
    """`messages` without the ones at `positions`."""
    rest: list[Any] = []
    start = 0
    for position in positions:  # the slices between them: no look at each message
        rest += messages[start:position]
        start = position + 1
    rest += messages[start:]
    return rest


def merge_key(parts: Sequence[Any]) -> tuple[Any, ...] | None:
    """What a merge of `parts` is kept under: the first part's id and every part's text.

    None when a part's content is not a string (a list of blocks): such a merge
    is made afresh.
    """
    key: list[Any] = [parts[0].id]
    for part in parts:
        content = part.content
        if type(content) is not str:
            return None
        key.append(content)
    return tuple(key)


def _same_inputs(kept: Sequence[Any], parts: Sequence[Any]) -> bool:
    """Whether `merge` gives the same message for both (the key matched: compare the rest)."""
    return len(kept) == len(parts) and all(
        a is b or a.additional_kwargs == b.additional_kwargs
        for a, b in zip(kept, parts, strict=True))


class SystemMessageCoalescingMiddleware(AgentMiddleware[Any, Any]):
    """Merges every system message of a model request into one leading system message."""

    def __init__(self) -> None:
        super().__init__()
        # Where the system messages are, kept per thread: a call looks only at the
        # messages added since the thread's previous call (docs/plugins.md).
        self._positions: HistoryFold[Positions] = HistoryFold((), system_positions)
        # Recent merges by their parts' text (`merge_key`): every model call merges much
        # the same prompt and reminders, so parts equal in what a merge reads reuse it.
        self._merges: dict[tuple[Any, ...], tuple[list[Any], SystemMessage]] = {}

    # The sync and async hooks share one implementation: the merged request, with no I/O to
    # await (LangChain calls one or the other by how the agent is run).

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        return handler(self._merged(request))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
                               ) -> Any:
        return await handler(self._merged(request))

    def _merged(self, request: ModelRequest) -> ModelRequest:
        messages = request.messages
        positions = self._positions.of_request(request)
        if not positions:
            return request
        parts = merged_parts(request.system_message, messages, positions)
        key = merge_key(parts)
        kept = self._merges.get(key) if key is not None else None
        if kept is not None and _same_inputs(kept[0], parts):
            system = kept[1]
        else:
            system = merge(parts)
            if key is not None:
                if len(self._merges) >= KEPT_MERGES:
                    self._merges.clear()
                self._merges[key] = (parts, system)
        return overridden(request, system_message=system, messages=others(messages, positions))


def build(ctx: BuildContext) -> SystemMessageCoalescingMiddleware:
    """The middleware; it has no configuration."""
    return SystemMessageCoalescingMiddleware()
