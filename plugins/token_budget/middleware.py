"""Token budget: one run may use so many tokens; near the cap it is warned, at it stopped.

Counting. Only usage this run adds counts: `before_agent` takes a snapshot
of every reply already in the thread ("seen"), and after each model call the
increase of every reply's usage over what was seen is added to the run's
total. A reply that grows later counts too: token_usage merges a subagent's
usage into the reply that dispatched it, so delegated work is paid for (one
model call later, because this hook runs before token_usage's). Replies
without usage count nothing. On a thread of 128 messages or more, a call
looks again only at the messages after the longest run of the very message
objects the thread's previous call counted into the ledger it finds (a grown
reply is a new object), so a model call's work does not grow with the thread.

Deciding, after each model call, on the largest of the used fractions of
`max_tokens`, `max_input_tokens` and `max_output_tokens`:

* at `warn_threshold` (once per run), the next request carries a hidden
  ``budget_warning`` message asking the model to wrap up. The warning is
  pending in state until an `after_model` hook sees the call that carried
  it succeed: a call that fails and is retried carries it again.
* at `hard_stop_threshold`, the stop reason ``token_capped`` is recorded
  whenever a reply crosses the cap, and a ``[TOKEN BUDGET EXCEEDED]`` notice is
  appended to it, as DeerFlow does. A reply that asks for tools has its tool
  calls removed first (`strip_tool_calls`: structured, raw provider and
  content-block forms), so it becomes the run's final answer; a final answer
  that itself crosses the cap keeps its text and its provider's finish reason,
  with the notice after it. An error reply (llm_error_handling's) is left
  alone: its run already records ``error_fallback``.

Hooks: `before_agent`, `wrap_model_call`, `after_model` (and async forms).

Where it sits: the lead chain, after every other built-in guard (token_usage,
subagent_limit, ...) and before `@guards_end`. `after_model` hooks run in
reverse, so the budget judges a reply before subagent_limit trims it and
before token_usage records it. Its `wrap_model_call` is inside
llm_error_handling's, so a retry re-injects the warning.

Configuration (`token_budget:`, off by default): `max_tokens` (200000),
`max_input_tokens`, `max_output_tokens`, `warn_threshold` (0.8),
`hard_stop_threshold` (1.0). `TokenBudgetConfig.for_subagent` gives a
subagent chain's defaults.

Example::

    token_budget:
      enabled: true
      max_tokens: 50000
      warn_threshold: 0.7
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse, PrivateStateAttr
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

from antler.plugin_api import (
    USAGE_FIELDS,
    BuildContext,
    StopReasonState,
    add_usage,
    has_tool_call_intent,
    hidden_marker,
    is_error_fallback,
    record_stop_reason,
    run_id_of,
    run_key_of,
    strip_tool_calls,
    usage_of,
)
from antler.plugins._lib.requestcopy import overridden

from .config import TokenBudgetConfig

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["BUDGET_KEY", "WARNING_NAME", "TokenBudgetMiddleware", "TokenBudgetState", "build"]

BUDGET_KEY = "antler_token_budget"
"""Private state key: ``{"run_id", "seen", "used", "warned", "warning_pending"}``."""

WARNING_NAME = "budget_warning"
"""Name of the hidden warning message (known to `antler.contracts.messages`)."""

_FRACTION_FIELDS = (("total_tokens", "max_tokens"), ("input_tokens", "max_input_tokens"),
                    ("output_tokens", "max_output_tokens"))


class TokenBudgetState(StopReasonState):
    """The run's budget ledger, private to the graph, and the stop-reason channel."""

    antler_token_budget: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


class TokenBudgetMiddleware(AgentMiddleware[TokenBudgetState, Any, Any]):
    """Counts the run's new token usage; warns once near the cap and stops at it."""

    state_schema = TokenBudgetState

    def __init__(self, config: TokenBudgetConfig | None = None, **settings: Any) -> None:
        """`config`, or the `TokenBudgetConfig` fields as keywords (an extension's `config:`)."""
        super().__init__()
        self.config = config or TokenBudgetConfig(**settings)
        self._counted = _Counted()

    # -- before_agent: what is already in the thread does not count ------------------------

    def before_agent(self, state: TokenBudgetState, runtime: Any) -> dict[str, Any] | None:
        """Mark the usage of every reply already in the thread as seen."""
        return self.start(state, runtime)

    async def abefore_agent(self, state: TokenBudgetState,
                            runtime: Any) -> dict[str, Any] | None:
        """Async form of `before_agent` (pure state work)."""
        return self.start(state, runtime)

    def start(self, state: Mapping[str, Any], runtime: Any) -> dict[str, Any]:
        messages = state.get("messages") or []
        thread, run_id = run_key_of(runtime)
        ledger = _fresh_ledger(run_id, messages)
        self._counted.keep(thread, ledger, messages)
        return {BUDGET_KEY: ledger}

    # -- wrap_model_call: the pending warning ---------------------------------------------

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> Any:
        """Append the pending warning to the request (state clears it after success)."""
        return handler(self.with_warning(request))

    async def awrap_model_call(
            self, request: ModelRequest[Any],
            handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]) -> Any:
        """Async form of `wrap_model_call`."""
        return await handler(self.with_warning(request))

    def with_warning(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        ledger = (request.state or {}).get(BUDGET_KEY)
        if not (isinstance(ledger, Mapping) and ledger.get("warning_pending")
                and ledger.get("run_id") == run_id_of(request.runtime)):
            return request
        return overridden(request, messages=[*request.messages, self.warning(ledger["used"])])

    def warning(self, used: Mapping[str, int]) -> HumanMessage:
        text = (f"[TOKEN BUDGET WARNING] This run has used {self.describe(used)}. Finish the "
                "task now: make only the tool calls you cannot do without, then give your "
                "final answer.")
        return HumanMessage(content=text, name=WARNING_NAME,
                            additional_kwargs=hidden_marker("token_budget"))

    # -- after_model: count and decide ----------------------------------------------------

    # The sync and async hooks share one implementation: the work is pure state
    # accounting, with no I/O to await.

    def after_model(self, state: TokenBudgetState, runtime: Any) -> dict[str, Any] | None:
        """Add the run's new usage; warn at the threshold, stop at the cap."""
        return self.judge(state, runtime)

    async def aafter_model(self, state: TokenBudgetState,
                           runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model` (pure state work)."""
        return self.judge(state, runtime)

    def judge(self, state: Mapping[str, Any], runtime: Any) -> dict[str, Any] | None:
        messages = list(state.get("messages") or [])
        thread, run_id = run_key_of(runtime)
        ledger = state.get(BUDGET_KEY)
        if not isinstance(ledger, Mapping) or ledger.get("run_id") != run_id:
            # No before_agent ran for this run (a bare graph): all but the new reply is history.
            ledger = _fresh_ledger(run_id, messages[:-1])
        seen = dict(ledger["seen"])
        used = dict(ledger["used"])
        for index in range(self._counted.since(thread, ledger, messages), len(messages)):
            message = messages[index]
            usage = usage_of(message) if isinstance(message, AIMessage) else None
            key = _key(message, index)
            if usage is None or seen.get(key) == usage:
                continue
            before = seen.get(key) or {}
            for field in USAGE_FIELDS:
                used[field] += max(usage[field] - before.get(field, 0), 0)
            seen[key] = usage
        new = {**ledger, "seen": seen, "used": used, "warning_pending": False}
        update: dict[str, Any] = {}
        fraction = self.fraction(used)
        reply = messages[-1] if messages else None
        if fraction >= self.config.hard_stop_threshold:
            if isinstance(reply, AIMessage) and not is_error_fallback(reply):
                update["messages"] = [self.capped(reply, used)]
                update.update(record_stop_reason("token_capped", runtime,
                                                 detail=self.describe(used)))
        elif fraction >= self.config.warn_threshold and not ledger.get("warned"):
            new.update(warned=True, warning_pending=True)
        if new != ledger:
            update[BUDGET_KEY] = new
        self._counted.keep(thread, update.get(BUDGET_KEY, ledger), messages)
        return update or None

    def capped(self, reply: AIMessage, used: Mapping[str, int]) -> AIMessage:
        """`reply` as the run's last word: its tool calls removed, the budget notice added."""
        if has_tool_call_intent(reply):
            return strip_tool_calls(reply, note=(
                f"[TOKEN BUDGET EXCEEDED] This run used {self.describe(used)}, so its remaining "
                "tool calls were not run. This is the final answer with what was gathered so "
                "far."))
        # Already a final answer: it stays whole, and keeps the provider's finish reason
        # (model_length_finish_reason reads it).
        return strip_tool_calls(reply, keep_finish_reason=True, note=(
            f"[TOKEN BUDGET EXCEEDED] This run used {self.describe(used)}; this answer is its "
            "last."))

    def fraction(self, used: Mapping[str, int]) -> float:
        """The largest used fraction among the configured caps."""
        fractions = [used[field] / limit for field, setting in _FRACTION_FIELDS
                     if (limit := getattr(self.config, setting))]
        return max(fractions, default=0.0)

    def describe(self, used: Mapping[str, int]) -> str:
        parts = [f"{used[field]} of {limit} {field.split('_')[0]} tokens"
                 for field, setting in _FRACTION_FIELDS
                 if (limit := getattr(self.config, setting))]
        return ", ".join(parts)


class _Counted:
    """Per thread, the messages the last `judge` counted and the ledger it left in state.

    While the state holds that very ledger, every message of the longest run of
    the very same message objects is counted in it (its usage is what `seen`
    holds; a ledger is never changed in place), so the next call need only
    look at the messages after that run. A message replaced under its id (a
    reply token_usage grew) is a new object, so counting starts again at it.
    A thread shorter than `FROM` is counted whole, which costs less than
    keeping track. A thread's next run replaces what its last run left, so a
    finished run's messages are held as long as input_sanitization's memo
    holds them. Bounded in threads and in messages held: a thread it no longer
    holds is counted from the start.
    """

    FROM = 128
    THREADS = 16
    HELD = 50_000
    """Messages referenced before the oldest threads are let go (as `MessageMemo` bounds)."""

    def __init__(self) -> None:
        self._threads: dict[str | None, tuple[Mapping[str, Any], list[Any]]] = {}
        self._held = 0

    def since(self, thread: str | None, ledger: Mapping[str, Any],
              messages: list[Any]) -> int:
        """The index from which `messages` must be counted against `ledger`."""
        kept = self._threads.get(thread)
        if kept is None or kept[0] is not ledger:
            return 0
        counted = kept[1]
        if len(counted) <= len(messages) and all(map(operator.is_, counted, messages)):
            return len(counted)  # the usual call: the same messages, and new ones after them
        same = min(len(counted), len(messages))
        return next((i for i in range(same) if counted[i] is not messages[i]), same)

    def keep(self, thread: str | None, ledger: Mapping[str, Any],
             messages: Sequence[Any]) -> None:
        """Remember that `ledger`, left in state, has counted `messages`."""
        if len(messages) < self.FROM:
            return
        threads = self._threads
        old = threads.pop(thread, None)
        threads[thread] = (ledger, list(messages))  # as they are now, whatever the list becomes
        self._held += len(messages) - (len(old[1]) if old else 0)
        if len(threads) > self.THREADS or self._held > self.HELD:
            self._trim()

    def _trim(self) -> None:
        threads = self._threads
        with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # a racing trim
            while len(threads) > 1 and (len(threads) > self.THREADS or self._held > self.HELD):
                self._held -= len(threads.pop(next(iter(threads)))[1])
        with contextlib.suppress(RuntimeError):  # changed meanwhile: the next trim counts
            self._held = sum(len(kept[1]) for kept in threads.values())


def _key(message: AnyMessage, index: int) -> str:
    return message.id or f"#{index}"


def _fresh_ledger(run_id: str | None, history: Sequence[AnyMessage]) -> dict[str, Any]:
    seen = {_key(message, index): usage for index, message in enumerate(history)
            if isinstance(message, AIMessage) and (usage := usage_of(message)) is not None}
    return {"run_id": run_id, "seen": seen, "used": add_usage(), "warned": False,
            "warning_pending": False}


def build(ctx: BuildContext) -> TokenBudgetMiddleware:
    """Factory named in the manifest.

    The lead chain reads `token_budget:`. The subagent chain reads
    `subagent_token_budget:` (the manifest's per-chain override), on by default, and
    what that section does not set comes from `TokenBudgetConfig.for_subagent`: 1M
    tokens when summarization takes part in the chain, 2M when it does not.
    """
    config = ctx.plugin_config(TokenBudgetConfig)
    if ctx.chain == "subagent":
        explicit = {name: getattr(config, name) for name in config.model_fields_set}
        explicit = {name: value for name, value in explicit.items() if value is not None}
        summarizing = any(spec.name == "summarization" for spec in ctx.chain_specs())
        config = TokenBudgetConfig.for_subagent(summarization=summarizing, **explicit)
    return TokenBudgetMiddleware(config)
