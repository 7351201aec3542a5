"""Asking a model which durable facts a conversation revealed, and reading its answer.

Models answer in many shapes: a JSON list, a JSON object, JSON inside a code
fence, a bulleted list, prose. `parse_facts` accepts all of them and never
raises: a malformed answer yields fewer facts, not a failed update. Counts and
lengths are capped, because the answer is model output and the memory file
is read back into future prompts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from antler.plugin_api import jsonsource
from antler.plugins._lib.sidecall import side_invoke

__all__ = [
    "EXTRACTION_PROMPT",
    "MAX_FACTS_PER_UPDATE",
    "MAX_FACT_CHARS",
    "FactExtractor",
    "conversation_text",
    "parse_facts",
]

MAX_FACTS_PER_UPDATE = 20
MAX_FACT_CHARS = 300
MAX_CONVERSATION_CHARS = 12_000
MAX_KNOWN_FACTS_SHOWN = 50

EXTRACTION_PROMPT = """You maintain a long-term memory about a user.
Read the conversation below and list the durable facts it reveals about the user: \
preferences, background, ongoing projects, decisions, how they like to work. Leave out \
small talk, one-off requests, anything about the assistant, and facts already known.

Answer with a JSON list of short, self-contained sentences, for example:
["Prefers answers in French.", "Is writing a thesis on coral reefs."]
Answer [] when there is nothing worth remembering.

Already known:
{known}

<conversation>
{conversation}
</conversation>"""

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*•+]|\d{1,3}[.)])(?:\s+|$)")
_WORD = re.compile(r"\w")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_NOTHING = {"", "[]", "none", "n/a", "na", "nothing", "no facts", "no new facts",
            "nothing to remember", "nothing worth remembering"}
_FACT_KEYS = ("content", "fact", "text", "memory")


def _message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text") or ""))
    return "\n".join(parts)


def conversation_text(messages: Iterable[BaseMessage], *,
                      max_chars: int = MAX_CONVERSATION_CHARS) -> str:
    """`User: ...` / `Assistant: ...` lines; the most recent `max_chars` when too long."""
    lines = []
    for message in messages:
        if isinstance(message, HumanMessage):
            role = "User"
        elif isinstance(message, AIMessage):
            role = "Assistant"
        else:
            continue
        text = _message_text(message).strip()
        if text:
            lines.append(f"{role}: {text}")
    text = "\n\n".join(lines)
    if len(text) > max_chars:
        text = "[... earlier conversation omitted ...]\n" + text[-max_chars:]
    return text


def _clean(value: str, max_chars: int) -> str:
    text = " ".join(_CONTROL.sub(" ", value).split())
    text = text.strip("\"'`\u201c\u201d\u2018\u2019")
    if len(text) > max_chars:
        cut = text[:max_chars]
        space = cut.rfind(" ")
        if text[max_chars] != " " and space >= max_chars // 2:
            cut = cut[:space]
        text = cut.rstrip(" ,;:-") + "..."
    return text


def _from_json(data: Any) -> list[str] | None:
    """Candidate facts from decoded JSON, or None when the JSON has no usable shape."""
    if isinstance(data, dict):
        for key in ("facts", "memories", "items"):
            if isinstance(data.get(key), list):
                return _from_json(data[key])
        return None
    if isinstance(data, str):
        return [data]
    if not isinstance(data, list):
        return None
    found = []
    for item in data:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            value = next((item[k] for k in _FACT_KEYS if isinstance(item.get(k), str)), None)
            if value is not None:
                found.append(value)
    return found


def _decode(text: str) -> list[str] | None:
    candidates = [text]
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            decoded = jsonsource.loads(candidate)
        except ValueError:
            continue
        facts = _from_json(decoded)
        if facts is not None:
            return facts
    return None


def _from_lines(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        if (not _WORD.search(line) or line.endswith(":")
                or line.startswith(("[", "]", "{", "}"))):
            continue
        found.append(line)
    return found


def parse_facts(output: Any, *, max_facts: int = MAX_FACTS_PER_UPDATE,
                max_chars: int = MAX_FACT_CHARS) -> list[str]:
    """The facts in a model's answer: a JSON list of strings, or one fact per line.

    Also accepted: JSON in a code fence, an object with a `facts` list, list
    items that are objects with a `content`/`fact` key, bullets and numbering.
    Never raises. Facts are whitespace-normalized, cut to `max_chars`,
    deduplicated, and at most `max_facts` are returned.
    """
    if isinstance(output, BaseMessage):
        text = _message_text(output)
    elif isinstance(output, str):
        text = output
    else:
        return []
    text = text.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    candidates = _decode(text)
    if candidates is None:
        candidates = _from_lines(text)
    facts: list[str] = []
    seen: set[str] = set()
    for candidate in candidates:
        if not isinstance(candidate, str):
            continue
        fact = _clean(candidate, max_chars)
        key = fact.casefold().rstrip(".")
        if key in _NOTHING or key in seen:
            continue
        seen.add(key)
        facts.append(fact)
        if len(facts) >= max_facts:
            break
    return facts


class FactExtractor:
    """Turns a conversation into facts with one model call."""

    def __init__(self, model: Any, *, max_facts: int = MAX_FACTS_PER_UPDATE,
                 max_fact_chars: int = MAX_FACT_CHARS,
                 max_conversation_chars: int = MAX_CONVERSATION_CHARS,
                 prompt: str = EXTRACTION_PROMPT) -> None:
        self.model = model
        self.max_facts = max_facts
        self.max_fact_chars = max_fact_chars
        self.max_conversation_chars = max_conversation_chars
        self.prompt = prompt

    def build_prompt(self, messages: Sequence[BaseMessage],
                     known_facts: Sequence[str] = (), title: str | None = None) -> str:
        shown = list(known_facts)[-MAX_KNOWN_FACTS_SHOWN:]
        known = "\n".join(f"- {fact}" for fact in shown) or "(nothing yet)"
        conversation = conversation_text(messages, max_chars=self.max_conversation_chars)
        if title:
            conversation = f"(Conversation title: {title})\n\n{conversation}"
        return self.prompt.format(known=known, conversation=conversation)

    def extract(self, messages: Sequence[BaseMessage], *, known_facts: Sequence[str] = (),
                title: str | None = None) -> list[str]:
        """The facts the model finds in `messages`; [] when there is nothing to read.

        A failing model call raises (the queue logs it and moves on); a
        malformed answer does not.
        """
        if not any(isinstance(m, HumanMessage) for m in messages):
            return []
        prompt = self.build_prompt(messages, known_facts, title)
        answer = side_invoke(self.model, prompt, {"metadata": {"lc_source": "memory"},
                                                  "run_name": "antler_memory_extraction"})
        return parse_facts(answer, max_facts=self.max_facts, max_chars=self.max_fact_chars)
