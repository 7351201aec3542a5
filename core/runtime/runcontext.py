"""Deprecated: moved to `antler.contracts.runcontext`; its public names are on
`antler.plugin_api`.

Kept until antler 0.2; each name warns (`DeprecationWarning`) with the import to write.
"""

from antler.deprecation import moved_names

__getattr__ = moved_names(
    "antler.runtime.runcontext", "antler.plugin_api",
    [
        "RunContext", "run_context", "thread_id_of", "run_id_of", "run_key_of"
    ],
    elsewhere=dict.fromkeys([
        "TrustingRunContext", "authenticated"
    ], "antler.contracts.runcontext"),
)
