"""The clarification plugin: its spec is in its plugin-manifest.yaml (see middleware.py)."""

from typing import Any

from antler.plugin_api import hookimpl, manifest_plugin_hook

antler_plugin_specs = manifest_plugin_hook(__name__)


@hookimpl
def antler_tools(context: Any) -> list[Any]:
    """Contribute `ask_clarification`; imported only when the plugin is in the chain."""
    from .tool import make_tool

    return [make_tool()]
