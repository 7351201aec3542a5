"""The tool_result_sanitization plugin: its spec is in its plugin-manifest.yaml.

See middleware.py.
"""

from antler.plugin_api import manifest_plugin_hook

antler_plugin_specs = manifest_plugin_hook(__name__)
