"""The platform hooks (`hookimpl` marks a plugin's implementations).

A stable import path for plugin authors and applications; the code lives in
`antler.plugin_api.hookspecs`.
"""

from antler.plugin_api.hookspecs import (
    PROJECT,
    antler_chain_resolved,
    antler_config_sections,
    antler_plugin_specs,
    antler_select_tools,
    antler_tools,
    antler_validate_config,
    hookimpl,
    hookspec,
)

__all__ = [
    "PROJECT",
    "antler_chain_resolved",
    "antler_config_sections",
    "antler_plugin_specs",
    "antler_select_tools",
    "antler_tools",
    "antler_validate_config",
    "hookimpl",
    "hookspec",
]
