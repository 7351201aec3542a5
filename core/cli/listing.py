"""A command's line in `antler --help`, read from its module's source, not by importing it.

`antler --help` lists every top-level command with the first sentence of its
help. Click reads that from the command object, which means importing the
module that defines it: for `antler chain` the resolver, for a plugin's command
(`antler memory`) the plugin API, half a second in all before anything is
shown. `listed` finds the module's file the way the import system would,
without running it or its packages, parses it, and builds a stand-in command
that carries only what the listing shows: the help, short help, hidden and
deprecated flags, as the ``@click.command``/``@click.group`` decorator of the
named function gives them (its arguments, else the function's docstring).
Click then shortens the text as it does for the real command.

When the source cannot tell (no such file, the attribute is no decorated
function, a decorator argument is not a literal), `listed` returns None and
the caller imports the command as before.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from typing import Any

import click

__all__ = ["listed"]

_DECORATORS = frozenset({"command", "group"})
_SHOWN = ("help", "short_help", "hidden", "deprecated")
"""The decorator arguments the listing shows."""


def listed(name: str, target: str) -> click.Command | None:
    """A stand-in for the command `target` ('module:attribute') as `antler --help` lists it."""
    module, _, attribute = target.partition(":")
    shown = _shown(module, attribute)
    return None if shown is None else click.Command(name, **shown)


@cache
def _shown(module: str, attribute: str) -> dict[str, Any] | None:
    path = _source_path(module)
    if path is None or not attribute:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read(), path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attribute:
            return _decorated(node)
    return None


def _decorated(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, Any] | None:
    """What the outermost command decorator of `function` gives the listing (None: unknown)."""
    if not function.decorator_list:
        return None
    decorator = function.decorator_list[0]
    call = decorator if isinstance(decorator, ast.Call) else None
    called = call.func if call is not None else decorator
    name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
    if name not in _DECORATORS:
        return None
    shown: dict[str, Any] = {}
    for keyword in call.keywords if call is not None else ():
        if keyword.arg is None:
            return None  # **attrs: anything may be in there
        if keyword.arg in _SHOWN:
            if not isinstance(keyword.value, ast.Constant):
                return None
            shown[keyword.arg] = keyword.value.value
    if shown.get("help") is None:
        shown["help"] = ast.get_docstring(function, clean=False)
    return shown


def _source_path(module: str) -> str | None:
    """The ``.py`` file of `module`, found as importing it would find it, nothing run."""
    parts = module.split(".")
    search: Any = None
    spec: Any = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        loaded = sys.modules.get(name)
        if loaded is not None and depth < len(parts):
            search = getattr(loaded, "__path__", None)
        else:
            spec = _find_spec(name, search)
            if spec is None:
                return None
            search = spec.submodule_search_locations
        if depth < len(parts) and search is None:
            return None  # a module, not a package, on the way
    origin = getattr(spec, "origin", None)
    return origin if isinstance(origin, str) and origin.endswith(".py") else None


def _find_spec(name: str, search: Any) -> Any:
    """The spec the import system's finders give `name` under the package path `search`."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, search)
        except (ImportError, TypeError, ValueError):
            continue
        if spec is not None:
            return spec
    return None
