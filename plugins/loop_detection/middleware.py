"""Loop detection: warn a model that repeats its tool calls, then stop it.

A model stuck in a loop asks for the same thing again and again (the same file
read, the same search) until the recursion limit ends the run with an error.
This middleware counts what the model asks for and intervenes in two steps.

Hooks:

* `after_model` counts the response just produced, in two layers. The first
  hashes the response's set of tool calls, independent of their order and
  keyed on the arguments that identify the work (`path`, `url`, `query`,
  `command`, `pattern`, `glob`, `cmd`; `read_file` line ranges in buckets of
  200 lines, either direction; every argument of `write_file` and
  `str_replace`, and of any call that has none of those), and counts
  identical sets among the last `window_size` responses. The second counts
  calls per tool name among the most recent calls, however the arguments
  vary. At a warning threshold it queues a hint, once per set (again once
  the set has left the window) and once per tool; at a hard limit it removes
  every tool call from the response (same id, raw provider copies included),
  appends a visible `[FORCED STOP]` note and records the stop reason
  `loop_capped`. A hard limit of the first layer explains the stop when both
  layers reach one.
* `wrap_model_call` appends the queued hints to the next model request as one
  hidden `HumanMessage` named `loop_warning`. The hint rides that request only
  and is never written to the conversation, so it cannot land between a tool
  call and its result. It is dropped from the queue only after the model
  answered: a call that fails and is retried by an outer wrapper still
  carries it.
* `before_agent` drops hints left by other runs of the thread; `after_agent`
  drops the run's own.

The counts live in the thread's state (a private channel), not in the
process: they carry over to the thread's later runs (a loop is a loop whatever
the turn), hold across processes, and counting the same response again (a
graph node re-run after a failure) changes nothing.

Where it sits: with the guards, after `subagent_limit` and before
`@guards_end`, position 28 (docs/chain.md#loop_detection). `after_model` hooks run in reverse
chain order, so it judges the response after the tail (`safety_finish_reason`
removes calls from a filtered reply first) and before `subagent_limit` and
the plugins placed before it, which see what is actually dispatched. As a
model wrapper it is inside the error handling and outside the tail's wrappers.

Configuration (`loop_detection:`): `enabled` (on by default), `warn_threshold`
(3) and `hard_limit` (5) identical sets within `window_size` (20) responses;
`tool_freq_warn` (30) and `tool_freq_hard_limit` (50) calls of one tool;
`tool_freq_overrides` per tool.

Example::

    loop_detection:
      warn_threshold: 2
      hard_limit: 4
      tool_freq_overrides:
        bash: {warn: 60, hard_limit: 100}
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage

from antler.plugin_api import (
    FILE_WRITE_TOOLS,
    BuildContext,
    PendingQueue,
    StopReasonState,
    jsonsource,
    record_stop_reason,
    run_key_of,
    strip_tool_calls,
)

from .config import LoopDetectionConfig

__all__ = [
    "STATE_KEY",
    "WARNING_NAME",
    "LoopDetectionMiddleware",
    "LoopDetectionState",
    "LoopWindow",
    "build",
    "call_set_hash",
    "call_signature",
]

logger = logging.getLogger(__name__)

STATE_KEY = "loop_detection"
"""State channel holding the thread's recent tool-call sets and tool names."""

WARNING_NAME = "loop_warning"
"""`name` of the hidden hint message added to a model request."""

SALIENT_ARGS = ("path", "url", "query", "command", "pattern", "glob", "cmd")
"""Arguments that identify what a call works on; other arguments do not make it new."""

FULL_ARGS_TOOLS = frozenset(FILE_WRITE_TOOLS)
"""Tools whose every argument matters: writing other content is other work."""

LINE_BUCKET = 200
"""`read_file` ranges within the same 200-line buckets count as the same read."""

MAX_PENDING = 4
"""Hints kept per run; older ones are dropped."""


class LoopWindow(TypedDict):
    """What the thread's recent responses asked for."""

    sets: list[str]
    """Hashes of the last `window_size` tool-calling responses, oldest first."""
    tools: list[str]
    """Names of the most recent tool calls, oldest first."""
    warned_sets: list[str]
    warned_tools: list[str]
    counted: str | None
    """Id of the last response counted, so counting it again changes nothing."""


class LoopDetectionState(StopReasonState):
    """State added by loop detection: the thread's window, private to the graph."""

    loop_detection: NotRequired[Annotated[LoopWindow | None, PrivateStateAttr]]


# -- what makes two calls the same -------------------------------------------------------


def call_signature(call: Mapping[str, Any]) -> str:
    """A canonical text of one call: its name and the arguments that identify its work."""
    name = str(call.get("name") or "")
    args: Any = call.get("args")
    if isinstance(args, str):
        with contextlib.suppress(ValueError):
            args = jsonsource.loads(args)
    if type(args) is not dict and not isinstance(args, Mapping):
        return f"{name}:{_canonical(args)}"
    key: dict[str, Any] = {}
    if name not in FULL_ARGS_TOOLS:
        key = {arg: args[arg] for arg in SALIENT_ARGS if arg in args}
        if name == "read_file" and key:
            key["lines"] = _line_buckets(args.get("start_line"), args.get("end_line"))
    return f"{name}:{_canonical(key or dict(args))}"


def call_set_hash(calls: Sequence[Mapping[str, Any]]) -> str:
    """The hash of a response's calls: equal for the same calls in any order."""
    signatures = sorted(call_signature(call) for call in calls)
    return hashlib.sha256("\n".join(signatures).encode()).hexdigest()[:16]


_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=repr)
"""`json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)`, its encoder made once."""


def _canonical(value: Any) -> str:
    return _CANONICAL.encode(value)


def _line_buckets(start: Any, end: Any) -> list[int | None]:
    bounds = [value if isinstance(value, int) and not isinstance(value, bool) else None
              for value in (start, end)]
    if None not in bounds:
        bounds.sort()  # a reversed range reads the same lines
    return [None if value is None else max(value - 1, 0) // LINE_BUCKET for value in bounds]


# -- the middleware --------------------------------------------------------------------------


def _describe(calls: Sequence[Mapping[str, Any]]) -> str:
    names = sorted({str(call.get("name") or "?") for call in calls})
    return ", ".join(f"`{name}`" for name in names)


class LoopDetectionMiddleware(AgentMiddleware[LoopDetectionState, Any, Any]):
    """Warns about repeated tool calls in the next request, then strips them and stops."""

    state_schema = LoopDetectionState

    def __init__(self, config: LoopDetectionConfig | None = None) -> None:
        super().__init__()
        self.config = config or LoopDetectionConfig()
        self._tool_window: tuple[Any, int] = (None, 0)  # (config, its tool_window)
        self.pending: PendingQueue[str] = PendingQueue(max_items=MAX_PENDING)

    # -- run bookkeeping

    def before_agent(self, state: Any, runtime: Any) -> None:
        """Drop hints that other runs of this thread left behind."""
        self._forget_other_runs(runtime)

    async def abefore_agent(self, state: Any, runtime: Any) -> None:
        """Async form of `before_agent` (in-memory bookkeeping only)."""
        self._forget_other_runs(runtime)

    def after_agent(self, state: Any, runtime: Any) -> None:
        """Drop this run's undelivered hints."""
        self._forget_this_run(runtime)

    async def aafter_agent(self, state: Any, runtime: Any) -> None:
        """Async form of `after_agent` (in-memory bookkeeping only)."""
        self._forget_this_run(runtime)

    # With no hint pending in any run (the usual case) there is nothing to drop.
    def _forget_other_runs(self, runtime: Any) -> None:
        if self.pending:
            thread, run = run_key_of(runtime)
            self.pending.discard_thread(thread, keep_run=run)

    def _forget_this_run(self, runtime: Any) -> None:
        if self.pending:
            self.pending.clear(run_key_of(runtime))

    # -- detection

    # The sync and async hooks share one implementation: the work is pure state
    # inspection, with no I/O to await.

    def after_model(self, state: LoopDetectionState, runtime: Any) -> dict[str, Any] | None:
        """Count the new response; queue a hint or strip its calls when a threshold is hit."""
        return self.inspect(state, runtime)

    async def aafter_model(self, state: LoopDetectionState,
                           runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model` (pure state inspection, no I/O)."""
        return self.inspect(state, runtime)

    def inspect(self, state: Mapping[str, Any], runtime: Any) -> dict[str, Any] | None:
        """The `after_model` update: the new window, and the stripped reply on a stop."""
        messages = state.get("messages") or []
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        message = messages[-1]
        calls = list(message.tool_calls)
        if not calls:
            return None
        window = _window(state.get(STATE_KEY))
        if message.id is not None and window["counted"] == message.id:
            return None

        config = self.config
        digest = call_set_hash(calls)
        sets = [*window["sets"], digest][-config.window_size:]
        tools = [*window["tools"], *(str(c.get("name") or "") for c in calls)]
        tools = tools[-self._tool_window_of(config):]
        repeats = sets.count(digest)
        names = sorted({str(c.get("name") or "") for c in calls})
        counts = {name: tools.count(name) for name in names}
        new_window: LoopWindow = {
            "sets": sets, "tools": tools, "counted": message.id,
            # A set that left the window, or a tool whose count fell below its
            # warning threshold, may earn a warning again.
            "warned_sets": [h for h in window["warned_sets"] if h in sets],
            "warned_tools": [t for t in window["warned_tools"]
                             if tools.count(t) >= config.tool_limits(t)[0]],
        }
        update: dict[str, Any] = {STATE_KEY: new_window}

        over = [name for name in names if counts[name] >= config.tool_limits(name)[1]]
        if repeats >= config.hard_limit or over:
            if repeats >= config.hard_limit:
                detail = f"{_describe(calls)} repeated {repeats} times"
            else:
                detail = ", ".join(f"`{name}` called {counts[name]} times" for name in over)
            note = (f"[FORCED STOP] {detail}: the tool calls were removed and no further "
                    "tools run in this turn. Answering with what was found so far.")
            logger.info("loop detection: stopping a loop (%s)", detail)
            update["messages"] = [strip_tool_calls(message, None, note)]
            update.update(record_stop_reason("loop_capped", runtime, detail=detail))
            return update

        if repeats >= config.warn_threshold and digest not in new_window["warned_sets"]:
            new_window["warned_sets"].append(digest)
            self.pending.add(run_key_of(runtime), (
                f"[LOOP DETECTED] You have made the same tool calls ({_describe(calls)}) "
                f"{repeats} times. They will not give a different result. Use what you have "
                "learned, try a different approach, or give your final answer now; at "
                f"{config.hard_limit} repetitions the calls are stopped."))
        for name in names:
            warn, hard = config.tool_limits(name)
            if counts[name] >= warn and name not in new_window["warned_tools"]:
                new_window["warned_tools"].append(name)
                self.pending.add(run_key_of(runtime), (
                    f"[LOOP DETECTED] You have called `{name}` {counts[name]} times recently. "
                    f"Make sure each call makes progress; at {hard} calls the tool is "
                    "stopped."))
        return update

    def _tool_window_of(self, config: LoopDetectionConfig) -> int:
        """`config.tool_window`, computed once per config object."""
        kept, window = self._tool_window
        if kept is not config:
            window = config.tool_window
            self._tool_window = (config, window)
        return window

    # -- the hint in the next request

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Append the pending hints to this request; drop them once the model answered."""
        return self.pending.deliver(request, handler, name=WARNING_NAME, source=STATE_KEY)

    async def awrap_model_call(self, request: Any,
                               handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """Async form of `wrap_model_call`."""
        return await self.pending.adeliver(request, handler, name=WARNING_NAME,
                                           source=STATE_KEY)


def _window(value: Any) -> LoopWindow:
    """The stored window, or an empty one (a missing or malformed value starts afresh)."""
    value = value if type(value) is dict or isinstance(value, Mapping) else {}

    def strings(name: str) -> list[str]:
        items = value.get(name)
        if type(items) is not list and not isinstance(items, list):
            return []
        # Stored windows hold strings only: a copy, without a str() per item.
        return items.copy() if all(type(item) is str for item in items) \
            else [str(item) for item in items]

    counted = value.get("counted")
    return {"sets": strings("sets"), "tools": strings("tools"),
            "warned_sets": strings("warned_sets"), "warned_tools": strings("warned_tools"),
            "counted": counted if isinstance(counted, str) else None}


def build(ctx: BuildContext) -> LoopDetectionMiddleware:
    """Factory named in the manifest: thresholds from the `loop_detection:` section."""
    config = ctx.plugin_config(LoopDetectionConfig)
    return LoopDetectionMiddleware(config)
