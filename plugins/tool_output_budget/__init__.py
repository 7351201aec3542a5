"""The tool_output_budget plugin: its spec is in its plugin-manifest.yaml (see middleware.py)."""

from antler.plugin_api import manifest_plugin_hook

antler_plugin_specs = manifest_plugin_hook(__name__)
