"""Deprecated: the hook markers and specs, now imported from `antler.plugin_api`.

`from antler.hookspecs import X` keeps working until antler 0.2, with a
`DeprecationWarning` naming the new import (docs/plugins.md, "Versions and
deprecations").
"""

from antler.deprecation import moved_names

__getattr__ = moved_names(
    "antler.hookspecs", "antler.plugin_api",
    ["PROJECT", "hookimpl", "hookspec"],
    elsewhere=dict.fromkeys([
        "antler_chain_resolved", "antler_config_sections", "antler_plugin_specs",
        "antler_select_tools", "antler_tools", "antler_validate_config"
    ], "antler.plugin_api.hookspecs"),
)
