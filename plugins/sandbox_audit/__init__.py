"""The sandbox_audit plugin: its spec is in its plugin-manifest.yaml (see middleware.py).

It classifies every shell command (block / warn / pass) before the sandbox runs
it. Importing this package stays cheap: the middleware, the classifier
(`classifier.py`: the walk, taint, per-command and loop rules in `walk.py`,
`taint.py`, `commands.py`, `loops.py`, the rules as data in `rules.py`) and its two
front ends
(`splitter.py`, and `bashlex_walker.py` run in a bounded worker process by
`parse_worker.py`) are imported only when a chain that includes the plugin is
built.
"""

from antler.plugin_api import manifest_plugin_hook

antler_plugin_specs = manifest_plugin_hook(__name__)
