"""The private names Antler takes from its dependencies are all still there.

Each private name lives behind `antler.compat`; when an upgrade moves one,
this test fails naming it, before anything else breaks in a less clear way.
Nothing outside `antler.compat` may take a private name of a dependency in any
form: a private module (`from langgraph.pregel._write import ...`, `import
langgraph._internal._constants`), a private name imported from a module (`from
langchain.agents.factory import _wrap_trace_kwargs`), or a private attribute of
an imported module (`factory._chain_model_call_handlers`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from antler import compat

ROOT = Path(__file__).resolve().parent.parent
DEPENDENCY = re.compile(r"(?:langchain\w*|langgraph\w*|langsmith|stevedore)")
"""The top-level packages whose private names only `antler.compat` may take."""


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _dependency(dotted: str) -> bool:
    return DEPENDENCY.fullmatch(dotted.split(".")[0]) is not None


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) of each private name of a dependency that `source` takes."""
    found: list[tuple[int, str]] = []
    modules: set[str] = set()  # local names bound to a dependency's modules
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _dependency(alias.name):
                    if any(_private(p) for p in alias.name.split(".")):
                        found.append((node.lineno, alias.name))
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                _dependency(node.module):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if any(_private(p) for p in dotted.split(".")):
                    found.append((node.lineno, dotted))
                if _is_module(dotted):  # `from langchain.agents import factory`
                    modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and \
                _dotted(node.value) in modules:
            found.append((node.lineno, f"{_dotted(node.value)}.{node.attr}"))
    return sorted(found)


def _dotted(expression: ast.expr) -> str:
    """`a.b.c` of a chain of names and attributes ("" for anything else)."""
    if isinstance(expression, ast.Name):
        return expression.id
    if isinstance(expression, ast.Attribute):
        inner = _dotted(expression.value)
        return f"{inner}.{expression.attr}" if inner else ""
    return ""


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


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


@pytest.mark.parametrize(("module", "name"), [
    (module, name) for module, names in compat.LANGCHAIN_PRIVATE_NAMES.items()
    for name in names])
def test_every_private_langchain_name_antler_uses_exists(module, name):
    loaded = importlib.import_module(module)
    assert hasattr(loaded, name), (
        f"{module}.{name} is gone from the installed LangChain: antler.compat must find it "
        "elsewhere before the version pin in pyproject.toml is raised")


def test_the_wrap_composers_compose_as_create_agent_does():
    composers = compat.wrap_composers()
    assert set(composers) == {"wrap_model_call", "wrap_tool_call"}
    sync_compose, _ = composers["wrap_model_call"]
    outer = lambda request, handler: handler([*request, "outer"])  # noqa: E731
    inner = lambda request, handler: handler([*request, "inner"])  # noqa: E731
    composed = sync_compose([outer, inner])([], lambda request: request)
    assert composed.model_response == ["outer", "inner"]


def test_an_unvouched_private_langchain_name_is_refused():
    with pytest.raises(KeyError, match="LANGCHAIN_PRIVATE_NAMES"):
        compat.langchain_private("langchain.agents.factory", "_resolve_schema")


def test_the_detector_catches_each_form():
    source = (
        "from langgraph.pregel._write import ChannelWrite\n"
        "import langgraph._internal._constants as constants\n"
        "from langchain.agents.factory import _wrap_trace_kwargs\n"
        "from langchain.agents import factory\n"
        "def compose():\n"
        "    return factory._chain_model_call_handlers\n"
        "from stevedore import _cache\n"
        "import langchain_core.messages as messages\n"
        "messages._private_helper\n"
        "from antler.compat import channel_writes\n"
        "x = factory.__name__\n"
        "import langgraph.pregel\n"
        "langgraph.pregel._loop\n"
        "from langchain.agents import AgentState\n"
        "AgentState._fields\n"
    )
    assert private_uses(source) == [
        (1, "langgraph.pregel._write.ChannelWrite"),
        (2, "langgraph._internal._constants"),
        (3, "langchain.agents.factory._wrap_trace_kwargs"),
        (6, "factory._chain_model_call_handlers"),
        (7, "stevedore._cache"),
        (9, "messages._private_helper"),
        (13, "langgraph.pregel._loop"),
    ]


def test_nothing_but_compat_takes_a_private_name():
    offenders = []
    for directory in ("core", "plugins", "contrib"):
        for path in sorted((ROOT / directory).rglob("*.py")):
            if path == ROOT / "core" / "compat.py":
                continue
            for line, name in private_uses(path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert offenders == [], "take these through antler.compat: " + ", ".join(offenders)
