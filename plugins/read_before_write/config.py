"""The `read_before_write:` section of the operator config (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ReadBeforeWriteConfig"]


class ReadBeforeWriteConfig(BaseModel):
    """`read_before_write:` - edits and overwrites need a read of the file's current version.

    On by default; `read_before_write: {enabled: false}` turns the gate off.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None, description="Gate writes on a read of the current version (on by default).")
