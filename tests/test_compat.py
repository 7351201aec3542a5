"""The private names Antler takes from its dependencies are all still there.

Each private name lives behind `antler.compat`; when an upgrade moves one,
this test fails naming it, before anything else breaks in a less clear way.
Nothing outside `antler.compat` may import a private module.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from antler import compat

ROOT = Path(__file__).resolve().parent.parent
PRIVATE_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+(langgraph\._\w+|stevedore\._\w+|langchain(?:_core)?\.\S*\._\w+)",
    re.MULTILINE)


@pytest.mark.parametrize(("module", "name"), [
    (module, name) for module, names in compat.LANGGRAPH_PRIVATE_NAMES.items()
    for name in names])
def test_every_private_langgraph_name_antler_uses_exists(module, name):
    loaded = importlib.import_module(module)
    assert hasattr(loaded, name), (
        f"{module}.{name} is gone from the installed LangGraph: antler.compat must find it "
        "elsewhere before the version pin in pyproject.toml is raised")


def test_the_durability_key_is_langgraphs():
    key = compat.langgraph_private("langgraph._internal._constants", "CONFIG_KEY_DURABILITY")
    assert key == compat.CONFIG_KEY_DURABILITY


def test_the_compat_helpers_return_what_langgraph_uses():
    from langgraph.graph import StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        x: int

    graph = StateGraph(State)
    graph.add_node("node", lambda state: {"x": state["x"] + 1})
    graph.set_entry_point("node")
    compiled = graph.compile()
    assert isinstance(compiled.nodes["node"].bound, compat.runnable_callable())
    thread, namespace, task = compat.task_config_keys()
    assert (thread, namespace) == ("thread_id", "checkpoint_ns") and task.startswith("__pregel")
    keys, as_tuples = compat.update_fields()
    assert callable(keys) and callable(as_tuples)


def test_stevedore_path_cache_is_where_compat_looks():
    from stevedore import _cache

    cache = getattr(_cache, "_c", None)
    assert cache is not None and isinstance(getattr(cache, "_internal", None), dict), (
        "stevedore's path cache moved: update antler.compat's stevedore helpers")
    cache._internal["probe"] = {}
    compat.clear_stevedore_path_cache()
    assert cache._internal == {}


def test_an_unvouched_private_name_is_refused():
    with pytest.raises(KeyError, match="LANGGRAPH_PRIVATE_NAMES"):
        compat.langgraph_private("langgraph._internal._constants", "CONFIG_KEY_SEND")


def test_nothing_but_compat_imports_a_private_module():
    offenders = []
    for directory in ("core", "plugins", "contrib"):
        for path in (ROOT / directory).rglob("*.py"):
            if path == ROOT / "core" / "compat.py":
                continue
            for match in PRIVATE_IMPORT.finditer(path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
    assert offenders == [], "import these through antler.compat: " + ", ".join(offenders)
