"""The `durable_context:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DurableContextConfig(BaseModel):
    """`durable_context:` - the record of delegations and loaded skills each request carries.

    The plugin is always on; this section only tunes what it records and shows.
    """

    model_config = ConfigDict(extra="forbid")

    skill_read_tools: list[str] = Field(
        default_factory=lambda: ["read_file"],
        description="Tools whose successful read of a SKILL.md under /mnt/skills records the "
        "skill as loaded; [] records no skills.")
    ledger_chars: int = Field(
        6000, ge=500, le=100_000, strict=True,
        description="Most characters of the delegation ledger shown to the model; the newest "
        "entries are kept.")
