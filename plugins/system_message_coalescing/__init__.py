"""The system_message_coalescing plugin: its spec is in plugin-manifest.yaml beside this file."""

from antler.plugin_api import manifest_plugin_hook

antler_plugin_specs = manifest_plugin_hook(__name__)
