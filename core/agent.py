"""The agent factory (`create_agent`) and `AntlerAgent`.

A stable import path for plugin authors and applications; the code lives in
`antler.runtime.agent`.
"""

from antler.runtime.agent import (
    CHECKPOINT_FILENAME,
    DEFAULT_SYSTEM_PROMPT,
    FROM_CONFIG,
    AntlerAgent,
    create_agent,
    open_checkpointer,
)

__all__ = [
    "CHECKPOINT_FILENAME",
    "DEFAULT_SYSTEM_PROMPT",
    "FROM_CONFIG",
    "AntlerAgent",
    "create_agent",
    "open_checkpointer",
]
