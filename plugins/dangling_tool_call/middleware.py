"""DanglingToolCallMiddleware: no tool call reaches the model without a result.

A run can stop between the model asking for a tool and the tool answering: the
user pressed stop, the process restarted, the tool call timed out. The
checkpoint then holds an `AIMessage` whose tool call has no `ToolMessage`, and
every provider rejects the next request built from that history. This
middleware repairs the *request* (never the checkpointed state): right after
each such `AIMessage`, after whatever results it does have, it inserts an
error `ToolMessage` saying the call was interrupted.

It also makes malformed tool calls acceptable to strict (OpenAI-compatible)
providers, again in the request copy only: names outside ``[A-Za-z0-9_-]``
(or empty) are rewritten, arguments that are not a JSON object are wrapped in
one, a missing id is filled in, and calls LangChain could not parse
(``invalid_tool_calls``) become ordinary calls answered by an error result.
The provider's raw payload in ``additional_kwargs["tool_calls"]`` is left as
it was, so nothing the provider said is lost.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage

from antler.plugin_api import BuildContext, HistoryFold, MessageMemo, jsonsource, thread_id_of
from antler.plugins._lib.requestcopy import overridden

__all__ = [
    "INTERRUPTED_PLACEHOLDER",
    "MALFORMED_PLACEHOLDER",
    "DanglingToolCallMiddleware",
    "build",
    "repair_messages",
    "sanitize_tool_name",
]

logger = logging.getLogger(__name__)

INTERRUPTED_PLACEHOLDER = "[Tool call was interrupted and did not return a result.]"
MALFORMED_PLACEHOLDER = "[Tool call was malformed and was not executed.]"
FALLBACK_TOOL_NAME = "unknown"
"""The name of a call that has none, and of its placeholder result."""
MISSING_ID_PREFIX = "antler_missing_id_"
MAX_TOOL_NAME = 64  # OpenAI's limit, the strictest common one

_VALID_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_TOOL_NAME}}}")
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def sanitize_tool_name(name: Any) -> str:
    """A tool name strict providers accept: ``[A-Za-z0-9_-]{1,64}``."""
    if isinstance(name, str) and _VALID_NAME.fullmatch(name):
        return name
    if not isinstance(name, str) or not name.strip():
        return FALLBACK_TOOL_NAME
    return _INVALID_NAME_CHARS.sub("_", name.strip())[:MAX_TOOL_NAME]


def _as_args(args: Any) -> dict[str, Any]:
    """Tool-call arguments as a JSON object, keeping whatever the model sent."""
    if isinstance(args, dict):
        return args
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            parsed = jsonsource.loads(args)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
        return {"raw_arguments": args}
    return {"raw_arguments": json.dumps(args, default=str)}


def _fixed_calls(message: AIMessage, position: int,
                 ) -> tuple[list[dict[str, Any]], bool, list[str]]:
    """The message's calls (parsable, then unparsable) made well-formed, whether any
    changed, and the ids made up for calls that had none."""
    calls: list[dict[str, Any]] = []
    made_up: list[str] = []
    changed = bool(message.invalid_tool_calls)
    for index, raw in enumerate([*message.tool_calls, *message.invalid_tool_calls]):
        call: dict[str, Any] = raw if isinstance(raw, dict) else {}
        name = sanitize_tool_name(call.get("name"))
        args = _as_args(call.get("args"))
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            # Without an id no result can be paired with the call; make one up
            # that is stable for this position in the history.
            call_id = f"{MISSING_ID_PREFIX}{position}_{index}"
            made_up.append(call_id)
        changed = changed or call is not raw or (name, args, call_id) != (
            call.get("name"), call.get("args"), call.get("id"))
        calls.append({"name": name, "args": args, "id": call_id, "type": "tool_call"})
    return calls, changed, made_up


def _placeholder(call_id: str, name: str, text: str) -> ToolMessage:
    return ToolMessage(content=text, status="error", tool_call_id=call_id, name=name)


class Reuse:
    """What a repair computes that stays the same from one model call of a thread to the next.

    Every request of a thread with an interrupted call is repaired again: the
    check of a message whose calls are well-formed (kept per message while it is
    unchanged) and the placeholder results (kept per call) are reused, not rebuilt.
    """

    LIMIT = 4096
    """Placeholders kept before the store starts over."""

    def __init__(self) -> None:
        self._calls: MessageMemo[tuple[list[dict[str, Any]], bool, list[str]]] = MessageMemo(
            lambda message: _fixed_calls(message, 0))
        self._placeholders: dict[tuple[str, str, str], ToolMessage] = {}

    def fixed_calls(self, message: AIMessage, position: int,
                    ) -> tuple[list[dict[str, Any]], bool, list[str]]:
        found = self._calls(message)
        # Only a message whose calls needed nothing is reused: made-up ids name the
        # message's position, and fixed calls go out in a copy of the message.
        return _fixed_calls(message, position) if found[1] or found[2] else found

    def placeholder(self, call_id: str, name: str, text: str) -> ToolMessage:
        key = (call_id, name, text)
        made = self._placeholders.get(key)
        if made is None:
            if len(self._placeholders) >= self.LIMIT:
                self._placeholders.clear()
            made = self._placeholders[key] = _placeholder(call_id, name, text)
        return made


Scan = tuple[bool, frozenset[str]]
"""Where a well-formedness scan stands: (a problem was found, the calls still open)."""
CLEAN: Scan = (False, frozenset())


def _scan(before: Scan, messages: Sequence[AnyMessage], done: int = 0) -> Scan:
    """`before` carried over `messages` from position `done` on: one look at each
    message, stopping at a problem.

    A result that does not answer the message before it (out of place, without
    an id, or belonging to no call), a call left without a result, or a call
    that is not well-formed is a problem, which sends the history to the rebuild.
    """
    failed, still_open = before
    if failed:
        return before
    open_ids = set(still_open)
    for message in messages[done:]:
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in open_ids:
                return True, frozenset()
            open_ids.discard(message.tool_call_id)
            continue
        if open_ids:
            return True, frozenset()  # a call left without a result
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            if message.invalid_tool_calls:
                return True, frozenset()
            for call in message.tool_calls:
                name, call_id = call.get("name"), call.get("id")
                if not (isinstance(call_id, str) and call_id and isinstance(name, str)
                        and _VALID_NAME.fullmatch(name) and isinstance(call.get("args"), dict)):
                    return True, frozenset()
                open_ids.add(call_id)
    return False, frozenset(open_ids)


def repair_messages(messages: Sequence[AnyMessage], scan: Scan | None = None, *,
                    reuse: Reuse | None = None,
                    placed: _Placed | None = None) -> list[AnyMessage] | None:
    """The messages with every tool call answered right after it, or None when all are.

    A well-formed history is recognised in one pass and left alone (None). One
    whose only problem is calls without results, each result right after its
    call (a run stopped while its tools ran), gets its placeholders in one more
    pass (`_answered_in_place`). Otherwise the request copy is rebuilt in linear
    passes over one copy of the list (`_rebuild`): each
    `AIMessage` with calls gets well-formed calls, then its results in history
    order (moved up when they arrived later, for example after the next user
    message), then a placeholder for each call that has none. A result with an
    empty id is paired, in order, with the id-less calls of the message it
    follows. Results that belong to no call of the history stay where they
    are. The input is not modified. `scan` is `_scan(CLEAN, messages)` when
    the caller already knows it (the middleware keeps it per thread); `reuse`
    keeps what an earlier repair of the same messages computed; `placed` is the
    one-pass repair's state after all of `messages` (`_place`), when the caller
    keeps it per thread.
    """
    failed, still_open = _scan(CLEAN, messages) if scan is None else scan
    if not failed and not still_open:
        return None
    fixed_calls = reuse.fixed_calls if reuse is not None else _fixed_calls
    placeholder = reuse.placeholder if reuse is not None else _placeholder
    history = list(messages)  # one visit of each message; every later pass reads this copy
    answered = _answered_in_place(history, fixed_calls, placeholder) if placed is None \
        else _placed_repair(placed, len(history), placeholder)
    if answered is not _REBUILD:
        return answered
    return _rebuild(history, fixed_calls, placeholder)


_REBUILD = object()
"""What `_answered_in_place` returns for a history it cannot repair by adding placeholders."""


class _Placed(NamedTuple):
    """Where the one-pass repair stands after the first messages of a history.

    Its collections are never changed once it is made: the next step copies them.
    """

    repaired: list[AnyMessage]
    """Those messages with the placeholders of every block closed so far."""
    seen: set[str]
    """Every call id so far (an id used twice sends the history to the rebuild)."""
    block: Sequence[dict[str, Any]]
    """The calls of the message whose results follow, still open at the end."""
    unanswered: set[str]
    """The ids in `block` without a result yet."""
    rebuild: bool = False
    """The history needs the general rebuild (nothing else is set)."""


_UNPLACED = _Placed([], set(), (), set())
_REBUILT = _Placed([], set(), (), set(), rebuild=True)


def _answered_in_place(history: list[AnyMessage], fixed_calls: Callable[..., Any],
                       placeholder: Callable[[str, str, str], ToolMessage]) -> Any:
    """The repair of a history whose only problem is calls without a result, in one pass.

    The usual case (a run stopped while its tools ran): every call is
    well-formed with an id of its own, and every result follows the message that
    made its call, among that message's results. The repair then only adds a
    placeholder after each such block for each call it leaves unanswered, which
    is what `_rebuild` makes of the same history. Anything else (a result out
    of place, an orphan or a second result, an id-less or malformed call, an id
    used twice) returns `_REBUILD`.
    """
    placed = _place(_UNPLACED, history, 0, fixed_calls, placeholder)
    # This state is no one else's: its list is finished in place.
    return _placed_repair(placed, len(history), placeholder, placed.repaired)


def _place(before: _Placed, history: Sequence[AnyMessage], done: int,
           fixed_calls: Callable[..., Any],
           placeholder: Callable[[str, str, str], ToolMessage]) -> _Placed:
    """`before` (the one-pass repair after the first `done` messages) carried over the rest.

    A fold, so a caller that keeps the value for a history continues it with the
    messages added since (`_PlacedFold`); it never changes `before`.
    """
    if before.rebuild:
        return before
    repaired = list(before.repaired)
    seen = set(before.seen)
    block: Sequence[dict[str, Any]] = before.block
    unanswered = set(before.unanswered)
    for position in range(done, len(history)):
        message = history[position]
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in unanswered:
                return _REBUILT
            unanswered.discard(message.tool_call_id)
            repaired.append(message)
            continue
        if unanswered:
            repaired.extend(placeholder(call["id"], call["name"], INTERRUPTED_PLACEHOLDER)
                            for call in block if call["id"] in unanswered)
            unanswered = set()
        block = ()
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            calls, changed, made_up = fixed_calls(message, position)
            if changed or made_up:
                return _REBUILT
            for call in calls:
                if call["id"] in seen:
                    return _REBUILT
                seen.add(call["id"])
            block = calls
            unanswered = {call["id"] for call in calls}
        repaired.append(message)
    return _Placed(repaired, seen, block, unanswered)


def _placed_repair(placed: _Placed, length: int,
                   placeholder: Callable[[str, str, str], ToolMessage],
                   repaired: list[AnyMessage] | None = None) -> Any:
    """The repair of a whole history of `length` messages that `placed` stands after.

    `repaired`: `placed.repaired` itself when the caller owns the state (None: a copy,
    as a kept state is never changed).
    """
    if placed.rebuild:
        return _REBUILD
    if repaired is None:
        repaired = list(placed.repaired)
    if placed.unanswered:  # the last block's calls: nothing after them can answer them now
        repaired.extend(placeholder(call["id"], call["name"], INTERRUPTED_PLACEHOLDER)
                        for call in placed.block if call["id"] in placed.unanswered)
    return repaired if len(repaired) != length else None


KEPT_FROM = 64
"""Histories shorter than this are repaired afresh: cheaper than finding and checking
the thread's kept state (`HistoryFold`'s threshold)."""


class _PlacedFold:
    """The one-pass repair per thread, continued with the messages each call adds.

    Every model call of a thread holding an interrupted call is repaired again,
    and that pass would otherwise visit the whole history each time. The state
    after a call's history is kept with a copy of that history; the next call of
    the thread continues it when its history starts with the same messages. As
    the state holds the messages themselves (the repaired copy is made of them),
    the whole kept prefix is compared, not only its ends (`HistoryFold`'s check):
    its first and last message by identity, then every one in one list
    comparison (identity first, field by field otherwise). A reloaded history (new
    objects in a new run), a message replaced anywhere, a shorter or forked
    history, or another conversation under the key starts the pass over.
    """

    def __init__(self, advance: Callable[[_Placed, Sequence[AnyMessage], int], _Placed], *,
                 threads: int = 1024, short: int = KEPT_FROM) -> None:
        self.advance = advance
        self.threads = threads
        self.short = short
        self._kept: OrderedDict[Any, tuple[list[AnyMessage], _Placed]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, key: Any, messages: Sequence[AnyMessage]) -> _Placed:
        """The state after all of `messages`; `key` names the thread (None: nothing kept)."""
        if key is None or len(messages) < self.short or not messages:
            return self.advance(_UNPLACED, messages, 0)
        before, done = _UNPLACED, 0
        kept = self._kept.get(key)
        if kept is not None and self._continues(kept[0], messages):
            before, done = kept[1], len(kept[0])
        placed = self.advance(before, messages, done) if done < len(messages) else before
        with self._lock:
            self._kept[key] = (list(messages), placed)
            self._kept.move_to_end(key)
            if len(self._kept) > self.threads:
                self._kept.popitem(last=False)
        return placed

    @staticmethod
    def _continues(seen: list[AnyMessage], messages: Sequence[AnyMessage]) -> bool:
        n = len(seen)
        if not n or n > len(messages) or seen[0] is not messages[0] \
                or seen[-1] is not messages[n - 1]:
            return False
        prefix = messages[:n]
        return seen == (prefix if isinstance(prefix, list) else list(prefix))

    def forget(self, key: Any) -> None:
        """Drop what is kept for `key`."""
        with self._lock:
            self._kept.pop(key, None)

    def __len__(self) -> int:
        return len(self._kept)


def _rebuild(history: list[AnyMessage], fixed_calls: Callable[..., Any],
             placeholder: Callable[[str, str, str], ToolMessage]) -> list[AnyMessage] | None:
    """The general repair of `history` (`repair_messages`), in linear passes over it."""
    fixed: dict[int, tuple[list[dict[str, Any]], bool]] = {}
    renamed: dict[int, str] = {}  # position of an id-less result -> the id its call got
    tool_results: list[tuple[int, ToolMessage]] = []
    for position, message in enumerate(history):
        if isinstance(message, ToolMessage):
            tool_results.append((position, message))
        elif isinstance(message, AIMessage) and (message.tool_calls
                                                 or message.invalid_tool_calls):
            calls, changed, made_up = fixed_calls(message, position)
            fixed[position] = (calls, changed)
            missing = list(made_up)
            follower = position + 1
            while missing and follower < len(history) and \
                    isinstance(history[follower], ToolMessage):
                if not history[follower].tool_call_id:  # type: ignore[union-attr]
                    renamed[follower] = missing.pop(0)
                follower += 1
    known = {call["id"] for calls, _ in fixed.values() for call in calls}
    results: dict[str, ToolMessage] = {}
    result_order: dict[str, int] = {}  # call id -> where its result stood
    moved: set[int] = set()
    for position, message in tool_results:
        call_id = renamed.get(position, message.tool_call_id)
        if call_id not in known:
            continue  # an orphan: left where it is
        moved.add(position)  # a second result for one call is dropped: the first counts
        if call_id not in results:
            results[call_id] = (message.model_copy(update={"tool_call_id": call_id})
                                if position in renamed else message)
            result_order[call_id] = position
    repaired: list[AnyMessage] = []
    for position, message in enumerate(history):
        if position in moved:
            continue
        if position not in fixed:
            repaired.append(message)
            continue
        calls, changed = fixed[position]
        parsable = len(message.tool_calls)  # type: ignore[union-attr]
        # model_copy keeps additional_kwargs (the provider's raw tool_calls) untouched.
        repaired.append(message.model_copy(update={"tool_calls": calls,
                                                   "invalid_tool_calls": []})
                        if changed else message)
        answered = [c["id"] for c in calls if c["id"] in results]
        if len(answered) > 1:
            answered.sort(key=result_order.__getitem__)
        repaired.extend(results[call_id] for call_id in answered)
        repaired.extend(
            placeholder(call["id"], call["name"], INTERRUPTED_PLACEHOLDER if index < parsable
                        else MALFORMED_PLACEHOLDER)
            for index, call in enumerate(calls) if call["id"] not in results)
    if len(repaired) == len(history) and all(a is b for a, b in zip(repaired, history,
                                                                    strict=True)):
        return None  # only orphan results, which are left alone
    return repaired


class DanglingToolCallMiddleware(AgentMiddleware[AgentState]):
    """Answers interrupted tool calls and fixes malformed ones in the model-bound request.

    Hooks:

    ``wrap_model_call`` / ``awrap_model_call``
        Before each model call, runs `repair_messages` over the request's
        messages. When something needed repair, the model gets a copy of the
        request with the repaired messages; otherwise the very same request
        object passes through. The graph state, and so the checkpoint, is never
        changed: the history keeps exactly what happened.

    Why a wrap hook and not ``before_model``: a ``before_model`` update goes
    through the ``add_messages`` reducer, which can only append or replace, so
    a placeholder could not be put where it belongs, right after the
    `AIMessage` that made the call. Why here: after uploads, so it sees the
    messages as rewritten for this run, and before summarization, which must
    only ever summarize a well-formed history; being early in the list also
    makes it an outer wrapper, so inner wrappers (retries, fallbacks) already
    see the repaired request.

    Cost: the scan that tells a well-formed history is kept per thread
    (`antler.plugin_api.historyfold`), so a model call scans only the
    messages added since the previous call of the thread; a history that needs
    only placeholders gets them in one pass, itself kept per thread and
    continued while the history starts with the very messages it saw
    (`_PlacedFold`: the later calls of a run look at their new messages only);
    any other repair is rebuilt in full. Both reuse the checks of unchanged
    messages and the placeholders of the calls still unanswered (`Reuse`).
    """

    def __init__(self) -> None:
        super().__init__()
        self._scans: HistoryFold[Scan] = HistoryFold(CLEAN, _scan)
        self._reuse = Reuse()
        self._placed = _PlacedFold(self._place)

    def _place(self, before: _Placed, messages: Sequence[AnyMessage], done: int) -> _Placed:
        return _place(before, messages, done, self._reuse.fixed_calls, self._reuse.placeholder)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        return handler(self._repaired(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        return await handler(self._repaired(request))

    def _repaired(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        scan = self._scans.of_request(request)
        if not scan[0] and not scan[1]:
            return request  # well-formed, every call answered: nothing to repair
        # Something to repair: on a long history the one-pass repair continues from the
        # thread's last call; a short one is repaired afresh.
        messages = request.messages
        placed = None if len(messages) < self._placed.short else self._placed(
            thread_id_of(getattr(request, "runtime", None)), messages)
        repaired = repair_messages(messages, scan, reuse=self._reuse, placed=placed)
        if repaired is None:
            return request
        logger.debug("model request: added %d placeholder result(s) and/or fixed malformed "
                     "tool calls", len(repaired) - len(request.messages))
        return overridden(request, messages=repaired)


def build(ctx: BuildContext) -> DanglingToolCallMiddleware:
    """Factory named in the manifest. Stateless; takes no config."""
    return DanglingToolCallMiddleware()
