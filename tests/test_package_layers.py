"""The split packages import one way: each module only from those above it.

`antler.runtime.storage` was five modules that imported each other in a
circle, hidden by imports inside functions; `antler.chain.config` and
`antler.testing.conformance` were one long module each. Each package's order
is written down here (and in its `__init__` docstring); a module importing one
below it, or importing a sibling inside a function or class, fails with the
module and line named.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import antler.runtime.storage as storage_package

PACKAGE = "antler.runtime.storage"
ORDER = ["base", "savers", "deltas", "postgres", "failures", "owners", "locks", "sqlite",
         "store", "opening", "admin", "__init__"]
"""The storage modules, lowest first: a module may import only those before it."""

ORDERS = {
    PACKAGE: ORDER,
    "antler.chain.config": ["storage", "models", "mcp", "plugins", "agent", "operatorconfig",
                            "schema", "checks", "loader", "__init__"],
    "antler.testing.conformance": ["rules", "plain", "recording", "plugin", "scenario",
                                   "statekeys", "blocking", "worker", "runs", "checks",
                                   "suite", "__init__"],
}
"""Each split package's modules, lowest first."""


def _sibling(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The sibling modules of `package` that the import statement `node` names."""
    if isinstance(node, ast.Import):
        return [alias.name.removeprefix(f"{package}.").split(".")[0]
                for alias in node.names if alias.name.startswith(f"{package}.")]
    if node.level == 1:
        if node.module:
            return [node.module.split(".")[0]]
        return [alias.name for alias in node.names]  # from . import x
    if node.level == 0 and node.module:
        if node.module == package:
            return ["__init__"]
        if node.module.startswith(f"{package}."):
            return [node.module.removeprefix(f"{package}.").split(".")[0]]
    return []


def layer_violations(directory: Path, order: list[str], package: str = PACKAGE) -> list[str]:
    """Every import in `directory` against `order`, as 'module.py:line: what is wrong'."""
    problems = []
    modules = sorted(path.stem for path in directory.glob("*.py"))
    problems += [f"{name}.py: not placed in the package order; add it to the order (and to "
                 "the package docstring) where its imports put it"
                 for name in modules if name not in order]
    for name in modules:
        if name not in order:
            continue
        tree = ast.parse((directory / f"{name}.py").read_text(encoding="utf-8"))
        nested: set[int] = set()
        for scope in ast.walk(tree):
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                nested |= {id(inner) for inner in ast.walk(scope) if inner is not scope}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _sibling(node, package):
                where = f"{name}.py:{node.lineno}"
                if id(node) in nested:
                    problems.append(f"{where}: imports {target} inside a function or class; "
                                    "import it at the top of the module")
                if target not in order:
                    problems.append(f"{where}: imports {target}, which is not in the order")
                elif order.index(target) >= order.index(name):
                    problems.append(f"{where}: imports {target}, which comes after {name} "
                                    "in the package order (a backward import makes a circle)")
    return problems


@pytest.mark.parametrize("package", sorted(ORDERS))
def test_the_package_imports_one_way(package):
    directory = Path(importlib.import_module(package).__file__ or "").parent
    assert layer_violations(directory, ORDERS[package], package) == []


@pytest.mark.parametrize("package", sorted(ORDERS))
def test_every_module_of_the_package_is_in_its_order(package):
    directory = Path(importlib.import_module(package).__file__ or "").parent
    assert sorted(ORDERS[package]) == sorted(path.stem for path in directory.glob("*.py"))


def test_a_backward_or_hidden_import_is_named_with_its_line(tmp_path):
    (tmp_path / "base.py").write_text(
        "from .store import LazyStore\n"  # base may import nothing of the package
        "def opener():\n"
        "    from antler.runtime.storage.sqlite import open_sqlite\n"
        "    return open_sqlite\n", encoding="utf-8")
    (tmp_path / "store.py").write_text("from .base import opener\nfrom . import extra\n",
                                       encoding="utf-8")
    (tmp_path / "extra.py").write_text("", encoding="utf-8")
    problems = layer_violations(tmp_path, ["base", "sqlite", "store"])
    assert problems == [
        "extra.py: not placed in the package order; add it to the order (and to the "
        "package docstring) where its imports put it",
        "base.py:1: imports store, which comes after base in the package order (a backward "
        "import makes a circle)",
        "base.py:3: imports sqlite inside a function or class; import it at the top of the "
        "module",
        "base.py:3: imports sqlite, which comes after base in the package order (a backward "
        "import makes a circle)",
        "store.py:2: imports extra, which is not in the order",
    ]


def test_the_package_face_exports_what_its_users_import():
    """Code outside the package imports from `antler.runtime.storage` only names of its
    `__all__` (or a module of it), so the face is the one import point to keep."""
    root = Path(__file__).resolve().parents[1]
    outside = []
    for folder in ("core", "plugins", "contrib", "tests", "benchmarks"):
        for path in (root / folder).rglob("*.py"):
            if "storage" in path.parts and path.parent.name == "storage":
                continue
            text = path.read_text(encoding="utf-8")
            if PACKAGE not in text:
                continue
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
                    outside += [f"{path.relative_to(root)}:{node.lineno}: {alias.name}"
                                for alias in node.names
                                if alias.name not in storage_package.__all__
                                and alias.name not in ORDER]
    assert outside == []
    assert all(hasattr(storage_package, name) for name in storage_package.__all__)
