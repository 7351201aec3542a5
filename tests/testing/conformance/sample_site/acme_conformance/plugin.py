"""The entry point target: declares the plugin; imports no middleware."""

from __future__ import annotations

from antler.plugin_api import hookimpl, load_package_manifest


@hookimpl
def antler_plugin_specs():  # type: ignore[no-untyped-def]
    return load_package_manifest(__package__)
