"""pluggy's markers for Antler's hooks: `hookspec` declares one, `hookimpl` implements one.

Their own module so that anything implementing a hook (a manifest's plugin hook,
say) needs nothing else of `hookspecs`.
"""

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "antler"
"""pluggy's project name for Antler's hooks."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
