"""Old import paths keep working for one minor version, each with a warning naming the new one.

The policy (docs/plugins.md, "Versions and deprecations"): a public name that
moves keeps its old path until the next minor release, and every use of the
old path raises a `DeprecationWarning` that says what to import instead.
"""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import antler.plugin_api as sdk
from antler.deprecation import REMOVED_IN

ROOT = Path(__file__).resolve().parent.parent

MOVED = [
    # (old module, name, the import the warning must name, the object it must be)
    ("antler.context", "BuildContext", "from antler.plugin_api import BuildContext",
     sdk.BuildContext),
    ("antler.context", "PATHS", "from antler.plugin_api import PATHS", sdk.PATHS),
    ("antler.hookspecs", "hookimpl", "from antler.plugin_api import hookimpl", sdk.hookimpl),
    ("antler.hookspecs", "antler_tools",
     "from antler.plugin_api.hookspecs import antler_tools", None),
    ("antler.manifest", "load_package_manifest",
     "from antler.plugin_api import load_package_manifest", sdk.load_package_manifest),
    ("antler.runcontext", "run_context", "from antler.plugin_api import run_context",
     sdk.run_context),
    ("antler.runcontext", "run_key_of", "from antler.plugin_api import run_key_of",
     sdk.run_key_of),
    ("antler.runtime.runcontext", "RunContext", "from antler.plugin_api import RunContext",
     sdk.RunContext),
    ("antler.runtime.paths", "ThreadPaths", "from antler.plugin_api import ThreadPaths",
     sdk.ThreadPaths),
    ("antler.plugins._lib.historyfold", "HistoryFold",
     "from antler.plugin_api import HistoryFold", sdk.HistoryFold),
    ("antler.plugins._lib.authz", "GuardrailProvider",
     "from antler.plugin_api import GuardrailProvider", sdk.GuardrailProvider),
    ("antler.runtime.sandbox", "SandboxProvider",
     "from antler.plugin_api.sandbox import SandboxProvider", sdk.SandboxProvider),
]
DEPRECATED_MODULES = sorted({old for old, *_ in MOVED})


@pytest.mark.parametrize(("old", "name", "new", "expected"), MOVED,
                         ids=[f"{old}.{name}" for old, name, *_ in MOVED])
def test_an_old_path_works_and_warns_with_the_new_import(old, name, new, expected):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning) as caught:
        value = getattr(module, name)
    message = str(caught[0].message)
    assert f"{old}.{name} is deprecated" in message
    assert f"removed in antler {REMOVED_IN}" in message and f"`{new}`" in message
    # the warning points at the caller's line, not at the stub
    assert caught[0].filename == __file__
    if expected is not None:
        assert value is expected


def test_from_import_of_an_old_path_warns():
    with pytest.warns(DeprecationWarning, match="use `from antler.plugin_api import Services`"):
        from antler.context import Services
    assert Services is sdk.Services


def test_an_unknown_name_of_an_old_path_is_an_attribute_error():
    import antler.context

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
            antler.context.NoSuchName  # noqa: B018


def test_builtin_plugin_hook_is_deprecated_and_still_finds_the_spec():
    with pytest.warns(DeprecationWarning, match=r"manifest_plugin_hook\(__name__\)"):
        hook = sdk.builtin_plugin_hook("title")
    (spec,) = hook()
    assert spec.name == "title"
    assert spec.provenance.source.endswith("antler.plugins.title/plugin-manifest.yaml")


def _is_submodule(package: str, name: str) -> bool:
    """Whether `from package import name` imports a module (which a package whose other
    names moved keeps)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    return bool(spec and spec.submodule_search_locations) and (
        importlib.util.find_spec(f"{package}.{name}") is not None)


def test_antler_itself_uses_no_deprecated_path():
    """Core, plugins, contrib, the example and the tests (but this file) import the new paths."""
    stubs = set(DEPRECATED_MODULES)
    # Only a file naming a stub, or importing from a stub's package, can import one.
    needles = stubs | {f"{stub.rpartition('.')[0]} import" for stub in stubs}
    used = []
    for top in ("core", "plugins", "contrib", "tests", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == Path(__file__) or path.name == "test_import_layers.py":
                continue
            text = path.read_text(encoding="utf-8")
            if not any(needle in text for needle in needles):
                continue
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom) and (any(
                        node.module in stubs and not _is_submodule(node.module, alias.name)
                        for alias in node.names) or any(
                        f"{node.module}.{alias.name}" in stubs for alias in node.names)):
                    used.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}")
                elif isinstance(node, ast.Import):
                    used += [f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name}"
                             for alias in node.names if alias.name in stubs]
    assert not used, "deprecated import paths in use:\n" + "\n".join(used)


def test_the_sdk_lists_every_name_it_exports():
    """`__all__` is complete: every public name resolves, and `dir()` shows exactly them."""
    missing = [name for name in sdk.__all__ if not hasattr(sdk, name)]
    assert not missing
    assert sorted(set(sdk.__all__)) == sorted(sdk.__all__)
    assert set(sdk.__all__) <= set(dir(sdk))
