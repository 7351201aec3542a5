"""The hook timeline: which middleware ran which hook, what it changed, how long it took.

`antler run --trace` and `antler demo` print it, in the spirit of the per-turn
timeline of docs/chain.md#turn-timeline. Tracing works on the real chain: each
middleware instance is given a subclass of its own class that overrides
exactly the hooks the class overrides (LangChain decides which graph nodes to
create by looking at the class), times the call and summarizes the result.
A probe placed innermost records the model calls and tool executions
themselves. Untraced agents pay nothing: instrumentation happens only when a
tracer is passed. A hook that raises is shown as `raised Type: message`; one
that run-time isolation skipped (`antler.runtime.isolation`, which builds its
subclasses with the same `hook_subclass`) as `skipped ...`.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import inspect
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from antler.errors import describe_error

_NODE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")
_WRAP_HOOKS = ("wrap_model_call", "wrap_tool_call")


@dataclass
class TraceEvent:
    """One hook invocation (or a model call / tool execution seen by the probe)."""

    seq: int
    started_ms: float
    plugin: str
    hook: str
    summary: str = ""
    duration_ms: float = 0.0
    note: str = ""
    """Set while the hook runs (`note_in_trace`): replaces the summary of its result."""


@dataclass
class Tracer:
    """Collects `TraceEvent`s in the order hooks start."""

    events: list[TraceEvent] = field(default_factory=list)
    prefix: str = ""
    _origin: float = field(default_factory=time.perf_counter)

    def child(self, prefix: str) -> Tracer:
        """A tracer writing into the same timeline with `prefix` on every plugin name.

        Used for subagents, whose hooks run inside the lead's `task` tool call.
        """
        return Tracer(self.events, f"{self.prefix}{prefix}:", self._origin)

    def start(self, plugin: str, hook: str) -> TraceEvent:
        event = TraceEvent(len(self.events), (time.perf_counter() - self._origin) * 1000,
                           self.prefix + plugin, hook)
        self.events.append(event)
        return event

    def finish(self, event: TraceEvent, summary: str) -> None:
        event.summary = event.note or summary
        event.duration_ms = (time.perf_counter() - self._origin) * 1000 - event.started_ms

    def hooks(self) -> list[tuple[str, str]]:
        """(plugin, hook) pairs in start order, model and tool events excluded."""
        return [(e.plugin, e.hook) for e in self.events if not _is_probe(e)]

    def render(self) -> str:
        lines = []
        phase = None
        for event in self.events:
            kind = _phase(event)
            if kind != phase:
                lines.append(f"[{kind}]")
                phase = kind
            if _is_probe(event):
                who = event.plugin.rpartition(":")[0]
                lines.append(f"  ** {who + ' ' if who else ''}{event.hook}: {event.summary}  "
                             f"({event.duration_ms:.1f} ms)")
            else:
                where = f"{event.plugin}.{event.hook}"
                lines.append(f"  {where:<44} -> {event.summary}  ({event.duration_ms:.1f} ms)")
        return "\n".join(lines)


PROBE_NAME = "trace_probe"


def _is_probe(event: TraceEvent) -> bool:
    return event.plugin.rpartition(":")[2] == PROBE_NAME


def _phase(event: TraceEvent) -> str:
    who, _, plugin = event.plugin.rpartition(":")
    if plugin == PROBE_NAME:
        kind = "model call" if event.hook == "model" else "tool execution"
    else:
        kind = {"wrap_model_call": "model call", "wrap_tool_call": "tool execution"}.get(
            event.hook, event.hook)
    return f"{who} {kind}" if who else kind


def describe_update(update: Any) -> str:
    """A short, human summary of what a hook returned."""
    if update is None:
        return "no change"
    if _is_command(update):
        goto = getattr(update, "goto", None)
        inner = describe_update(getattr(update, "update", None))
        return f"Command(goto={goto!r}): {inner}" if goto else f"Command: {inner}"
    if isinstance(update, dict):
        parts = []
        for key, value in update.items():
            if key == "messages":
                parts.append("messages " + _describe_messages(value))
            elif key == "jump_to":
                parts.append(f"jump_to={value}")
            else:
                parts.append(f"set {key}")
        return ", ".join(parts) or "no change"
    return type(update).__name__


def _describe_messages(messages: Any) -> str:
    if not isinstance(messages, list):
        messages = [messages]
    items = []
    for message in messages:
        kind = type(message).__name__
        if kind == "RemoveMessage":
            items.append(f"-{getattr(message, 'id', '?')}")
        else:
            items.append(f"+{kind}" + (f"({message.name})" if getattr(message, "name", None)
                                       else ""))
    return "[" + ", ".join(items) + "]"


def _is_command(value: Any) -> bool:
    return type(value).__name__ == "Command" and hasattr(value, "goto")


def _describe_request(before: Any, after: Any) -> str:
    if after is None:
        return "short-circuited (handler not called)"
    changes = []
    if len(after.messages) != len(before.messages) or any(
            a is not b for a, b in zip(after.messages, before.messages, strict=False)):
        changes.append(f"messages {len(before.messages)} -> {len(after.messages)}"
                       + (" (rewritten)" if len(after.messages) == len(before.messages) else ""))
    if after.system_message is not before.system_message:
        changes.append("system prompt changed")
    if len(after.tools) != len(before.tools):
        changes.append(f"tools {len(before.tools)} -> {len(after.tools)}")
    return ", ".join(changes) or "passed through"


def hook_subclass(cls: type, name: str, class_name: str,
                  wrap: Callable[[Callable[..., Any], str, bool], Callable[..., Any]],
                  ) -> type | None:
    """A subclass of `cls` whose hooks are `wrap(original, hook, is_async)`; None if none.

    Only the hook forms `cls` overrides are overridden, so LangChain creates
    the same graph nodes for it. The wrappers carry the originals' metadata
    (`__wrapped__`, `can_jump_to`), and `name` keeps LangGraph's node names.
    """
    from langchain.agents.middleware import AgentMiddleware

    overrides: dict[str, Any] = {}
    for hook in (*_NODE_HOOKS, *_WRAP_HOOKS):
        for variant in (hook, "a" + hook):
            original = getattr(cls, variant, None)
            if original is None or original is getattr(AgentMiddleware, variant):
                continue
            wrapper: Any = functools.wraps(original)(wrap(original, hook, variant != hook))
            # LangSmith's `traceable` reads a wrap hook's signature on every call: given
            # here, it is not looked for again through `__wrapped__`.
            wrapper.__signature__ = inspect.signature(original)
            overrides[variant] = wrapper
    if not overrides:
        return None
    overrides["name"] = property(lambda self: name)
    overrides["__module__"] = cls.__module__
    return type(class_name, (cls,), overrides)


def reclass(middleware: Any, cls: type) -> Any:
    """A new instance of `cls` (a `hook_subclass`) with `middleware`'s state.

    The two share one attribute dictionary: what a hook stores on `self` is
    on the caller's instance too.
    """
    clone = copy.copy(middleware)
    clone.__class__ = cls
    if hasattr(middleware, "__dict__"):
        clone.__dict__ = middleware.__dict__
    return clone


_OPEN: contextvars.ContextVar[TraceEvent | None] = contextvars.ContextVar(
    "antler_trace_event", default=None)
"""The hook event being recorded in this context (None when nothing is traced)."""


def note_in_trace(text: str) -> None:
    """Make `text` the summary of the hook event being traced here, if one is."""
    event = _OPEN.get()
    if event is not None:
        event.note = text


@contextlib.contextmanager
def _recording(tracer: Tracer, name: str, hook: str) -> Iterator[TraceEvent]:
    event = tracer.start(name, hook)
    token = _OPEN.set(event)
    try:
        yield event
    except BaseException as error:
        tracer.finish(event, f"raised {describe_error(error)}")
        raise
    finally:
        _OPEN.reset(token)


def _wrap_hook(original: Callable, hook: str, is_async: bool, *, name: str,
               tracer: Tracer) -> Callable:
    if hook in _NODE_HOOKS:
        if is_async:
            async def anode(self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
                with _recording(tracer, name, hook) as event:
                    result = await original(self, state, *args, **kwargs)
                    tracer.finish(event, describe_update(result))
                return result
            return anode

        def node(self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
            with _recording(tracer, name, hook) as event:
                result = original(self, state, *args, **kwargs)
                tracer.finish(event, describe_update(result))
            return result
        return node

    def summarize(request: Any, seen: list[Any], result: Any) -> str:
        if hook == "wrap_model_call":
            return _describe_request(request, seen[0] if seen else None)
        tool = request.tool_call.get("name", "?")
        if not seen:
            return f"{tool}: intercepted -> {describe_update(result)}"
        return f"{tool}: passed through"

    if is_async:
        async def awrap(self: Any, request: Any, handler: Callable, *args: Any,
                        **kwargs: Any) -> Any:
            seen: list[Any] = []

            async def spy(inner: Any) -> Any:
                seen.append(inner)
                return await handler(inner)
            with _recording(tracer, name, hook) as event:
                result = await original(self, request, spy, *args, **kwargs)
                tracer.finish(event, summarize(request, seen, result))
            return result
        return awrap

    def wrap(self: Any, request: Any, handler: Callable, *args: Any, **kwargs: Any) -> Any:
        seen: list[Any] = []

        def spy(inner: Any) -> Any:
            seen.append(inner)
            return handler(inner)
        with _recording(tracer, name, hook) as event:
            result = original(self, request, spy, *args, **kwargs)
            tracer.finish(event, summarize(request, seen, result))
        return result
    return wrap


def instrument(middlewares: list[Any], tracer: Tracer,
               labels: list[str] | None = None) -> list[Any]:
    """Traced copies of `middlewares` (same order, same names) plus the innermost probe.

    `labels` (default: each middleware's name) are what the timeline calls them;
    `create_agent` passes the plugin names.
    """
    traced = []
    cache: dict[tuple[type, str, str], type | None] = {}
    for index, middleware in enumerate(middlewares):
        label = labels[index] if labels else middleware.name
        key = (type(middleware), middleware.name, label)
        if key not in cache:
            cache[key] = hook_subclass(
                type(middleware), middleware.name, f"Traced{type(middleware).__name__}",
                functools.partial(_wrap_hook, name=label, tracer=tracer))
        cls = cache[key]
        traced.append(middleware if cls is None else reclass(middleware, cls))
    traced.append(_probe(tracer))
    return traced


def _probe(tracer: Tracer) -> Any:
    from langchain.agents.middleware import AgentMiddleware

    class TraceProbe(AgentMiddleware):
        """Innermost: records each model call's outcome and each tool's execution."""

        name = PROBE_NAME

        def wrap_model_call(self, request: Any, handler: Callable) -> Any:
            event = tracer.start(PROBE_NAME, "model")
            response = handler(request)
            tracer.finish(event, _describe_response(response))
            return response

        async def awrap_model_call(self, request: Any, handler: Callable) -> Any:
            event = tracer.start(PROBE_NAME, "model")
            response = await handler(request)
            tracer.finish(event, _describe_response(response))
            return response

        def wrap_tool_call(self, request: Any, handler: Callable) -> Any:
            event = tracer.start(PROBE_NAME, "tool " + request.tool_call.get("name", "?"))
            result = handler(request)
            tracer.finish(event, _describe_tool_result(result))
            return result

        async def awrap_tool_call(self, request: Any, handler: Callable) -> Any:
            event = tracer.start(PROBE_NAME, "tool " + request.tool_call.get("name", "?"))
            result = await handler(request)
            tracer.finish(event, _describe_tool_result(result))
            return result

    return TraceProbe()


def _describe_response(response: Any) -> str:
    messages = getattr(response, "result", None) or []
    for message in messages:
        calls = getattr(message, "tool_calls", None)
        if calls:
            return "AIMessage calling " + ", ".join(c.get("name", "?") for c in calls)
        text = str(getattr(message, "content", ""))
        if text:
            return f"AIMessage {text[:60]!r}" + ("..." if len(text) > 60 else "")
    return "AIMessage (empty)"


def _describe_tool_result(result: Any) -> str:
    if _is_command(result):
        return describe_update(result)
    content = str(getattr(result, "content", result))
    status = getattr(result, "status", "success")
    return f"{status}: {content[:60]!r}" + ("..." if len(content) > 60 else "")
