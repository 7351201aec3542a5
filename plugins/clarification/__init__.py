"""The clarification plugin: its spec comes from Antler's manifest (see middleware.py)."""

from typing import Any

from antler.plugin_api import builtin_plugin_hook, hookimpl

antler_plugin_specs = builtin_plugin_hook("clarification")


@hookimpl
def antler_tools(context: Any) -> list[Any]:
    """Contribute `ask_clarification`; imported only when the plugin is in the chain."""
    from .tool import make_tool

    return [make_tool()]
