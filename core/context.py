"""Deprecated: BuildContext, Services and the service names, now imported from `antler.plugin_api`.

`from antler.context import X` keeps working until antler 0.2, with a
`DeprecationWarning` naming the new import (docs/plugins.md, "Versions and
deprecations").
"""

from antler.deprecation import moved_names

__getattr__ = moved_names(
    "antler.context", "antler.plugin_api",
    [
        "MEMORY_MODEL", "MEMORY_QUEUE", "MODEL", "PATHS", "SANDBOX_PROVIDER", "STORE",
        "SUBAGENT_RUNNER", "TITLE_MODEL", "BuildContext", "ChainSecrets",
        "RuntimeOptions", "Services"
    ],
)
