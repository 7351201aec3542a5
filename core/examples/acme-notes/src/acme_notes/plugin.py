"""The entry point target: declares the plugin from its manifest; imports no middleware."""

from __future__ import annotations

from typing import Any

from antler.plugin_api import hookimpl, load_package_manifest


@hookimpl
def antler_plugin_specs() -> Any:
    return load_package_manifest(__package__)
