"""Deprecated: these names are on the plugin SDK, `antler.plugin_api`.

Kept until antler 0.2; each name warns (`DeprecationWarning`) with the import to write.
"""

import warnings
from typing import Any

import antler.plugin_api

# Written out like authz.py rather than built by `antler.deprecation.moved_names`: a
# plugin imports only the SDK (tests/test_import_layers.py). Both stubs go in 0.2.
_MOVED = frozenset([
        "HistoryFold"
])


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} is deprecated and will be removed in antler 0.2: "
                  f"use `from antler.plugin_api import {name}`", DeprecationWarning,
                  stacklevel=2)
    return getattr(antler.plugin_api, name)
