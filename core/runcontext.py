"""Deprecated: the run context and run keys, now imported from `antler.plugin_api`.

`from antler.runcontext import X` keeps working until antler 0.2, with a
`DeprecationWarning` naming the new import (docs/plugins.md, "Versions and
deprecations").
"""

from antler.deprecation import moved_names

__getattr__ = moved_names(
    "antler.runcontext", "antler.plugin_api",
    ["DEFAULT_USER", "RunContext", "run_context", "run_id_of", "thread_id_of", "run_key_of"],
    elsewhere=dict.fromkeys([
        "TrustingRunContext"
    ], "antler.contracts.runcontext"),
)
