"""Entry point groups: each listed once, stevedore's managers over that list, and the
names a provider group offers.

Listing a group with `importlib.metadata` reads every installed distribution's
entry points; stevedore, asked to load the group, lists it again through its own
cache (a hash of every `sys.path` entry, then a JSON file). Antler lists a group
once (it needs the distributions behind the entry points anyway) and hands the
list to stevedore, which loads the entry points as it always does: failures go
to the manager's callback, a name two entry points share is stevedore's conflict.
(The managers subclass stevedore's unsubscripted: its classes are generic only in
recent releases.)

Authorization, guardrail and sandbox providers are found by name in their groups
(`providers`, `sandbox`): `registered_names` lists a group's names and
`unknown_name` says why a name is not one of them; each loader raises its own
error class with that text.
"""

from __future__ import annotations

import difflib
import importlib.metadata
from collections.abc import Iterable
from typing import Any

from stevedore import DriverManager, ExtensionManager

__all__ = ["ListedDriverManager", "ListedExtensionManager", "listed_entry_points",
           "registered_names", "unknown_name"]


def listed_entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    """The entry points of `group` in the installed distributions, each (name, value)
    once, in the order listed: a distribution found on two `sys.path` entries lists
    them twice, and stevedore keeps the first."""
    seen: set[tuple[str, str]] = set()
    listed = []
    for entry_point in importlib.metadata.entry_points(group=group):
        if (entry_point.name, entry_point.value) not in seen:
            seen.add((entry_point.name, entry_point.value))
            listed.append(entry_point)
    return listed


def registered_names(group: str) -> list[str]:
    """The names registered in entry point group `group`, sorted."""
    return sorted({entry_point.name for entry_point in listed_entry_points(group)})


def unknown_name(kind: str, name: str, group: str, available: list[str]) -> str:
    """Why `name` is not a `kind` provider: the closest registered name, all of them,
    and where providers register."""
    close = difflib.get_close_matches(name, available, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(repr(n) for n in available) if available else "none"
    return (f"Unknown {kind} provider {name!r}.{hint} Available providers: {listed}. "
            f"Providers register under the entry point group {group!r}.")


class ListedExtensionManager(ExtensionManager):
    """`ExtensionManager` of `namespace` loading `entry_points` (a `listed_entry_points`)."""

    def __init__(self, namespace: str, entry_points: Iterable[importlib.metadata.EntryPoint],
                 **options: Any) -> None:
        self._listed = list(entry_points)
        super().__init__(namespace, **options)

    def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
        return self._listed


# The same override for stevedore's other manager: each class keeps its own constructor.
class ListedDriverManager(DriverManager):
    """`DriverManager` of `namespace` choosing among `entry_points`."""

    def __init__(self, namespace: str, entry_points: Iterable[importlib.metadata.EntryPoint],
                 **options: Any) -> None:
        self._listed = list(entry_points)
        super().__init__(namespace, **options)

    def list_entry_points(self) -> list[importlib.metadata.EntryPoint]:
        return self._listed
