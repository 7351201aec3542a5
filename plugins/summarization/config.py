"""The `summarization:` section of the operator config.

Pydantic only: this module is imported to validate a config file and to export
its JSON Schema, so it must stay light (no LangChain import).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from antler.plugin_api import ModelSpec

ContextSizeType = Literal["tokens", "messages", "fraction"]


class ContextSize(BaseModel):
    """An amount of context: a token count, a message count or a fraction of the window."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: ContextSizeType = Field(
        description="What `value` counts: `tokens` and `messages` take a positive whole "
        "number; `fraction` takes a share of the model's maximum input tokens, in (0, 1] "
        "(needs a model whose profile states `max_input_tokens`)."
    )
    value: int | float = Field(
        description="The amount: a positive integer for tokens/messages, a number in (0, 1] "
        "for fraction."
    )

    @field_validator("value", mode="before")
    @classmethod
    def _no_booleans_or_strings(cls, value: Any) -> Any:
        # YAML turns `yes` into True and `"5"` stays a string; neither is a size.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number, got {value!r}")
        return value

    @model_validator(mode="after")
    def _check_range(self) -> ContextSize:
        if self.type == "fraction":
            if not 0 < self.value <= 1:
                raise ValueError(
                    f"a fraction must be greater than 0 and at most 1, got {self.value!r} "
                    "(write 0.8 for 80% of the model's context window)"
                )
        elif isinstance(self.value, float) and not self.value.is_integer():
            raise ValueError(
                f"{self.type} must be a whole number, got {self.value!r}"
            )
        elif self.value <= 0:
            raise ValueError(f"{self.type} must be greater than 0, got {self.value!r}")
        return self

    def as_tuple(self) -> tuple[str, int | float]:
        """The `(kind, value)` tuple LangChain's `SummarizationMiddleware` takes."""
        if self.type == "fraction":
            return ("fraction", float(self.value))
        return (self.type, int(self.value))


class SummarizationConfig(BaseModel):
    """`summarization:` - replace old history with a summary before the context overflows."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        default=None, description="Turn summarization on (it is off unless enabled)."
    )
    model: ModelSpec = Field(
        default=None,
        description="Model that writes the summaries, as an `init_chat_model` string such as "
        "'openai:gpt-4o-mini' (or 'scripted:path.yaml' offline). Default: the agent's own "
        "model. Token counting and fraction limits always use the agent's model.",
    )
    trigger: list[ContextSize] = Field(
        default_factory=lambda: [ContextSize(type="tokens", value=16000)],
        min_length=1,
        description="Summarize when any one of these thresholds is reached, e.g. "
        "[{type: tokens, value: 16000}, {type: messages, value: 80}].",
    )
    keep: ContextSize = Field(
        default_factory=lambda: ContextSize(type="messages", value=10),
        description="How much recent history survives a summarization verbatim.",
    )
    trim_tokens_to_summarize: int | None = Field(
        default=16000,
        gt=0,
        description="At most this many tokens of the old history are sent to the summary "
        "model (the most recent ones); null sends all of it.",
    )
    summary_prompt: str | None = Field(
        default=None,
        description="Prompt for the summary model. It must contain the `{messages}` "
        "placeholder; write other literal braces as `{{` and `}}`. Default: LangChain's.",
    )

    @field_validator("trigger", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return [value]
        if isinstance(value, list) and not value:
            raise ValueError(
                "needs at least one threshold; to turn summarization off set `enabled: false`"
            )
        return value

    @field_validator("summary_prompt")
    @classmethod
    def _prompt_has_placeholder(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            rendered = value.format(messages="\x00")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"cannot be filled in ({type(exc).__name__}: {exc}); the only placeholder "
                "allowed is {messages}, write other literal braces as {{ and }}"
            ) from None
        if "\x00" not in rendered:
            raise ValueError("must contain the {messages} placeholder for the old history")
        return value

    def uses_fraction(self) -> bool:
        return self.keep.type == "fraction" or any(t.type == "fraction" for t in self.trigger)
