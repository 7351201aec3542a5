"""The system_message_coalescing plugin: its spec comes from the manifest (see middleware.py)."""

from antler.plugin_api import builtin_plugin_hook

antler_plugin_specs = builtin_plugin_hook("system_message_coalescing")
