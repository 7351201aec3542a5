"""The sandbox_audit plugin: its spec comes from Antler's manifest (see middleware.py).

It classifies every shell command (block / warn / pass) before the sandbox runs
it. Importing this package stays cheap: the middleware, the classifier
(`classifier.py`, rules in `rules.py`) and its two front ends (`bashlex_walker.py`,
`splitter.py`) are imported only when a chain that includes the plugin is built.
"""

from antler.plugin_api.manifest import builtin_plugin_hook

antler_plugin_specs = builtin_plugin_hook("sandbox_audit")
