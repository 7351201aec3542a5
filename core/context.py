"""What a plugin factory receives: `BuildContext`, `Services`, runtime options and service names.

A stable import path for plugin authors and applications; the code lives in
`antler.plugin_api.context`.
"""

from antler.plugin_api.context import (
    MEMORY_MODEL,
    MEMORY_QUEUE,
    MODEL,
    PATHS,
    SANDBOX_PROVIDER,
    STORE,
    SUBAGENT_RUNNER,
    TITLE_MODEL,
    BuildContext,
    ChainSecrets,
    RuntimeOptions,
    Services,
)

__all__ = [
    "MEMORY_MODEL",
    "MEMORY_QUEUE",
    "MODEL",
    "PATHS",
    "SANDBOX_PROVIDER",
    "STORE",
    "SUBAGENT_RUNNER",
    "TITLE_MODEL",
    "BuildContext",
    "ChainSecrets",
    "RuntimeOptions",
    "Services",
]
