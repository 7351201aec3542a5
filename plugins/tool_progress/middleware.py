"""ToolProgressMiddleware: a tool that keeps failing or repeating itself is warned, then stopped.

Hooks
    ``wrap_tool_call`` / ``awrap_tool_call``: each tool's results in a run
    drive a small state machine, ACTIVE -> WARNED -> BLOCKED, fed by three
    kinds of problem read from the result's ``antler_tool_meta``:

    * *errors* (status ``error`` or ``partial_success``);
    * *refusals* (``error_type`` ``denied`` / ``blocked``) by a gate *inner*
      of this layer (skill_tool_policy, deferred_tool_filter): the call
      reached this wrapper and was refused further in;
    * *repeats*: a success whose words (3+ letters, first 8,192 characters)
      have a Jaccard similarity of at least ``jaccard_similarity_threshold``
      with one of the tool's last three successes (both with at least
      ``min_word_count_for_similarity`` distinct words).

    ``stagnation_threshold`` problems in a row move the tool to WARNED and
    queue a hint. From there, a problem the model can recover from (a
    repeat, a recoverable error) queues the hint again; refusals and errors
    it cannot recover from count towards ``warn_escalation_count``, after
    which the tool is BLOCKED. An error whose next action is ``stop`` (auth,
    config, internal) blocks at once. A good result brings the tool back to
    ACTIVE, except from BLOCKED, which lasts the run: a blocked tool's calls
    are answered with a ``[TOOL_BLOCKED]`` error result stamped as a refusal
    (``blocked``, recoverable, next action ``summarize``) without running.
    A call a gate *outer* of this layer refused (authorization, guardrail,
    sandbox_audit, read_before_write) never reaches it and consumes no slot,
    as docs/chain.md#read_before_write orders it: a write read_before_write refused does not count
    against ``write_file``, so the model that then reads and writes is not
    blocked. `Command` results (control flow, such as the sandbox recording
    its id) are not assessed; a result without metadata passes with a warning in the
    log (tool_error_handling stamps every result, so this plugin must be
    outer of it).

    ``wrap_model_call`` / ``awrap_model_call``: the run's pending hints go
    at the end of the next model request as one `HumanMessage` named
    ``progress_hint`` and marked hidden, in the request only. They are
    removed only once the model call returned (`PendingQueue`), so a call
    that fails and is retried by an outer wrapper still carries them.

    State is kept per (thread, run): each run starts every tool ACTIVE, and
    only the ``max_tracked_threads`` latest runs are kept (at most three
    pending hints each), so memory is bounded on a long-lived server.

Where it sits and why
    Position 12 (docs/chain.md#tool_progress): ``outer_of: tool_error_handling``, whose stamps
    it reads (an exception arrives as a stamped error result), and inner of
    read_before_write, sandbox_audit and the authorization/guardrail gates,
    so a gate decides before a blocked tool is refused here, and a call a
    gate refused never counts here.

Configuration
    ``tool_progress:`` (`ToolProgressConfig`): ``enabled`` (off by default),
    ``stagnation_threshold`` 3, ``warn_escalation_count`` 2,
    ``inject_assessment`` true, ``jaccard_similarity_threshold`` 0.8,
    ``min_word_count_for_similarity`` 10, ``max_tracked_threads`` 100,
    ``exempt_tools`` [ask_clarification, write_todos, present_files, task].

Example
    After three failed ``search`` calls the next request ends with::

        [PROGRESS HINT] Tool 'search' is not making progress: it keeps failing
        (last error: transient). ...
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from antler.plugin_api import (
    TOOL_META_KEY,
    BuildContext,
    PendingQueue,
    RunKey,
    RunStore,
    ToolMeta,
    acall_then_commit,
    call_then_commit,
    hidden_marker,
    message_text,
    refusal,
    run_key_of,
    tool_meta,
)

from .config import ToolProgressConfig

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["HINT_NAME", "SOURCE", "ToolProgressMiddleware", "ToolState", "build"]

logger = logging.getLogger(__name__)

SOURCE = "tool_progress"
HINT_NAME = "progress_hint"
MAX_HINTS_PER_RUN = 3
_WORDS_FROM = 8192
_WORD = re.compile(r"\w{3,}")

Phase = Literal["active", "warned", "blocked"]
Result = ToolMessage | Command[Any]


@dataclass
class ToolState:
    """One tool's progress in one run."""

    phase: Phase = "active"
    problems: int = 0
    """Problems in a row."""
    escalations: int = 0
    """Problems the model cannot recover from, since the warning."""
    reason: str = ""
    recent: deque[frozenset[str]] = field(default_factory=lambda: deque(maxlen=3))


@dataclass
class _Run:
    """What one run knows: its tools' states and the tool results already assessed."""

    tools: dict[str, ToolState] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Problem:
    kind: Literal["error", "refusal", "repeat"]
    escalates: bool
    blocks_now: bool
    detail: str


class ToolProgressMiddleware(AgentMiddleware):
    """Warns the model about, then blocks, a tool that makes no progress within a run."""

    def __init__(self, config: ToolProgressConfig | None = None) -> None:
        super().__init__()
        self.config = config or ToolProgressConfig()
        self.exempt = frozenset(self.config.exempt_tools)
        self._runs: RunStore[_Run] = RunStore(self.config.max_tracked_threads)
        self._hints: PendingQueue[str] = PendingQueue(self.config.max_tracked_threads,
                                                      MAX_HINTS_PER_RUN)
        self._lock = threading.Lock()
        self._unstamped_warned: set[str] = set()

    # -- tool calls --------------------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], Result]) -> Result:
        key, tool = self._subject(request)
        if key is None:
            return handler(request)
        blocked = self._blocked_answer(key, tool, request)
        if blocked is not None:
            return blocked
        result = handler(request)
        self._assess(key, tool, result)
        return result

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[Result]]
                              ) -> Result:
        key, tool = self._subject(request)
        if key is None:
            return await handler(request)
        blocked = self._blocked_answer(key, tool, request)
        if blocked is not None:
            return blocked
        result = await handler(request)
        self._assess(key, tool, result)
        return result

    def _subject(self, request: ToolCallRequest) -> tuple[RunKey | None, str]:
        tool = str(request.tool_call.get("name") or "")
        if tool in self.exempt or request.runtime is None:
            return None, tool
        key = run_key_of(request.runtime)
        return (None if key == (None, None) else key), tool

    def state(self, key: RunKey, tool: str) -> ToolState | None:
        """The tool's state in the run, without creating one or refreshing the run's age."""
        run = self._runs.get(key)
        return run.tools.get(tool) if run else None

    def _blocked_answer(self, key: RunKey, tool: str,
                        request: ToolCallRequest) -> ToolMessage | None:
        state = self.state(key, tool)
        if state is None or state.phase != "blocked":
            return None
        return ToolMessage(
            content=f"[TOOL_BLOCKED] {state.reason} Do not call '{tool}' again in this run: "
                    "use another tool, or answer with what you already know.",
            tool_call_id=str(request.tool_call.get("id") or ""), name=tool, status="error",
            additional_kwargs={TOOL_META_KEY: refusal(
                "blocked", SOURCE, next_action="summarize", reason="blocked_by_progress_guard")},
        )

    def _assess(self, key: RunKey, tool: str, result: Any) -> None:
        if not isinstance(result, ToolMessage):
            return  # a Command is control flow, not a result to judge
        meta = tool_meta(result)
        if meta is None:
            if tool not in self._unstamped_warned:
                self._unstamped_warned.add(tool)
                logger.warning("tool_progress: the result of %r has no %s; is tool_progress "
                               "outer of tool_error_handling?", tool, TOOL_META_KEY)
            return
        with self._lock:
            run = self._runs.setdefault(key, _Run)
            if result.tool_call_id in run.seen:
                return
            run.seen.add(result.tool_call_id)
            state = run.tools.setdefault(tool, ToolState())
            problem = self._problem(state, meta, result)
            hint = self._advance(tool, state, problem)
        if hint is not None and self.config.inject_assessment:
            self._hints.add(key, hint)

    def _problem(self, state: ToolState, meta: ToolMeta, result: ToolMessage) -> _Problem | None:
        if meta.is_refusal:
            return _Problem("refusal", True, False, f"its calls are refused ({meta.error_type})")
        if meta.is_problem:
            cannot_recover = not meta.recoverable_by_model
            return _Problem("error", cannot_recover,
                            cannot_recover and meta.recommended_next_action == "stop",
                            f"it keeps failing (last error: {meta.error_type or meta.status})")
        words = frozenset(_WORD.findall(message_text(result)[:_WORDS_FROM].lower()))
        repeat = self._repeats(words, state.recent)
        state.recent.append(words)
        if repeat:
            return _Problem("repeat", False, False, "it keeps returning nearly the same result")
        return None

    def _repeats(self, words: frozenset[str], recent: deque[frozenset[str]]) -> bool:
        least = self.config.min_word_count_for_similarity
        if len(words) < least:
            return False
        threshold = self.config.jaccard_similarity_threshold
        return any(len(prev) >= least and len(words & prev) / len(words | prev) >= threshold
                   for prev in recent)

    def _advance(self, tool: str, state: ToolState, problem: _Problem | None) -> str | None:
        """Move `state` on after one result; the hint to queue, if any."""
        if state.phase == "blocked":
            return None  # lasts the run, whatever parallel calls still report
        if problem is None:
            state.phase, state.problems, state.escalations = "active", 0, 0
            return None
        state.problems += 1
        if problem.blocks_now:
            return self._block(tool, state, problem)
        if state.phase == "active":
            if state.problems < self.config.stagnation_threshold:
                return None
            state.phase = "warned"
            return self._hint(tool, problem)
        if problem.escalates:
            state.escalations += 1
            if state.escalations >= self.config.warn_escalation_count:
                return self._block(tool, state, problem)
        return self._hint(tool, problem)

    def _block(self, tool: str, state: ToolState, problem: _Problem) -> str:
        state.phase = "blocked"
        state.reason = f"Tool '{tool}' is blocked for the rest of this run: {problem.detail}."
        logger.info("tool_progress blocked %r: %s", tool, problem.detail)
        return (f"[PROGRESS HINT] {state.reason} Its calls will be refused; continue with "
                "other tools or answer with what you have.")

    @staticmethod
    def _hint(tool: str, problem: _Problem) -> str:
        advice = {
            "error": "Read the error, change the arguments or use another tool; do not "
                     "repeat the same call.",
            "refusal": "The call is not allowed; calling it again will not change that. Use "
                       "another tool or ask the user.",
            "repeat": "Calling it again will not tell you anything new; use what you have or "
                      "change the approach.",
        }[problem.kind]
        return f"[PROGRESS HINT] Tool '{tool}' is not making progress: {problem.detail}. {advice}"

    # -- model calls -------------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        key, hints = self._pending(request)
        if not hints:
            return handler(request)
        return call_then_commit(handler, self._with_hints(request, hints),
                                lambda: self._hints.commit(key, hints))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
                               ) -> ModelResponse:
        key, hints = self._pending(request)
        if not hints:
            return await handler(request)
        return await acall_then_commit(handler, self._with_hints(request, hints),
                                       lambda: self._hints.commit(key, hints))

    def _pending(self, request: ModelRequest) -> tuple[RunKey, tuple[str, ...]]:
        key = run_key_of(request.runtime)
        if key == (None, None):
            return key, ()
        return key, self._hints.peek(key)

    @staticmethod
    def _with_hints(request: ModelRequest, hints: tuple[str, ...]) -> ModelRequest:
        message = HumanMessage(content="\n\n".join(hints), name=HINT_NAME,
                               additional_kwargs=hidden_marker(SOURCE))
        return request.override(messages=[*request.messages, message])


def build(ctx: BuildContext) -> ToolProgressMiddleware:
    """Factory named in the manifest."""
    config = ctx.plugin_config(ToolProgressConfig)
    return ToolProgressMiddleware(config)
