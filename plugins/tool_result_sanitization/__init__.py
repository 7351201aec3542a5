"""The tool_result_sanitization plugin: its spec comes from Antler's manifest.

See middleware.py.
"""

from antler.plugin_api import builtin_plugin_hook

antler_plugin_specs = builtin_plugin_hook("tool_result_sanitization")
