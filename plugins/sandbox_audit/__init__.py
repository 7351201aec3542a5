"""The sandbox_audit plugin: its spec comes from Antler's manifest (see middleware.py).

It classifies every shell command (block / warn / pass) before the sandbox runs
it. Importing this package stays cheap: the middleware, the classifier
(`classifier.py`: the walk, taint, per-command and loop rules in `walk.py`,
`taint.py`, `commands.py`, `loops.py`, the rules as data in `rules.py`) and its two
front ends
(`splitter.py`, and `bashlex_walker.py` run in a bounded worker process by
`parse_worker.py`) are imported only when a chain that includes the plugin is
built.
"""

from antler.plugin_api import builtin_plugin_hook

antler_plugin_specs = builtin_plugin_hook("sandbox_audit")
