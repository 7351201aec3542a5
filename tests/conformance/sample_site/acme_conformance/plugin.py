"""The entry point target: declares the plugin; imports no middleware."""

from __future__ import annotations

from antler.manifest import load_package_manifest
from antler.plugin_api.hookspecs import hookimpl


@hookimpl
def antler_plugin_specs():  # type: ignore[no-untyped-def]
    return load_package_manifest(__package__)
