"""Title: name the thread after its first complete user-assistant exchange.

Once the first user message has been answered by an assistant message that
calls no tools, `after_model` asks a lightweight model for a short title and
writes it to the state's `title`. It runs once per thread: a thread that has a
title is never titled again. As docs/chain.md#title has it, only the first complete
exchange is titled (a user message answered by a final reply that is not an
error notice; a run that was interrupted or failed completed none): a thread
whose first complete exchange got no title (the plugin was off then) stays
untitled, unless ``title.first_exchange_only`` is false, which titles it at
its next complete exchange (from its first user message). When the title model fails or
answers nothing usable, the title is the first 50 characters of the user's
message (no ellipsis is added, and a shorter ``max_chars`` cuts it further), so a thread
never stays untitled because a provider hiccupped.

The title call is internal: its answer goes to `title`, never to `messages`,
it is tagged so LangGraph does not stream it, and the declared
`InternalCallTransformer` keeps it out of `run.messages`. It is a side call
(`antler.plugins._lib.sidecall`): a tracer sees it inside the run, and when
nothing observes the run it skips the callback bookkeeping.

Where it sits: after `summarization` and `todo` (docs/chain.md#layer-dependencies), which only
touch messages before model calls, so the first exchange it reads is stable;
before `memory`, whose `after_agent` runs once the title exists.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.internal_call_transformer import (
    InternalCallTransformer,
    internal_call_metadata,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import TAG_NOSTREAM

from antler.plugin_api import (
    MODEL,
    TITLE_MODEL,
    BuildContext,
    BuildError,
    is_error_fallback,
    is_hidden,
    resolve_model,
    side_call_model,
)
from antler.plugin_api import message_text as contract_text
from antler.plugins._lib.sidecall import side_ainvoke, side_invoke

from .config import TitleConfig

__all__ = [
    "FALLBACK_CHARS",
    "TitleMiddleware",
    "TitleState",
    "build",
    "clean_title",
    "fallback_title",
    "first_exchange",
    "message_text",
]

logger = logging.getLogger(__name__)

FALLBACK_CHARS = 50
"""How much of the user's first message becomes the title when the model cannot help."""

PROMPT_EXCERPT_CHARS = 600
"""How much of each side of the exchange the title model is shown."""

TITLE_PROMPT = (
    "Write a title of a few words for the conversation below, in the language of the user's "
    "message. Answer with the title only: no quotes, no label, no trailing punctuation, at "
    "most {max_chars} characters.\n\n"
    "<user_message>\n{user}\n</user_message>\n\n"
    "<assistant_reply>\n{reply}\n</assistant_reply>"
)

_UPLOADED_FILES = re.compile(r"<uploaded_files>.*?(?:</uploaded_files>|\Z)", re.DOTALL)
_LABEL = re.compile("^(?:\\*\\*)?title(?:\\*\\*)?\\s*[:\uff1a]\\s*", re.IGNORECASE)
_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb\u300c\u300d\u300e\u300f*#"


class TitleState(AgentState[Any]):
    """State added by the title plugin."""

    title: NotRequired[str | None]


def message_text(message: BaseMessage) -> str:
    """Plain text of a message: text blocks of structured content joined, uploads dropped.

    Structured (list) content keeps its strings and `text` blocks and drops
    images and other blocks; the `<uploaded_files>` block the uploads plugin
    prepends is removed, since file lists say nothing about the topic.
    Whitespace is collapsed to single spaces.
    """
    text = contract_text(message)
    if "<uploaded_files>" in text:  # the pattern's literal start: without it, nothing to drop
        text = _UPLOADED_FILES.sub(" ", text)
    return " ".join(text.split())


def _is_user_input(message: BaseMessage) -> bool:
    """A message the user wrote, not one a middleware injected (reminders, summaries)."""
    return isinstance(message, HumanMessage) and not is_hidden(message)


def _is_final_reply(message: BaseMessage) -> bool:
    """An assistant message that calls no tools and is not an error notice."""
    return isinstance(message, AIMessage) and not message.tool_calls \
        and not is_error_fallback(message)


def first_exchange(messages: Sequence[BaseMessage]) -> tuple[str, str] | None:
    """(user text, reply text) of the first completed exchange, or None if there is none yet.

    The exchange is complete when the latest message is an assistant message
    without tool calls (the run is answering, not working), and it is the
    first user message plus the first such reply after it.
    """
    if not messages or not _is_final_reply(messages[-1]):
        return None
    last = messages[-1]
    for index, message in enumerate(messages):
        if not _is_user_input(message):
            continue
        user = message_text(message)
        reply = next((m for m in messages[index + 1:] if _is_final_reply(m)), last)
        if user:
            return user, message_text(reply)
    return None


def _completed_before(messages: Sequence[BaseMessage]) -> bool:
    """Whether a user message was answered (a final, non-error reply) before the latest one."""
    asked = False
    for message in messages[:-1]:
        if _is_user_input(message):
            asked = True
        elif asked and _is_final_reply(message):
            return True
    return False


_REASONING = re.compile(r"<(think|thinking|reasoning)\b[^>]*>.*?(?:</\1\s*>|\Z)",
                        re.IGNORECASE | re.DOTALL)
_ANSWER_CHARS = 4000
"""How much of the title model's answer is read: a title is on its first lines."""


def clean_title(raw: str, max_chars: int) -> str:
    """A model's answer made into a title: reasoning blocks dropped, first line, no label or
    quotes, capped at `max_chars`."""
    raw = _REASONING.sub("\n", raw[:_ANSWER_CHARS])
    line = next((line.strip() for line in raw.splitlines() if line.strip(" \t`")), "")
    line = _LABEL.sub("", line).strip().strip(_QUOTES).strip()
    line = line.rstrip(".。").strip()
    title = " ".join(line.split())
    if len(title) > max_chars:
        cut = title[:max_chars]
        space = cut.rfind(" ")
        # Prefer a word boundary unless that would throw away most of the title.
        if title[max_chars] != " " and space >= max_chars // 2:
            cut = cut[:space]
        title = cut.rstrip(" ,;:-")
    return title


def fallback_title(user_text: str, limit: int = FALLBACK_CHARS) -> str:
    """The first `limit` (50) characters of the user's message, whitespace collapsed."""
    return " ".join(user_text.split())[:limit].rstrip()


def _internal_config() -> RunnableConfig:
    return {
        "tags": [TAG_NOSTREAM],
        "metadata": {"lc_source": "title", **internal_call_metadata()},
        "run_name": "antler_title",
    }


class TitleMiddleware(AgentMiddleware[TitleState, Any]):
    """Writes `title` once, after the first complete exchange."""

    state_schema = TitleState
    transformers = (InternalCallTransformer,)

    def __init__(self, model: BaseChatModel, *, max_chars: int = 60,
                 first_exchange_only: bool = True) -> None:
        super().__init__()
        self.model = model
        self.max_chars = max_chars
        self.first_exchange_only = first_exchange_only

    def _pending(self, state: Any) -> tuple[str, str] | None:
        if state.get("title"):
            return None
        messages = state.get("messages") or []
        if not messages or not _is_final_reply(messages[-1]):
            return None  # the run is still working: no exchange is complete yet (cheap first)
        if self.first_exchange_only and _completed_before(messages):
            return None  # past the first complete exchange: only that one is titled
        return first_exchange(messages)

    def _prompt(self, user: str, reply: str) -> str:
        return TITLE_PROMPT.format(
            max_chars=self.max_chars,
            user=user[:PROMPT_EXCERPT_CHARS],
            reply=reply[:PROMPT_EXCERPT_CHARS],
        )

    def _finish(self, user: str, answer: Any) -> dict[str, Any]:
        text = answer.text if isinstance(answer, BaseMessage) else str(answer or "")
        title = clean_title(text, self.max_chars)
        if not title:
            logger.info("title model gave no usable title; using the user's message")
        return {"title": title or fallback_title(user, min(FALLBACK_CHARS, self.max_chars))}

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """After the first final reply, write `title` (the model's, or the fallback)."""
        exchange = self._pending(state)
        if exchange is None:
            return None
        user, reply = exchange
        try:
            answer = side_invoke(self.model, self._prompt(user, reply), _internal_config())
        except Exception as exc:  # a title is never worth failing the user's run
            logger.warning("title generation failed (%s: %s); using the fallback title",
                           type(exc).__name__, exc)
            answer = None
        return self._finish(user, answer)

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model`: the title call is awaited, not run in a thread."""
        exchange = self._pending(state)
        if exchange is None:
            return None
        user, reply = exchange
        try:
            answer = await side_ainvoke(self.model, self._prompt(user, reply),
                                        _internal_config())
        except Exception as exc:
            logger.warning("title generation failed (%s: %s); using the fallback title",
                           type(exc).__name__, exc)
            answer = None
        return self._finish(user, answer)


def build(ctx: BuildContext) -> TitleMiddleware:
    """Pick the title model: `services[TITLE_MODEL]`, else `title.model`, else the agent's."""
    config = ctx.plugin_config(TitleConfig)
    services = ctx.services.items
    model: Any
    if services.get(TITLE_MODEL) is not None:
        model = services[TITLE_MODEL]
    elif config.model:
        model = config.model
    else:
        model = side_call_model(services.get(MODEL), "title")
    if model is None:
        raise BuildError(
            "title needs a model: provide services[TITLE_MODEL] or services[MODEL], or set "
            "`title.model`"
        )
    if not isinstance(model, BaseChatModel):
        model = resolve_model(services, model)
    return TitleMiddleware(model, max_chars=config.max_chars,
                           first_exchange_only=config.first_exchange_only)
