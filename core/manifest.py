"""Plugin manifests: loading and parsing the YAML that declares plugins.

A stable import path for plugin authors and applications; the code lives in
`antler.plugin_api.manifest`.
"""

from antler.plugin_api.manifest import (
    BUILTIN_MANIFEST,
    Manifest,
    builtin_manifest,
    builtin_plugin_hook,
    load_manifest,
    load_manifest_text,
    load_package_manifest,
    parse_manifest,
)

__all__ = [
    "BUILTIN_MANIFEST",
    "Manifest",
    "builtin_manifest",
    "builtin_plugin_hook",
    "load_manifest",
    "load_manifest_text",
    "load_package_manifest",
    "parse_manifest",
]
