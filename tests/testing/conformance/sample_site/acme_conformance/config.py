"""The `acme_notes:` section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class NotesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefix: str = Field("Acme note", description="How each note to the model begins.")
