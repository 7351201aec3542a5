"""The `acme_notes:` section of the operator config."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class NotesConfig(BaseModel):
    """`acme_notes:` — how the note to the model reads."""

    model_config = ConfigDict(extra="forbid")

    prefix: str = Field("Acme note", min_length=1, description="How each note begins.")
