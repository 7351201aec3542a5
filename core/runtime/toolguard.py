"""Plugin tools' state writes: a tool a plugin contributes writes only what the plugin may.

A tool returns a `Command(update={...})` to write agent state (a `ToolMessage`
under `messages`, a key of its plugin's). A tool a plugin contributes (its
entry point's `antler_tools` hook, or its middleware's `tools`) goes through
the same write guard as the plugin's hooks (`antler.runtime.isolation`): the
keys it may write are its plugin's (`antler.chain.stateowners`: the keys it
owns, the contract channels its schema takes, the shared channels such as
`messages`). A `Command` that writes any other key is refused with
`StateWriteError`, naming the plugin, the tool and the key (and its owner);
so is one that would carry a write past the guard: `graph=Command.PARENT` (its
update lands in the calling graph) or a `Send` in `goto` (it runs a node on a
state the tool made up). A node name in `goto` is allowed. The refusal is
handled under the plugin's `on_error`:

`fail`
    The run stops with the `StateWriteError`.
`skip`
    The whole `Command` is dropped (no key of it is written) and the call is
    answered with an error `ToolMessage` saying why; one line goes to the
    `antler.audit.isolation` logger, as for a hook.

A tool's `antler_tools` entry point may hold several plugins of one
distribution: its tools may write what any of them may, and answer to the
first one in the chain (whose build context the hook got). Tools that no
plugin contributed (the application's, the config's, MCP servers') are not
guarded.

How: each guarded tool is a copy of the tool under a subclass of its own class
that overrides `invoke` and `ainvoke` (what the tools node calls, for sync and
async tools alike), so its name, schema and injected arguments stay as they
were. A result that is not a `Command` costs one `isinstance` test; a
`Command` whose update is a dict of writable keys, a subset test and a look at
its `graph` and `goto`. A sync call nothing observes is made without
LangChain's callback run (`antler.runtime.quiettools`), the guard applied alike.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from antler.chain.stateowners import describe_refusal, describe_steering, refused_keys, steering
from antler.errors import StateWriteError
from antler.plugin_api.spec import OnError

from .failure import Failure
from .quiettools import NOT_QUIET, quiet_call, quiet_class


def guard_tools(tools: Sequence[Any], plugin: str, policy: OnError,
                writable: frozenset[str], owners: Mapping[str, list[str]]) -> list[Any]:
    """`tools` (same order) whose `Command`s may write only `writable`, as plugin `plugin`'s.

    A plain function becomes a LangChain tool first (as the tools node would
    make it); a provider's built-in tool (a dict) runs at the provider and is
    kept as it is.
    """
    from langchain_core.tools import BaseTool
    from langchain_core.tools import tool as as_tool

    classes: dict[type, type] = {}
    guarded = []
    for item in tools:
        if isinstance(item, dict):
            guarded.append(item)
            continue
        if not isinstance(item, BaseTool):
            item = as_tool(item)
        cls = type(item)
        if cls not in classes:
            classes[cls] = _guarded_class(cls, _ResultCheck(plugin, policy, writable, owners))
        clone = copy.copy(item)
        object.__setattr__(clone, "__class__", classes[cls])
        guarded.append(clone)
    return guarded


class _ResultCheck:
    """One plugin's tool results checked against the state keys it may write."""

    __slots__ = ("owners", "plugin", "policy", "writable")

    def __init__(self, plugin: str, policy: OnError, writable: frozenset[str],
                 owners: Mapping[str, list[str]]) -> None:
        self.plugin = plugin
        self.policy = policy
        self.writable = writable
        self.owners = owners

    def refused(self, result: Any, name: str, tool_input: Any) -> Any:
        """`result` (a `Command`) when it writes only writable keys, else the refusal
        (raised under `fail`, an error result under `skip`)."""
        update = result.update
        steers = steering(result)
        if steers is None and type(update) is dict and update.keys() <= self.writable:
            return result  # the usual case, at the cost of one subset test
        refused = refused_keys(result, self.writable)
        where = f"tool {name!r}"
        if steers is not None:
            error = StateWriteError(describe_steering(self.plugin, where, steers),
                                    plugin=self.plugin, keys=refused)
        elif refused:
            error = StateWriteError(describe_refusal(self.plugin, where, refused, self.owners),
                                    plugin=self.plugin, keys=refused)
        else:
            return result
        Failure(self.plugin, where, self.policy).handle(
            error, "dropped the tool's Command and answered the call with an error")
        text = f"Error: the result of tool {name!r} was refused: {error}"
        call_id = tool_input.get("id") if isinstance(tool_input, dict) \
            and tool_input.get("type") == "tool_call" else None
        if call_id is None:
            return text
        from langchain_core.messages import ToolMessage

        return ToolMessage(content=text, tool_call_id=call_id, name=name, status="error")


def _guarded_class(cls: type, check: _ResultCheck) -> type:
    """A subclass of tool class `cls` whose `invoke`/`ainvoke` results go through `check`."""
    from langgraph.types import Command

    invoke: Callable[..., Any] = cls.invoke  # type: ignore[attr-defined]
    ainvoke: Callable[..., Any] = cls.ainvoke  # type: ignore[attr-defined]
    refused = check.refused
    quiet = quiet_class(cls)

    def guarded_invoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        result = quiet_call(self, input, config, kwargs) if quiet else NOT_QUIET
        if result is NOT_QUIET:
            result = invoke(self, input, config, **kwargs)
        return refused(result, self.name, input) if isinstance(result, Command) else result

    async def guarded_ainvoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        result = await ainvoke(self, input, config, **kwargs)
        return refused(result, self.name, input) if isinstance(result, Command) else result

    return type(cls.__name__, (cls,), {"invoke": guarded_invoke, "ainvoke": guarded_ainvoke,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__,
                                       "__doc__": cls.__doc__})


def guarded_tools_class(cls: type, plugin: str, policy: OnError, writable: frozenset[str],
                        owners: Mapping[str, list[str]]) -> type:
    """A subclass of middleware class `cls` whose `tools` are `guard_tools` copies of the
    instance's own (made once per list; assigning `tools` stores the new list as before)."""
    made: dict[int, tuple[Any, list[Any]]] = {}

    def get(self: Any) -> list[Any]:
        own = getattr(self, "__dict__", {})
        raw = own["tools"] if "tools" in own else getattr(super(guarded, self), "tools", [])
        hit = made.get(id(raw))
        if hit is None or hit[0] is not raw:
            hit = made[id(raw)] = (raw, guard_tools(raw or [], plugin, policy, writable,
                                                    owners))
        return hit[1]

    def set_(self: Any, value: Any) -> None:
        self.__dict__["tools"] = value

    guarded: type = type(cls.__name__, (cls,), {"tools": property(get, set_),
                                                "__module__": cls.__module__})
    return guarded
