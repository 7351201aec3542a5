"""Old import paths that keep working for one minor version, with a warning.

A public name that moves keeps its old path until the next minor release: the
old module becomes a stub whose names are looked up on use (PEP 562), each
with a `DeprecationWarning` that names the import to write instead. The policy
is in docs/plugins.md ("Versions and deprecations").
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["REMOVED_IN", "moved_names"]

REMOVED_IN = "0.2"
"""The release that drops the paths deprecated in this one (the next minor)."""


def moved_names(old_module: str, new_module: str, names: Iterable[str], *,
                renamed: dict[str, str] | None = None,
                elsewhere: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A module `__getattr__` for `old_module`, whose `names` now live in `new_module`
    (`renamed`: old name -> new name where it changed; `elsewhere`: name -> the module
    of a name that is not in `new_module`). Python shows each warning once per place."""
    renamed = dict(renamed or {})
    elsewhere = dict(elsewhere or {})
    known = frozenset(names) | frozenset(renamed) | frozenset(elsewhere)

    def __getattr__(name: str) -> Any:
        if name not in known:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        module = elsewhere.get(name, new_module)
        new_name = renamed.get(name, name)
        warnings.warn(
            f"{old_module}.{name} is deprecated and will be removed in antler {REMOVED_IN}: "
            f"use `from {module} import {new_name}`",
            DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), new_name)

    return __getattr__
