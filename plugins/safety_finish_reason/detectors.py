"""Safety-stop detectors: did the provider stop this reply for safety reasons?

A detector is any object with a `detect(message)` method that returns a
`SafetyTermination` (what it saw, where) or None. Subclassing
`SafetyDetector` is the easy way; the operator config names detector classes
as 'module:Class' with keyword arguments (`detectors: [{use, config}]`).

Built-ins, used when the config names none:

- `ContentFilterDetector`: OpenAI-compatible `finish_reason: content_filter`
  (more values through `extra_finish_reasons`); Azure's filter results ride
  along as extras.
- `AnthropicRefusalDetector`: `stop_reason: refusal`.
- `GeminiSafetyDetector`: Gemini's safety finish reasons (`SAFETY`,
  `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, `RECITATION`, `IMAGE_SAFETY`,
  `IMAGE_PROHIBITED_CONTENT`, `IMAGE_RECITATION`) and a blocked prompt
  (`prompt_feedback.block_reason`). `MAX_TOKENS`, `MALFORMED_FUNCTION_CALL`
  and `OTHER` are not safety stops and are left out on purpose.
- `RefusalBlockDetector`: LangChain's standard `refusal` content block (and
  OpenAI's `refusal` field it is made from).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from antler.plugin_api import provider_field, provider_text

__all__ = [
    "AnthropicRefusalDetector",
    "ContentFilterDetector",
    "GeminiSafetyDetector",
    "RefusalBlockDetector",
    "SafetyDetector",
    "SafetyTermination",
    "default_detectors",
]

_VALUE_CHARS = 200


@dataclasses.dataclass(frozen=True)
class SafetyTermination:
    """A detector's finding: which detector saw which value in which field."""

    detector: str
    field: str
    value: str
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class SafetyDetector:
    """Base class of detectors: set `name`, implement `detect`."""

    name = "detector"

    def detect(self, message: Any) -> SafetyTermination | None:
        """The finding for `message` (an `AIMessage`), or None when it was not a safety stop."""
        raise NotImplementedError

    def _finding(self, field_name: str, value: str, **extras: Any) -> SafetyTermination:
        return SafetyTermination(self.name, field_name, value[:_VALUE_CHARS],
                                 {key: item for key, item in extras.items() if item is not None})


def _normalized(values: Iterable[str]) -> frozenset[str]:
    return frozenset(str(value).strip().lower() for value in values)


class ContentFilterDetector(SafetyDetector):
    """`finish_reason` is `content_filter` (or one of `extra_finish_reasons`)."""

    name = "openai_content_filter"

    def __init__(self, extra_finish_reasons: Iterable[str] = ()) -> None:
        self.finish_reasons = _normalized(["content_filter", *extra_finish_reasons])

    def detect(self, message: Any) -> SafetyTermination | None:
        value = provider_text(message, "finish_reason")
        if value is None or value.lower() not in self.finish_reasons:
            return None
        return self._finding("finish_reason", value,
                             content_filter_results=provider_field(message,
                                                                   "content_filter_results"),
                             prompt_filter_results=provider_field(message,
                                                                  "prompt_filter_results"))


class AnthropicRefusalDetector(SafetyDetector):
    """`stop_reason` is `refusal`."""

    name = "anthropic_refusal"

    def detect(self, message: Any) -> SafetyTermination | None:
        value = provider_text(message, "stop_reason")
        if value is None or value.lower() != "refusal":
            return None
        return self._finding("stop_reason", value)


GEMINI_SAFETY_REASONS = ("SAFETY", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "RECITATION",
                         "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION")


class GeminiSafetyDetector(SafetyDetector):
    """Gemini stopped the reply (`finish_reason`) or blocked the prompt for safety."""

    name = "gemini_safety"

    def __init__(self, finish_reasons: Iterable[str] = GEMINI_SAFETY_REASONS) -> None:
        self.finish_reasons = _normalized(finish_reasons)

    def detect(self, message: Any) -> SafetyTermination | None:
        value = provider_text(message, "finish_reason")
        if value is not None and value.lower() in self.finish_reasons:
            return self._finding("finish_reason", value,
                                 safety_ratings=provider_field(message, "safety_ratings"))
        feedback = provider_field(message, "prompt_feedback")
        blocked = feedback.get("block_reason") if isinstance(feedback, Mapping) else None
        if blocked and str(blocked).lower() not in ("block_reason_unspecified", "0"):
            return self._finding("prompt_feedback.block_reason", str(blocked),
                                 safety_ratings=provider_field(message, "safety_ratings"))
        return None


class RefusalBlockDetector(SafetyDetector):
    """The reply holds a standard `refusal` content block (or OpenAI's `refusal` field)."""

    name = "refusal_block"

    def detect(self, message: Any) -> SafetyTermination | None:
        refusal = (getattr(message, "additional_kwargs", None) or {}).get("refusal")
        if refusal:
            return self._finding("additional_kwargs.refusal", str(refusal))
        for block in _content_blocks(message):
            if isinstance(block, Mapping) and block.get("type") == "refusal":
                return self._finding("content.refusal", str(block.get("refusal") or "refusal"),
                                     block_extras=block.get("extras"))
        return None


def _content_blocks(message: Any) -> list[Any]:
    """The message's standard content blocks, as far as a refusal can be among them."""
    content = getattr(message, "content", None)
    metadata: Any = getattr(message, "response_metadata", None)
    # `type(...) is dict` first: the usual case, without the Mapping ABC check's cost.
    mapping = type(metadata) is dict or isinstance(metadata, Mapping)
    if isinstance(content, str) and not (mapping and metadata.get("model_provider")):
        # Without a provider's translator, text reads as text blocks (beside tool calls
        # and reasoning): no refusal, so skip the translation on every plain reply.
        return []
    try:
        return list(message.content_blocks)
    except Exception:  # a provider translator that cannot read this content
        return list(content) if isinstance(content, list) else []


def default_detectors() -> list[SafetyDetector]:
    """The built-in detectors, in the order they are asked."""
    return [ContentFilterDetector(), AnthropicRefusalDetector(), GeminiSafetyDetector(),
            RefusalBlockDetector()]
