"""The view_image plugin: its spec comes from Antler's manifest (see middleware.py)."""

from typing import Any

from antler.plugin_api import builtin_plugin_hook, hookimpl

antler_plugin_specs = builtin_plugin_hook("view_image")


@hookimpl
def antler_tools(context: Any) -> list[Any]:
    """Contribute `view_image`; imported only when the plugin is in the chain."""
    from .tool import make_tool

    return [make_tool(context)]
