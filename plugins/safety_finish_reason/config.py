"""The `safety_finish_reason:` section of the operator config (pydantic only)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from antler.plugin_api import ReflectionError, split_path

__all__ = ["DetectorEntry", "SafetyFinishReasonConfig"]


class DetectorEntry(BaseModel):
    """One detector: a class by `module:Class` and the keyword arguments it is built with."""

    model_config = ConfigDict(extra="forbid")

    use: str = Field(description="The detector class, as 'package.module:ClassName'.")
    config: dict[str, Any] = Field(default_factory=dict,
                                   description="Keyword arguments for the class.")

    @field_validator("use")
    @classmethod
    def _is_a_class_path(cls, value: str) -> str:
        try:
            split_path(value, "detector class")
        except ReflectionError as exc:
            raise ValueError(str(exc)) from None
        return value


class SafetyFinishReasonConfig(BaseModel):
    """`safety_finish_reason:` - suppress tool calls of a reply a provider stopped for safety.

    `detectors` replaces the built-in list when given: name every detector the
    chain should use, built-ins included (`antler.plugins.safety_finish_reason.
    detectors:ContentFilterDetector`, `:AnthropicRefusalDetector`,
    `:GeminiSafetyDetector`, `:RefusalBlockDetector`). Loading a class runs its
    module's code: this is trusted operator configuration.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(None, description="Check replies for safety stops (on by "
                                 "default).")
    detectors: list[DetectorEntry] | None = Field(
        None, description="Detectors to use, in order; leave out for the built-ins.")

    @field_validator("detectors")
    @classmethod
    def _not_empty(cls, value: list[DetectorEntry] | None) -> list[DetectorEntry] | None:
        if value is not None and not value:
            raise ValueError("an empty list would detect nothing; leave `detectors` out to use "
                             "the built-in detectors, or set `enabled: false` to turn the plugin "
                             "off")
        return value
