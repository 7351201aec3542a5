"""Every `antler.x.y` the prose names exists: docs stay true when modules move.

Scanned: README.md, docs/*.md, pyproject.toml, the YAML and Markdown files under core/,
plugins/, contrib/, tests/, benchmarks/ and examples/, and the docstrings and comments of
their Python files (code itself is checked by importing it; this file's own examples,
such as `antler.a.b`, are left out). A name is `antler.a.b` (a module, or a module attribute such
as `antler.runtime.paths.PathLayout`) or `antler.a.b:Name` (an entry-point style
target). Each distinct name is checked once.

The check reads the sources instead of importing them, so it stays fast: a module is
found the way the import system finds it (the installed `antler` package's search
path, then each sub-package's), and an attribute is a name the module binds at top
level (a def, class, assignment or import, followed through re-exports; a class's
own members for `Module.Class.member`). Only a module that binds names dynamically
(`from x import *`, a module `__getattr__`) is imported for real.

Names that are not modules are left alone: file names (`antler.yaml`), and names the
code itself uses as strings (entry-point groups such as `antler.sandbox_providers`,
logger names such as `antler.audit.sandbox`, and their dotted prefixes).
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("docs-paths")
"""One worker runs these tests: they share the scan of the sources and what it resolved."""

ROOT = Path(__file__).resolve().parent.parent
SOURCE_TREES = ("core", "plugins", "contrib", "tests", "benchmarks", "examples")
THIS_FILE = Path(__file__).resolve()
CODE_TREES = ("core", "plugins", "contrib")
"""Where a name used as a string (a logger, an entry-point group) counts as not a module."""

NAME = re.compile(r"(?<![\w.])antler(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_][\w.]*)?")
"""`antler.a.b` or `antler.a.b:Name`, not preceded by a word character or a dot."""

FILE_SUFFIXES = {"yaml", "yml", "json", "toml", "md", "txt", "db", "sqlite", "html", "log",
                 "py", "lock", "cfg", "ini", "sh"}
"""A last component that makes `antler.x` a file name, not a module path."""


@dataclass(frozen=True)
class Mention:
    """One name at one place."""

    path: str
    line: int
    name: str


def _names_in(path: Path, text: str, first_line: int = 1) -> list[Mention]:
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    found = []
    for offset, line in enumerate(text.splitlines()):
        for match in NAME.finditer(line):
            name = match.group().rstrip(".")
            found.append(Mention(rel, first_line + offset, name))
        for match in FROM_IMPORT.finditer(line):  # `from antler.x import A, B` in an example
            module, names = match.groups()
            found += [Mention(rel, first_line + offset, f"{module}:{name.strip()}")
                      for name in names.split(",")]
    return found


TOP_IMPORT = re.compile(r"(?:from|import)\s+antler\b")
"""A module-level import in code: checked by importing the module, not here."""
FROM_IMPORT = re.compile(r"\bfrom\s+(antler(?:\.\w+)*)\s+import\s+\(?\s*(\w+(?:\s*,\s*\w+)*)")
QUOTED_NAME = re.compile(r"""["'](antler(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_][\w.]*)?)["']""")
BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _docstring_lines(tree: ast.Module) -> list[tuple[int, int]]:
    """The line spans of strings that stand as statements (docstrings), statements only."""
    spans = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for field in BODIES:
            for child in getattr(node, field, None) or ():
                if (isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant)
                        and isinstance(child.value.value, str)):
                    spans.append((child.lineno, child.end_lineno or child.lineno))
                elif isinstance(child, ast.AST):
                    pending.append(child)
    return spans


def _comment_start(line: str) -> int:
    """Where a line's comment starts (-1: none), skipping `#` inside quotes."""
    quote = ""
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#":
            return index
    return -1


def _python_prose(path: Path) -> tuple[list[Mention], set[str]]:
    """The names in a Python file's docstrings and comments, and its `antler.*` string constants.

    A docstring is a string that stands as a statement of its own (module, class and
    function docstrings, and the ones documenting a constant); a comment is what
    follows a `#` outside quotes. Only lines that name something are looked at.
    """
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    wanted = [number for number, line in enumerate(lines, 1)
              if NAME.search(line) and not TOP_IMPORT.match(line)]
    constants = {match.group(1) for match in QUOTED_NAME.finditer(source)}
    if not wanted:
        return [], constants
    spans = _docstring_lines(ast.parse(source, str(path)))
    mentions: list[Mention] = []
    for number in wanted:
        line = lines[number - 1]
        if any(first <= number <= last for first, last in spans):
            mentions += _names_in(path, line, number)
        elif (start := _comment_start(line)) >= 0:
            mentions += _names_in(path, line[start:], number)
    return mentions, constants


@cache
def _scan() -> tuple[tuple[Mention, ...], frozenset[str]]:
    mentions: list[Mention] = []
    constants: set[str] = set()
    texts = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").glob("*.md"))]
    for tree in SOURCE_TREES:
        texts += sorted((ROOT / tree).rglob("*.yaml")) + sorted((ROOT / tree).rglob("*.md"))
    for path in texts:
        mentions += _names_in(path, path.read_text(encoding="utf-8"))
    for tree in SOURCE_TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if path == THIS_FILE or _deprecated_facade(path):
                continue  # a deprecated facade names itself, and the place it moved to
            found, used = _python_prose(path)
            mentions += found
            if tree in CODE_TREES:
                constants |= used
    return tuple(mentions), frozenset(constants)


# -- resolving a name from the sources ---------------------------------------------------


@cache
def _module_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """Where module `name` would be loaded from, found without importing its packages."""
    parent, _, _ = name.rpartition(".")
    path = None
    if parent:
        parent_spec = _module_spec(parent)
        if parent_spec is None or not parent_spec.submodule_search_locations:
            return None
        path = list(parent_spec.submodule_search_locations)
    for finder in sys.meta_path:  # the editable install's finder maps antler.plugins and .contrib
        find = getattr(finder, "find_spec", None)
        spec = find(name, path) if find else None
        if spec is not None:
            return spec
    return None


@cache
def _module_tree(name: str) -> ast.Module | None:
    spec = _module_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a body, descending into top-level if/try blocks."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for handler in node.handlers:
                out += _top_level(handler.body)
    return out


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return []
    names = []
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                names.append(sub.id)
    return names


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if _is_package(module) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _is_package(module: str) -> bool:
    spec = _module_spec(module)
    return bool(spec and spec.submodule_search_locations)


class _Dynamic(Exception):
    """The sources cannot say: the module binds names at import time."""


def _find_in_body(body: list[ast.stmt], module: str, parts: list[str]) -> bool:
    head, rest = parts[0], parts[1:]
    for node in _top_level(body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == head:
                if not rest:
                    return True
                if isinstance(node, ast.ClassDef):
                    return _find_in_body(node.body, module, rest)
                raise _Dynamic  # an attribute of a function: only an import can tell
        elif head in _targets(node):
            if rest:
                raise _Dynamic  # an attribute of a value
            return True
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                if alias.name == "*":
                    raise _Dynamic
                if (alias.asname or alias.name) == head:
                    return _resolve_attribute(source, [alias.name, *rest])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == head:
                    return _resolve(f"{alias.name}{'.' + '.'.join(rest) if rest else ''}")
    return False


def _is_deprecation_stub(tree: ast.Module) -> bool:
    """Whether a module only forwards moved names: its docstring opens "Deprecated", or
    its `__getattr__` is bound by `antler.deprecation.moved_names`."""
    doc = ast.get_docstring(tree) or ""
    return doc.startswith("Deprecated") or any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__getattr__" for t in node.targets)
        for node in tree.body)


def _deprecated_facade(path: Path) -> bool:
    """`_is_deprecation_stub` for a file, parsing only the few that can be one (parsing
    every file, deeply nested test data included, is slow and trips a CPython 3.11 bug)."""
    text = path.read_text(encoding="utf-8")
    if "moved_names" not in text and not text.lstrip().startswith('"""Deprecated'):
        return False
    return _is_deprecation_stub(ast.parse(text, str(path)))


def _resolve_attribute(module: str, parts: list[str]) -> bool:
    """Whether `module` has attribute path `parts` (a submodule counts, as for `import`)."""
    if not module.startswith("antler"):
        return True  # a third-party re-export: its own project keeps it true
    if _module_spec(f"{module}.{parts[0]}") is not None:
        return _resolve(".".join([module, *parts]))
    tree = _module_tree(module)
    if tree is None:
        return False
    if _is_deprecation_stub(tree):
        return False  # a deprecated path still imports, but prose names the new one
    if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in tree.body):
        raise _Dynamic
    return _find_in_body(tree.body, module, parts)


@cache
def _resolve(name: str) -> bool:
    """Whether dotted `name` (a module, or a module attribute path) exists."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if _module_spec(module) is not None:
            return cut == len(parts) or _resolve_attribute(module, parts[cut:])
    return False


def _resolve_by_import(name: str) -> bool:
    module, _, attribute = name.partition(":")
    parts = module.split(".")
    rest: list[str] = []
    while parts:
        try:
            obj = importlib.import_module(".".join(parts))
            break
        except ModuleNotFoundError:
            rest.insert(0, parts.pop())
    else:
        return False
    for part in rest + (attribute.split(".") if attribute else []):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def exists(name: str) -> bool:
    """Whether `antler.a.b` or `antler.a.b:Name` names something that imports."""
    dotted = name.replace(":", ".")
    if ":" in name:
        module = name.partition(":")[0]
        if _module_spec(module) is None:
            return False
    try:
        return _resolve(dotted)
    except _Dynamic:
        return _resolve_by_import(name)


# -- telling the reader what to write instead ---------------------------------------------


@cache
def _all_modules() -> tuple[str, ...]:
    found = []
    for tree, package in (("core", "antler"), ("plugins", "antler.plugins"),
                          ("contrib", "antler.contrib")):
        for path in (ROOT / tree).rglob("*.py"):
            rel = path.relative_to(ROOT / tree).with_suffix("")
            if "examples" in rel.parts:
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            found.append(".".join([package, *parts]))
    return tuple(sorted(set(found)))


def _binds(module: str, wanted: str) -> str | None:
    """How `module` binds `wanted` at top level: "defines", "imports", or None."""
    tree = _module_tree(module)
    if tree is None:
        return None
    for node in _top_level(tree.body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == wanted:
                return "defines"
        elif wanted in _targets(node):
            return "defines"
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (alias.asname or alias.name) == wanted for alias in node.names):
            return "imports"
    return None


def suggestions(name: str) -> list[str]:
    """Where the missing part of `name` lives now, as full names to write instead.

    A module of the same name first, then the module that defines the attribute, then
    the shortest paths that re-export it (a stable face such as `antler.context`).
    """
    parts = name.replace(":", ".").split(".")
    for split in range(len(parts) - 1, 0, -1):
        wanted, tail = parts[split], parts[split + 1:]
        ranked: list[tuple[int, int, str]] = []
        for module in _all_modules():
            if module.rsplit(".", 1)[-1] == wanted:
                ranked.append((0, module.count("."), ".".join([module, *tail])))
                continue
            how = _binds(module, wanted)
            if how:
                rank = 1 if how == "defines" else 2
                ranked.append((rank, module.count("."), ".".join([module, wanted, *tail])))
        hits = [hit for _, _, hit in sorted(ranked) if exists(hit)]
        if hits:
            return hits[:3]
    return []


def _not_a_module(name: str, constants: frozenset[str]) -> bool:
    if name.replace(":", ".").rsplit(".", 1)[-1] in ("x", "X"):
        return True  # a placeholder, as in `from antler.x import X`
    if name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
        return True
    return any(constant == name or constant.startswith(name + ".") for constant in constants)


def test_every_antler_path_named_in_prose_imports():
    mentions, constants = _scan()
    assert len(mentions) > 100, "the scan found almost nothing: check the patterns"
    verdicts: dict[str, bool] = {}
    for mention in mentions:
        if mention.name not in verdicts:
            verdicts[mention.name] = exists(mention.name) or _not_a_module(mention.name, constants)
    problems = []
    for mention in mentions:
        if not verdicts[mention.name]:
            hint = suggestions(mention.name)
            instead = f"; it is now {' or '.join(hint)}" if hint else ""
            problems.append(
                f"{mention.path}:{mention.line}: {mention.name} does not import{instead}")
    assert not problems, (
        f"{len(problems)} mention(s) of Antler names that do not import (the module moved or "
        "the name is misspelt; fix the text, or the code if the name should exist):\n"
        + "\n".join(problems))


def test_the_check_rejects_what_does_not_import():
    """The resolver can fail: moved modules, missing attributes and members, bad targets."""
    assert exists("antler.plugin_api.paths.PathLayout")
    assert exists("antler.plugin_api.context:BuildContext")
    assert not exists("antler.runtime.paths.PathLayout"), "a deprecated path is not named"
    assert exists("antler.errors")
    assert not exists("antler.paths.PathLayout")
    assert not exists("antler.plugin_api.paths.NoSuchLayout")
    assert not exists("antler.plugin_api.paths.PathLayout.no_such_member")
    assert not exists("antler.plugin_api.context:NoSuchContext")
    assert not exists("antler.nowhere:BuildContext")
    assert "antler.plugin_api.paths.PathLayout" in suggestions("antler.paths.PathLayout")


def test_the_scan_reads_prose_and_examples_not_code(tmp_path):
    """Docstrings, comments and the names an example imports are read; code is not."""
    module = tmp_path / "sample.py"
    module.write_text(
        '"""Uses `antler.paths.PathLayout`.\n\n'
        '    from antler.context import BuildContext, Gone\n"""\n'
        "from antler.errors import BuildError\n"
        "LOGGER = 'antler.audit.sample'  # see antler.tracing\n"
        "text = 'antler.not_prose # antler.in_a_string'\n", encoding="utf-8")
    mentions, constants = _python_prose(module)
    assert [(m.line, m.name) for m in mentions] == [
        (1, "antler.paths.PathLayout"), (3, "antler.context"),
        (3, "antler.context:BuildContext"), (3, "antler.context:Gone"), (6, "antler.tracing")]
    assert constants == {"antler.audit.sample"}
    assert not exists("antler.plugin_api:Gone") and exists("antler.plugin_api:BuildContext")
