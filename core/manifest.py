"""Deprecated: manifest loading, now imported from `antler.plugin_api`.

`from antler.manifest import X` keeps working until antler 0.2, with a
`DeprecationWarning` naming the new import (docs/plugins.md, "Versions and
deprecations").
"""

from antler.deprecation import moved_names

__getattr__ = moved_names(
    "antler.manifest", "antler.plugin_api",
    [
        "Manifest", "builtin_plugin_hook", "load_manifest", "load_manifest_text",
        "load_package_manifest", "parse_manifest"
    ],
    elsewhere=dict.fromkeys([
        "BUILTIN_MANIFEST", "builtin_manifest"
    ], "antler.plugin_api.manifest"),
)
