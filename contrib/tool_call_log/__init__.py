"""tool_call_log: an optional extension plugin that keeps a JSON-lines log of tool calls.

It is packaged exactly like a third-party plugin: its own manifest
(`plugin-manifest.yaml` next to this file, loaded with
`load_package_manifest`), its own entry point, no ordering of its own, so the
resolver puts it in the extension slot of both chains. Off by default:

    tool_call_log:
      enabled: true
"""

from antler.plugin_api import Manifest, hookimpl, load_package_manifest


@hookimpl
def antler_plugin_specs() -> Manifest:
    return load_package_manifest(__name__)
