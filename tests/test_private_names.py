"""No Antler module imports another Antler module's private (underscore) names.

A name with a leading underscore is its module's own business: when two modules
share an internal, it lives in one module under a public name (as
`antler.compiler.steps` holds what the compiler's nodes share). A private
*module* may be imported from inside the package that owns it (the runtime's
`_defaults`, the built-in plugins' `antler.plugins._lib`), never from outside.

Checked over the source of core/, plugins/ and contrib/, every import statement
(including those inside functions). A failure names the file, the line and the name.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"core": "antler", "plugins": "antler.plugins", "contrib": "antler.contrib"}

ALLOWED: dict[tuple[str, str], str] = {}
"""(importing module, imported `module.name`) -> why it may; empty: no exceptions."""


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def _may_import(module: str, dotted: str) -> bool:
    """Whether `module` may import `dotted`: each private part of it must be a module
    of a package that `module` is inside."""
    parts = dotted.split(".")
    for index, part in enumerate(parts):
        if not _is_private(part):
            continue
        if not _inside(module, ".".join(parts[:index])):
            return False
        if index == len(parts) - 1 and not _is_module(dotted):
            return False  # a private function, class or constant: never shared
    return True


def private_imports(source: str, module: str, *, package: bool = False,
                    ) -> list[tuple[int, str]]:
    """(line, `module.name`) of each private Antler name `module`'s `source` imports.

    `package` says the source is a package's `__init__`. Importing a private
    submodule of a package the importer is inside is not counted.
    """
    here = module if package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            if not _inside(origin, "antler"):
                continue
            names = [f"{origin}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if _inside(alias.name, "antler")]
        else:
            continue
        found.extend((node.lineno, name) for name in names if not _may_import(module, name))
    return sorted(found)


def _module_of(path: Path) -> tuple[str, bool]:
    relative = path.relative_to(ROOT)
    parts = list(relative.with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    return ".".join([SOURCES[parts[0]], *parts[1:]]), package


def test_no_module_imports_another_modules_private_name():
    offenders = []
    for directory in SOURCES:
        for path in sorted((ROOT / directory).rglob("*.py")):
            module, package = _module_of(path)
            for line, name in private_imports(path.read_text(encoding="utf-8"), module,
                                              package=package):
                if (module, name) not in ALLOWED:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert offenders == [], (
        "private names imported across modules (give the shared internal a public name "
        "in one module): " + "; ".join(offenders))


def test_the_detector_catches_each_form():
    source = (
        "from .model_node import _task_key, ending_edge\n"
        "from antler.compiler.nodes import _Step\n"
        "from .. import _one_line\n"
        "def late():\n"
        "    from antler.compiler.fusionplan import _DESTINATIONS\n"
        "import antler.runtime._defaults\n"
    )
    found = private_imports(source, "antler.compiler.tools_node")
    assert found == [
        (1, "antler.compiler.model_node._task_key"),
        (2, "antler.compiler.nodes._Step"),
        (3, "antler._one_line"),
        (5, "antler.compiler.fusionplan._DESTINATIONS"),
        (6, "antler.runtime._defaults"),
    ]


def test_a_packages_own_private_module_is_its_business():
    assert private_imports("from . import _defaults\n", "antler.runtime", package=True) == []
    assert private_imports("from antler.plugins._lib.text import x\n",
                           "antler.plugins.memory.middleware") == []
    assert private_imports("from antler.plugins._lib.text import x\n",
                           "antler.runtime.agent") == [(1, "antler.plugins._lib.text.x")]
    # A private name of the package's own __init__ is not a module: still private.
    assert private_imports("from . import _one_line\n", "antler.cli.replay") == [
        (1, "antler.cli._one_line")]
