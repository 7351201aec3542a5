"""The `record:` section of the operator config: whether and where conversations are recorded.

Recording is off unless the section (or the `record` argument of `create_agent`,
or `antler run --record FILE`) turns it on. Pydantic only, so reading a config
imports nothing of the recorder.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["RecordSettings"]


class RecordSettings(BaseModel):
    """`record:` — write each thread's conversation to a recording (see README, "Record and
    replay"). Secrets are redacted on write: API keys, `Authorization` values, the values of
    `*_API_KEY`/`*_TOKEN`/`*_SECRET` variables of the environment, and `redact` patterns."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Record conversations (off by default).")
    path: str | None = Field(
        None, description="One recording file (a single thread, as `antler run --record`).")
    directory: str | None = Field(
        None, description="A directory holding one recording per thread (`THREAD.yaml`); "
        "what a served graph uses. Default: `recordings` under the base directory.")
    redact: list[str] = Field(
        default_factory=list,
        description="Regular expressions whose matches are replaced by [REDACTED] in "
        "everything written (inputs, replies, tool results).")

    @field_validator("redact")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            if not pattern:
                raise ValueError(f"pattern {index} is empty; remove it")
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"pattern {index} ({pattern!r}) is not a regular expression: "
                                 f"{error}") from None
        return patterns

    @model_validator(mode="after")
    def _one_destination(self) -> RecordSettings:
        if self.path is not None and self.directory is not None:
            raise ValueError("give `path` (one file) or `directory` (one file per thread), "
                             "not both")
        return self
