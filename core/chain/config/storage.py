"""`storage:` — where checkpoints, owner records and the shared store live.

The settings are checked here as text; `antler.runtime.storage` opens what
they name.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

__all__ = ["CHECKPOINTER_KINDS", "ENV_REFERENCE", "POSTGRES_SCHEMES", "PoolSettings",
           "StorageSettings"]


CHECKPOINTER_KINDS = ("sqlite", "memory", "none")
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
ENV_REFERENCE = r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$"


def _checkpointer_text(value: str) -> str:
    value = value.strip()
    if (value in CHECKPOINTER_KINDS or value.startswith(POSTGRES_SCHEMES)
            or re.match(ENV_REFERENCE, value)):
        return value
    raise ValueError(
        f"{value!r} is not a checkpointer: use 'sqlite' (the default, a file under "
        "base_dir), 'memory' (this process only), 'none' (no history), a Postgres URL "
        "such as 'postgresql://antler@db.example:5432/antler', or an environment "
        "reference such as '${DATABASE_URL}'")


def _store_text(value: str) -> str:
    value = value.strip()
    if value in ("auto", "sqlite", "memory") or value.startswith(POSTGRES_SCHEMES) or (
            re.match(ENV_REFERENCE, value)):
        return value
    raise ValueError(
        f"{value!r} is not a store: use 'auto' (the default: the checkpointer's Postgres "
        "database, else SQLite), 'sqlite', 'memory', a Postgres URL or an environment "
        "reference such as '${DATABASE_URL}'")


class PoolSettings(BaseModel):
    """`storage.pool:` — the Postgres connection pool of one process."""

    model_config = ConfigDict(extra="forbid")

    min: int = Field(1, ge=0, le=1000, description="Connections kept open.")
    max: int = Field(10, ge=2, le=1000, description="Most connections open at once (a "
                     "run holds one for its thread lock, so at least 2).")

    @model_validator(mode="after")
    def _ordered(self) -> PoolSettings:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max}); lower min "
                             "or raise max")
        return self


class StorageSettings(BaseModel):
    """`storage:` — where threads, memory and checkpoints live."""

    model_config = ConfigDict(extra="forbid")

    base_dir: str | None = Field(
        None, description="Base directory (default: $ANTLER_HOME, else ./.antler)."
    )
    checkpointer: Annotated[str, AfterValidator(_checkpointer_text)] = Field(
        "sqlite", description="'sqlite' (a file under base_dir), 'memory', 'none', a "
        "'postgresql://user@host/db' URL, or an environment reference such as "
        "'${DATABASE_URL}' read when the agent is built.",
    )
    store: Annotated[str, AfterValidator(_store_text)] = Field(
        "auto", description="The shared store of cross-thread data (memory, titles): "
        "'auto' (the checkpointer's Postgres database, else 'sqlite'), 'sqlite' "
        "(store.sqlite under base_dir), 'memory', a Postgres URL or '${NAME}'.")
    pool: PoolSettings = Field(
        default_factory=lambda: PoolSettings(),
        description="Postgres only: the connection pool of each process.")
    messages_channel: Literal["full", "delta"] = Field(
        "full", description="'full': every checkpoint stores the whole message list; "
        "'delta': it stores the step's new messages, with the whole list every "
        "`snapshot_every` updates (also applied to growing channels plugins declare).",
    )
    snapshot_every: int = Field(
        100, ge=1, description="Delta mode: store the whole list after this many updates "
        "of the channel (bounds how many writes a read replays).",
    )
