"""The `durable_context:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SKILL_READ_TOOLS = ("read_file", "read", "view", "cat")
"""The usual names of file-reading tools: Antler's own and those MCP servers commonly offer."""


class DurableContextConfig(BaseModel):
    """`durable_context:` - the record of delegations and loaded skills each request carries.

    The plugin is always on; this section only tunes what it records and shows.
    """

    model_config = ConfigDict(extra="forbid")

    skill_read_tools: list[str] = Field(
        default_factory=lambda: list(SKILL_READ_TOOLS),
        description="Tools whose successful read of a SKILL.md under /mnt/skills records the "
        "skill as loaded (default: read_file, read, view, cat); [] records no skills.")
    ledger_chars: int = Field(
        6000, ge=500, le=100_000, strict=True,
        description="Most characters of the delegation ledger shown to the model; the newest "
        "entries are kept.")
