"""Deprecated: moved to `antler.plugin_api.paths`; its public names are on
`antler.plugin_api`.

Kept until antler 0.2; each name warns (`DeprecationWarning`) with the import to write.
"""

from antler.deprecation import moved_names

__getattr__ = moved_names(
    "antler.runtime.paths", "antler.plugin_api",
    [
        "SKILLS_VIRTUAL_ROOT", "VIRTUAL_ROOT", "InvalidIdentifierError",
        "MissingThreadIdError", "PathEscapeError", "PathLayout", "ThreadPaths",
        "VirtualPathMapper", "resolve_base", "validate_id"
    ],
    elsewhere=dict.fromkeys([
        "ANTLER_HOME_ENV", "MAX_ID_LENGTH"
    ], "antler.plugin_api.paths"),
)
