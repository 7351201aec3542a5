"""Memory: after each run, queue the conversation for debounced fact extraction.

`after_agent` keeps what the user said and what the assistant finally
answered, nothing else: tool results, assistant messages that only call tools,
and messages middlewares injected (todo reminders, summaries, hidden context)
are dropped, and the `<uploaded_files>` block the uploads plugin prepends is
cut out, since file paths are per-thread scratch, not facts about the user.
The result goes to the `memory_queue` service with the thread, the run's
server-owned user id (from the run context, never from message text) and the
agent's name. The slow part, asking a model for facts, happens later, off the
run, in the queue. The facts land in the shared store (the `store` service),
so every process and replica sees them. With `memory.queue: store` the
debounce is a record in that store and due updates are processed by the next
run's `after_agent` (see `antler.plugins._lib.memory.pending`).

Where it sits: after `title` (docs/chain.md#layer-dependencies), so the thread's title exists
and travels with the submission. `after_agent` runs once per run, after the
last model call.

A run whose input the input boundary refused (its error reply marked
``input_refused``) is not submitted, and the user messages of that input are
left out of every later submission: nothing the boundary refused becomes a
fact.

Each message is filtered once: what is kept is remembered per thread
(`antler.plugin_api.historyfold`), so a run on a long thread filters only
the messages added since the previous submission, also when each run reloads
the thread as new objects; a history that summarization shortened or
`update_state` rewrote is filtered again from its start.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from antler.plugin_api import (
    DEPLOYMENT,
    MEMORY_MODEL,
    MEMORY_QUEUE,
    MODEL,
    BuildContext,
    BuildError,
    HistoryFold,
    error_fallback_of,
    is_error_fallback,
    is_hidden,
    message_text,
    resolve_model,
    run_context,
    run_key_of,
    side_call_model,
    stop_reason_of,
)
from antler.plugins._lib.memory import create_memory_queue
from antler.plugins._lib.memory.service import shared_store

from .config import MemoryConfig

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["MemoryMiddleware", "build", "filter_messages_for_memory", "is_injected"]

logger = logging.getLogger(__name__)

_UPLOADED_FILES = re.compile(r"<uploaded_files>.*?(?:</uploaded_files>|\Z)\s*", re.DOTALL)
_BLANK_LINES = re.compile(r"\n{3,}")
INPUT_REFUSED = "input_refused"
"""The stop reason, and error type of the reply, of a run whose input was refused."""


def is_injected(message: BaseMessage) -> bool:
    """Whether a middleware, not the user or the model, put this message in the conversation.

    Hidden server messages (`antler.contracts.messages.is_hidden`) and
    error-fallback replies, which stand in for a failed model call, are not
    part of what the user and the agent said.
    """
    return is_hidden(message) or is_error_fallback(message)


def _clean_text(message: BaseMessage) -> str:
    text = message_text(message)
    # Each pattern starts with its literal: a text without it has nothing to replace.
    if "<uploaded_files>" in text:
        text = _UPLOADED_FILES.sub("", text)
    if "\n\n\n" in text:
        text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()


def filter_messages_for_memory(messages: Iterable[BaseMessage]) -> list[BaseMessage]:
    """User inputs and final assistant replies, as plain-text copies without upload blocks.

    A user message that held nothing but an `<uploaded_files>` block is
    dropped; so is an assistant message with tool calls or without text.
    """
    return _kept_messages(messages, _memory_copy)


def _memory_copy(message: BaseMessage) -> BaseMessage | None:
    """The plain-text copy of one message that memory keeps, or None when it keeps none."""
    if isinstance(message, HumanMessage):
        kind: type[BaseMessage] = HumanMessage
    elif isinstance(message, AIMessage) and not message.tool_calls:
        kind = AIMessage
    else:
        return None
    if is_injected(message):
        return None
    text = _clean_text(message)
    return kind(content=text, id=message.id) if text else None


def _kept_messages(messages: Iterable[BaseMessage],
                   copy: Callable[[BaseMessage], BaseMessage | None]) -> list[BaseMessage]:
    kept: list[BaseMessage] = []
    _keep(kept, messages, copy)
    return kept


def _kept_from(before: tuple[BaseMessage, ...], messages: Sequence[BaseMessage],
               done: int) -> tuple[BaseMessage, ...]:
    """`before` (what memory keeps of the first `done` messages) and what it keeps of the rest."""
    kept = list(before)
    _keep(kept, messages[done:], _memory_copy)
    return tuple(kept)


def _keep(kept: list[BaseMessage], messages: Iterable[BaseMessage],
          copy: Callable[[BaseMessage], BaseMessage | None]) -> None:
    """Append to `kept` what memory keeps of `messages`."""
    for message in messages:
        if _refused_input(message):
            # The refused run's user messages are the ones since the last reply.
            while kept and isinstance(kept[-1], HumanMessage):
                kept.pop()
            continue
        copied = copy(message)
        if copied is not None:
            kept.append(copied)


def _refused_input(message: BaseMessage) -> bool:
    """The error reply the input boundary gives a run whose input it refused."""
    return (error_fallback_of(message) or {}).get("error_type") == INPUT_REFUSED


class MemoryMiddleware(AgentMiddleware[Any, Any]):
    """Submits each finished run's conversation to the memory queue."""

    def __init__(self, queue: Any, *, agent_name: str | None = None) -> None:
        super().__init__()
        self.queue = queue
        self.agent_name = agent_name
        # What is kept, per thread: a run's submission carries the whole
        # conversation, but only the messages new since the last one are filtered.
        self._kept: HistoryFold[tuple[BaseMessage, ...]] = HistoryFold((), _kept_from, short=0)

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Filter the conversation and queue it; never changes the state.

        Skipped when the run has no thread id (nothing to debounce on) or when
        the filtered conversation lacks a user message or an assistant reply.
        """
        self._submit(state, runtime)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_agent`: a queue with `aadd` (the store queue, whose
        writes block) is awaited; the thread queue's `add` does not block."""
        submission = self._submission(state, runtime)
        if submission is not None:
            add = getattr(self.queue, "aadd", None)
            if add is not None:
                await add(**submission)
            else:
                self.queue.add(**submission)
        return None

    # Both forms call this helper rather than each other: a fused node's proxy
    # resets the hook methods it runs itself, so `self.<hook>` may be a no-op there.
    def _submit(self, state: Any, runtime: Any) -> None:
        submission = self._submission(state, runtime)
        if submission is not None:
            self.queue.add(**submission)

    def _submission(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        thread_id, run_id = run_key_of(runtime)  # the run's config read once for both
        if not thread_id:
            logger.debug("memory: run without a thread id; nothing queued")
            return None
        if (stop_reason_of(state, run_id) or {}).get("reason") == INPUT_REFUSED:
            logger.debug("memory: the run's input was refused; nothing queued")
            return None
        messages = list(self._kept(thread_id, state.get("messages") or []))
        if not (any(isinstance(m, HumanMessage) for m in messages)
                and any(isinstance(m, AIMessage) for m in messages)):
            return None
        return {"thread_id": thread_id, "user_id": run_context(runtime).user_id,
                "messages": messages, "agent_name": self.agent_name,
                "title": state.get("title") or None}


def build(ctx: BuildContext) -> MemoryMiddleware:
    """The middleware, on the build's `memory_queue` service (created here if absent).

    A created queue extracts with `services[MEMORY_MODEL]`, else `memory.model`,
    else the agent's model, and keeps the facts in the shared store
    (`services[STORE]`). It is registered in the services, so the application
    can `flush()` it and `close()` it at shutdown.
    """
    config = ctx.plugin_config(MemoryConfig)
    services = ctx.services.items
    queue = services.get(MEMORY_QUEUE)
    if queue is None:
        mode = config.queue
        if mode == "auto":  # no timer thread in a server process: the store keeps the wait
            mode = "store" if services.get(DEPLOYMENT) == "server" else "thread"
        queue = create_memory_queue(_memory_model(config, services), shared_store(services),
                                    debounce_seconds=config.debounce_seconds,
                                    max_facts=config.max_facts, mode=mode)
        services[MEMORY_QUEUE] = queue
    return MemoryMiddleware(queue, agent_name=ctx.runtime.agent_name)


def _memory_model(config: MemoryConfig, services: dict[str, Any]) -> Any:
    model = services.get(MEMORY_MODEL)
    if model is None and config.model:
        model = config.model
    if model is None:
        model = side_call_model(services.get(MODEL), "memory")
    if model is None:
        raise BuildError(
            "memory needs a model: provide services[MEMORY_MODEL] or services[MODEL], or set "
            "`memory.model`"
        )
    return model if hasattr(model, "invoke") else resolve_model(services, model)

