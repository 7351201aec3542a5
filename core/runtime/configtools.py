"""The operator's `tools:` entries, imported and built for one chain.

Each entry names a LangChain tool by 'module:attr': the attribute is a tool
(a `BaseTool`, such as a function decorated with `@tool`) or a factory that,
called with the entry's `config`, returns a tool or a list of tools. Loading a
module runs its code: `tools:` is trusted operator configuration, like
`extensions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool

from antler.chain.config import ToolEntry
from antler.errors import BuildError, ReflectionError
from antler.plugin_api.reflection import resolve_object

__all__ = ["load_config_tools"]


def load_config_tools(entries: Sequence[ToolEntry], chain: str) -> list[BaseTool]:
    """The tools of every entry that names `chain`, in config order.

    Raises:
        BuildError: naming the entry (`tools[i]`) and what is wrong with it.
    """
    tools: list[BaseTool] = []
    for index, entry in enumerate(entries):
        if chain in entry.chains:
            tools.extend(_build(entry, f"tools[{index}] ({entry.use})"))
    names = [tool.name for tool in tools]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise BuildError(f"tools: more than one configured tool is named {', '.join(twice)}; "
                         "the model could call only one of them: remove or rename the others")
    return tools


def _build(entry: ToolEntry, where: str) -> list[BaseTool]:
    try:
        target = resolve_object(entry.use, "tool")
    except ReflectionError as exc:
        raise BuildError(f"{where}: {exc}") from None
    if isinstance(target, BaseTool):
        if entry.config:
            raise BuildError(f"{where}: is a tool object, which takes no `config`; move the "
                             "settings into a factory function that returns the tool")
        return [target]
    if not callable(target):
        raise BuildError(f"{where}: is a {type(target).__name__}, neither a LangChain tool "
                         "nor a factory returning one")
    try:
        made: Any = target(**entry.config)
    except TypeError as exc:
        raise BuildError(f"{where}: its factory does not accept this `config`: {exc}") from None
    except Exception as exc:
        raise BuildError(f"{where}: its factory raised {type(exc).__name__}: {exc}") from exc
    made = list(made) if isinstance(made, list | tuple) else [made]
    wrong = [type(item).__name__ for item in made if not isinstance(item, BaseTool)]
    if wrong or not made:
        raise BuildError(f"{where}: its factory returned {', '.join(wrong) or 'nothing'}, not "
                         "LangChain tools (BaseTool)")
    return made
