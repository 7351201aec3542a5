"""The memory plugin: its spec comes from Antler's manifest (see middleware.py)."""

from antler.plugin_api import builtin_plugin_hook

antler_plugin_specs = builtin_plugin_hook("memory")
