"""The server-owned run context: identity and ids of one run.

A stable import path for plugin authors and applications; the code lives in
`antler.contracts.runcontext`.
"""

from antler.contracts.runcontext import (
    DEFAULT_USER,
    RunContext,
    run_context,
    run_id_of,
    thread_id_of,
)

__all__ = [
    "DEFAULT_USER",
    "RunContext",
    "run_context",
    "run_id_of",
    "thread_id_of",
]
