"""The import layers: plugins see only the SDK, and the core's layers import downwards.

Three rules, checked over the source (every import statement, including those inside
functions, so a late import cannot hide a dependency):

1. A built-in plugin (`plugins/`) or an extension (`contrib/`) imports from Antler
   only `antler.plugin_api` (the SDK, never one of its submodules), its own
   package, and, for built-ins, the shared helpers under `antler.plugins._lib`.
   A plugin's package is the nearest one whose `__init__.py` defines the plugin
   hook `antler_plugin_specs` (an entry point names it), so a plugin nested in
   another's folder imports neither its parent's modules nor they its.
2. The core imports downwards through its layers, lowest first:
   errors/compat (and the parse limits) < contracts < plugin_api < compiler <
   chain (with the DeerFlow importer and the `record:` settings) < runtime (with
   record and replay) < cli/testing (with the top-level modules and the replay
   suite, which drives the CLI's session). A module may import
   its own layer and the layers below it. Imports under `if TYPE_CHECKING:` are
   annotations only and are not counted for the core (they are for plugins).

3. No module imports itself around a circle: counting the imports a module makes when it
   is imported (top-level ones and those under `if TYPE_CHECKING:`), the modules form no
   cycle, so each can be read (and imported) before the ones that use it.

A failure names the file, the line, the importing module and the import (for a circle,
the modules around it).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"core": "antler", "plugins": "antler.plugins", "contrib": "antler.contrib"}

CORE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("antler", "antler.errors", "antler.compat", "antler.deprecation", "antler.parselimits",
     "antler.jsonsource"),
    ("antler.contracts",),
    ("antler.plugin_api",),
    ("antler.compiler",),
    ("antler.chain", "antler.deerflow", "antler.replay.settings"),
    ("antler.runtime", "antler.replay"),
    ("antler.cli", "antler.testing", "antler.replay.suite", "antler.server", "antler.agent",
     "antler.models", "antler.context", "antler.hookspecs", "antler.manifest", "antler.runcontext",
     "antler.__main__", "antler.examples"),
)
"""The core's layers, lowest first; a module belongs to the layer of its longest prefix."""

SDK = "antler.plugin_api"
SHARED_HELPERS = "antler.plugins._lib"


@dataclass(frozen=True)
class Import:
    """One `import`/`from ... import` of an Antler module."""

    file: Path
    line: int
    importer: str
    imported: str
    text: str
    type_only: bool

    def __str__(self) -> str:
        return (f"{self.file.relative_to(ROOT)}:{self.line}: {self.importer} imports "
                f"{self.imported}: {self.text.strip()}")


def module_name(path: Path) -> str:
    """The dotted name of a source file, as installed (`core/x.py` is `antler.x`)."""
    top, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = [SOURCES[top], *rest]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path) -> Iterator[Import]:
    """Every import of an `antler` module in `path` (relative imports resolved)."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines()
    importer = module_name(path)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    type_only = _type_checking_lines(tree)
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from antler import x` imports the module antler.x; `from pkg import name`
            # imports pkg (its __init__ runs), whatever name is
            targets = ([f"antler.{alias.name}" for alias in node.names] if module == "antler"
                       else [module])
        for target in dict.fromkeys(targets):
            if target == "antler" or target.startswith("antler."):
                yield Import(path, node.lineno, importer, target,
                             "\n".join(lines[node.lineno - 1:node.end_lineno]),
                             node.lineno in type_only)


def sources(top: str) -> list[Path]:
    return sorted((ROOT / top).rglob("*.py"))


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def plugin_packages(top: str) -> set[str]:
    """The packages of `top` (plugins, contrib) that are a plugin's own: each one whose
    `__init__.py` defines the plugin hook `antler_plugin_specs` (an entry point's target),
    and each top-level package (`antler.plugins._lib` for the shared helpers)."""
    packages = {".".join(module_name(path).split(".")[:3]) for path in sources(top)}
    packages.update(module_name(path) for path in (ROOT / top).rglob("__init__.py")
                    if "antler_plugin_specs" in path.read_text(encoding="utf-8"))
    return packages


def own_package(module: str, packages: set[str]) -> str:
    """The plugin package of `module`: the longest of `packages` it is within
    (`antler.plugins.input_sanitization.provenance` for input_provenance's modules, not its
    parent folder's plugin)."""
    within = [package for package in packages if _within(module, package)]
    return max(within, key=len) if within else ".".join(module.split(".")[:3])


def plugin_violations(top: str) -> list[Import]:
    bad = []
    packages = plugin_packages(top)
    for path in sources(top):
        for found in imports_of(path):
            own = own_package(found.importer, packages)
            allowed = (found.imported == SDK
                       or own_package(found.imported, packages) == own
                       or (top == "plugins" and _within(found.imported, SHARED_HELPERS)))
            if not allowed:
                bad.append(found)
    return bad


def layer_of(module: str) -> int:
    best, layer = -1, -1
    for index, prefixes in enumerate(CORE_LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and len(prefix) > best:
                best, layer = len(prefix), index
    if layer < 0:
        raise AssertionError(f"{module} is in no layer of CORE_LAYERS: add it to one")
    return layer


def core_violations() -> list[Import]:
    bad = []
    for path in sources("core"):
        for found in imports_of(path):
            if found.type_only:
                continue
            if _within(found.imported, "antler.plugins") or _within(found.imported,
                                                                     "antler.contrib"):
                bad.append(found)  # the core never imports a plugin
            elif layer_of(found.imported) > layer_of(found.importer):
                bad.append(found)
    return bad


@pytest.mark.parametrize("top", ["plugins", "contrib"])
def test_plugins_import_only_the_sdk(top):
    bad = plugin_violations(top)
    assert not bad, (f"{top}/ may import from Antler only `antler.plugin_api` (not its "
                     "submodules), its own package" + (" and antler.plugins._lib"
                     if top == "plugins" else "") + ":\n" + "\n".join(map(str, bad)))


def test_core_imports_follow_the_layers():
    bad = core_violations()
    names = " < ".join("/".join(p.removeprefix("antler.") for p in layer[:2])
                       for layer in CORE_LAYERS)
    assert not bad, (f"the core's layers import only downwards ({names}); these import "
                     "upwards (move the shared part down):\n"
                     + "\n".join(f"{found} [layer {layer_of(found.imported)} > "
                                 f"{layer_of(found.importer)}]" for found in bad))


def test_the_check_sees_a_violation(tmp_path, monkeypatch):
    """The checks find a late (function-level) import and name its file and line."""
    plugin = ROOT / "plugins" / "title" / "middleware.py"
    text = plugin.read_text(encoding="utf-8")
    fake = tmp_path / "plugins" / "title" / "middleware.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(text + "\n\ndef _late():\n    from antler.runtime.models import x\n",
                    encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = [str(i) for i in imports_of(fake) if i.imported.startswith("antler.runtime")]
    assert found == [f"plugins/title/middleware.py:{len(text.splitlines()) + 4}: "
                     "antler.plugins.title.middleware imports antler.runtime.models: "
                     "from antler.runtime.models import x"]
    assert layer_of("antler.runtime.storage.sqlite") > layer_of("antler.plugin_api.context")


def test_the_check_sees_a_plugin_importing_the_plugin_around_it(tmp_path, monkeypatch):
    """A plugin nested in another's folder (its own `antler_plugin_specs`) that imports its
    parent's module, absolutely or relatively, is refused, and so is the parent importing
    the nested plugin; a module of the nested plugin importing its own sibling is not."""
    hook = "antler_plugin_specs = None\n"
    files = {
        "outer/__init__.py": hook, "outer/middleware.py": "from .inner import shared\n",
        "outer/inner/__init__.py": hook, "outer/inner/shared.py": "",
        "outer/inner/middleware.py": ("from antler.plugins.outer.middleware import x\n"
                                      "from ..middleware import y\nfrom . import shared\n"),
    }
    for name, text in files.items():
        (tmp_path / "plugins" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "plugins" / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)

    found = sorted((i.importer, i.line, i.imported) for i in plugin_violations("plugins"))
    assert found == [
        ("antler.plugins.outer.inner.middleware", 1, "antler.plugins.outer.middleware"),
        ("antler.plugins.outer.inner.middleware", 2, "antler.plugins.outer.middleware"),
        ("antler.plugins.outer.middleware", 1, "antler.plugins.outer.inner"),
    ]


# -- no import circles ------------------------------------------------------------------------


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The Antler modules `path` imports at import time: its top-level imports and those under
    `if TYPE_CHECKING:` (annotations tie modules together too). `from pkg import sub` imports
    the module `pkg.sub` when there is one; a late import inside a function is not counted."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    importer = module_name(path)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    statements: list[ast.stmt] = []
    for node in tree.body:
        statements.append(node)
        if isinstance(node, (ast.If, ast.Try)):
            statements.extend(node.body)
    found: set[str] = set()
    for node in statements:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            subs = [f"{module}.{alias.name}" for alias in node.names]
            found.update(sub for sub in subs if sub in modules)
            if not any(sub in modules for sub in subs):
                found.add(module)
    return {name for name in found if name in modules and name != importer}


def import_circles() -> list[list[str]]:
    """Each group of Antler modules that import each other, directly or around a circle."""
    paths = {module_name(path): path for top in SOURCES for path in sources(top)}
    edges = {name: module_imports(path, set(paths)) for name, path in paths.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's strongly connected components
        order[name] = low[name] = len(order)
        stack.append(name)
        for other in edges[name]:
            if other not in order:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], order[other])
        if low[name] == order[name]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == name:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for name in sorted(paths):
        if name not in order:
            visit(name)
    return circles


def test_no_module_imports_itself_around_a_circle():
    circles = import_circles()
    assert not circles, ("these modules import each other around a circle (at import time or "
                         "for annotations); move what they share into a module below both:\n"
                         + "\n".join(" -> ".join(group) for group in circles))


def test_the_circle_check_sees_one(tmp_path, monkeypatch):
    for name, text in {"a.py": "from antler.b import x\n",
                       "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from . import a\n",
                       "c.py": "def late():\n    from antler import a\n"}.items():
        (tmp_path / "core" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "core" / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "SOURCES", {"core": "antler"})
    assert import_circles() == [["antler.a", "antler.b"]]
