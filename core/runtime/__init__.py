"""The runtime: what a built chain runs with.

The agent factory (`agent`), delegation to subagents (`delegation`), hook
tracing (`tracing`), storage (`storage`), sandbox providers (`sandbox`), chat
models (`models`) and the demo scenario (`demo`). The plugin-facing parts (the
run context, thread paths, uploads, the sandbox provider interface) live
below, in `antler.contracts` and `antler.plugin_api`.

Importing the runtime gives every build its default services (`_defaults`):
plugins ask for them by name and never import the runtime.
"""

from . import _defaults as _defaults
