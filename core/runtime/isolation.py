"""Run-time isolation: what a plugin's hook that raises does to the run.

Every plugin of a chain has an error policy, `on_error`:

`fail`
    The run stops with `PluginHookError`, whose message is one line naming
    the plugin, the hook and the error (`plugin 'acme_audit' failed in
    before_model: ValueError: bad`); the original exception is its cause, so
    `antler --debug run` shows the traceback. An `AntlerError` the hook
    raised on purpose (a refused upload, say) already says what is wrong and
    passes unchanged.
`skip`
    One line naming plugin, hook and error goes to the `antler.audit.isolation`
    logger, the `--trace` timeline notes it, and the chain continues as if
    that hook were absent. A node hook (`before_agent`, `before_model`,
    `after_model`, `after_agent`) makes no update. A `wrap_model_call` or
    `wrap_tool_call` that raises before calling its handler is replaced by
    the handler called with the request it was given; one that raises after
    the handler returned gives the handler's result. The model or the tool is
    never called again because of it, and a tool result that was produced is
    never lost.

A node hook's update is also checked against the state keys its plugin may
write (`antler.chain.stateowners`): one that writes another plugin's key fails
the hook with `StateWriteError` (naming plugin, key and owner), handled under
the policy like any exception of its own (`fail` stops the run, `skip` drops
the whole update and logs it). So is the `Command` a wrap hook returns of its
own (`Command(update=...)` from `wrap_tool_call`, `ExtendedModelResponse`'s
command from `wrap_model_call`); under `skip` the handler's result is kept and
the command dropped. A result the handler returned, and the keys of an inner
command the hook carries over, are not the hook's writes. A hook's own `Command`
that would carry a write past the guard (`graph=Command.PARENT`, a `Send` in
`goto`) is refused the same way; a node name in `goto` is allowed. The tools a plugin
contributes are guarded the same way (`antler.runtime.toolguard`).

With hook limits (`antler.chain.hooklimits`, applied by `antler.runtime.hookwatch`),
a third-party plugin's node hook that changes its state in place fails with
`StateMutationError` (the change undone first), and a hook over its time budget or
output limit fails with `HookTimeError` or `HookOutputError`, each under the policy
like an exception of its own.

Either way, an exception that came out of the handler (the model's, a tool's,
an inner plugin's) is not the wrapping plugin's failure and propagates
unchanged, and so do LangGraph's `GraphBubbleUp` (an interrupt) and the
`BaseException`s that are not errors (`asyncio.CancelledError`,
`KeyboardInterrupt`).

The policy of a plugin (`antler.chain.policy.error_policy`): the operator's
`plugins: {NAME: {on_error: ...}}`, where NAME is the plugin, its entry point
or its distribution (the most specific one set wins); else the plugin's own
`on_error`; else `fail` for `always` plugins, security gates (manifest
`security_gate:`) and everything Antler ships, `skip` for third-party
plugins, configured extensions and custom middlewares. `skip` on a security
gate warns, or is refused for an `always` one.

How: as `antler.runtime.tracing` does, each middleware gets a subclass of its
own class that overrides exactly the hooks the class overrides (LangChain and
the chain compiler decide which graph nodes to create by looking at the
class). The wrappers keep what both read from a hook: its signature, its
`can_jump_to` declaration and, through `__wrapped__`, its code (a hook that
mentions `interrupt` keeps its own node). The new instance shares the
original's attribute dictionary, so what a hook stores on `self` is where the
caller looks. When nothing raises, a wrapper costs one call and one `try`, and
for a wrap hook also a closure that watches its handler (keeping, in the
wrapper's own variables, what the policy needs of it); a hook whose parameters are the
usual ones (`state, runtime` or `request, handler`) gets a wrapper with the same
parameters, so its arguments are not packed and unpacked on every call
(`benchmarks/bench_isolation.py` measures it).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from antler.chain.hooklimits import HookLimits
from antler.chain.stateowners import (
    describe_refusal,
    describe_steering,
    refused_keys,
    shown_value,
    steering,
    written_keys,
)
from antler.compiler import NODE_HOOKS
from antler.errors import StateMutationError, StateWriteError
from antler.plugin_api.spec import OnError

from .failure import AUDIT_LOGGER, Failure
from .hookwatch import StateWatch, limited
from .tracing import hook_subclass, reclass

log = logging.getLogger(AUDIT_LOGGER)


def isolate(middlewares: Sequence[Any], policies: Sequence[OnError],
            labels: Sequence[str] | None = None,
            writable: Sequence[frozenset[str] | None] | None = None,
            owners: Mapping[str, list[str]] | None = None,
            limits: Sequence[HookLimits] | None = None) -> list[Any]:
    """`middlewares` (same order, same names) with each one's hooks under its policy.

    `policies[i]` applies to `middlewares[i]`; `labels` (default: each
    middleware's name) are the plugin names errors and the audit log use.
    `writable[i]` (None: anything) are the state keys `middlewares[i]`'s node
    hooks may write (`antler.chain.stateowners`): an update that writes another
    key is the hook's failure (`StateWriteError`), handled under its policy like
    an exception it raised; `owners` names the owner of each key in the message.
    With `writable[i]`, the tools in `middlewares[i].tools` are guarded alike
    (`antler.runtime.toolguard`). With `limits[i]`, `middlewares[i]`'s hooks are
    held to its time budget and output limit, and its node hooks' changes of the
    state in place are refused (`antler.runtime.hookwatch`). A middleware that
    implements no hook (and has no tools to guard) is returned as it is.
    """
    from langgraph.errors import GraphBubbleUp

    isolated = []
    classes: dict[tuple[Any, ...], type | None] = {}
    for index, middleware in enumerate(middlewares):
        cls, name, policy = type(middleware), middleware.name, policies[index]
        label = labels[index] if labels else name
        keys = writable[index] if writable else None
        tools = keys is not None and bool(getattr(middleware, "tools", None))
        held = limits[index] if limits else None
        key = (cls, name, label, policy, keys, tools, held)
        if key not in classes:
            guard = None if keys is None else _WriteGuard(label, keys, owners or {})
            classes[key] = hook_subclass(cls, name, cls.__name__,
                                         _wrappers(label, policy, GraphBubbleUp, guard, held))
            if tools and keys is not None:
                from .toolguard import guarded_tools_class

                classes[key] = guarded_tools_class(classes[key] or cls, label, policy, keys,
                                                   owners or {})
        isolated_class = classes[key]
        isolated.append(middleware if isolated_class is None
                        else reclass(middleware, isolated_class))
    return isolated


class _WriteGuard:
    """Refuses a node hook's update that writes a state key its plugin does not own."""

    __slots__ = ("label", "owners", "writable")

    def __init__(self, label: str, writable: frozenset[str],
                 owners: Mapping[str, list[str]]) -> None:
        self.label = label
        self.writable = writable
        self.owners = owners

    def check(self, update: Any, hook: str) -> Any:
        if update is None or (type(update) is dict and update.keys() <= self.writable):
            return update  # the usual cases, at the cost of one subset test
        steers = steering(update)
        if steers is not None:
            raise StateWriteError(describe_steering(self.label, hook, steers),
                                  plugin=self.label, keys=refused_keys(update, self.writable))
        refused = refused_keys(update, self.writable)
        if refused:
            raise StateWriteError(describe_refusal(self.label, hook, refused, self.owners),
                                  plugin=self.label, keys=refused)
        return update

    def check_wrap(self, result: Any, handled: Any, hook: str) -> None:
        """Refuse the state update a wrap hook returns in a `Command` of its own
        (`Command(update=...)` from `wrap_tool_call`, `ExtendedModelResponse(...,
        command)` from `wrap_model_call`) where it writes a key the plugin does not own.

        `handled` is what the handler returned: a result passed on unchanged, and the keys
        of an inner update the hook carries over (a tool's `Command`), are not the hook's.
        """
        if result is handled:
            return
        command = _command_of(result)
        if command is None:
            return  # the usual case (a message or a response of the hook's own): no write
        inner_command = _command_of(handled)
        steers = steering(command)
        if steers is not None and steers != steering(inner_command):
            raise StateWriteError(describe_steering(self.label, hook, steers),
                                  plugin=self.label, keys=[])
        refused = refused_keys(command, self.writable)
        if not refused:
            return
        inner = written_keys(inner_command)
        refused = [key for key in refused if key not in inner]
        if refused:
            raise StateWriteError(describe_refusal(self.label, hook, refused, self.owners),
                                  plugin=self.label, keys=refused)


def _result_check(hook: str, guard: _WriteGuard | None) -> Callable[[Any, Any, str], None]:
    """What a wrap hook's result of its own (not the handler's, passed on) is checked for:
    a kind of result LangChain can use (`_RESULT_KINDS`), then its writes (`guard`).

    A wrong kind (None, a string) would otherwise fail later, in LangChain, as an
    `AttributeError` outside the plugin's isolation; raised here, it is the hook's
    failure, handled under the plugin's `on_error` like an exception it raised.
    """
    kinds, expected = _result_kinds(hook.removeprefix("a"))
    write_check = guard.check_wrap if guard is not None else None

    def check(result: Any, handled: Any, hook: str) -> None:
        if not isinstance(result, kinds):
            raise TypeError(f"returned {shown_value(result)}; a {hook.removeprefix('a')} "
                            f"returns what its handler returned, {expected}")
        if write_check is not None:
            write_check(result, handled, hook)
    return check


@functools.cache
def _result_kinds(hook: str) -> tuple[tuple[type, ...], str]:
    """The result classes LangChain takes from `hook` (`wrap_model_call` or
    `wrap_tool_call`), and how to say them."""
    from langchain_core.messages import AIMessage, ToolMessage

    if hook == "wrap_tool_call":
        return (ToolMessage, _command_type()), "a ToolMessage or a Command"
    from langchain.agents.middleware.types import ExtendedModelResponse, ModelResponse

    return ((ModelResponse, AIMessage, ExtendedModelResponse),
            "a ModelResponse, an AIMessage or an ExtendedModelResponse")


def _command_of(result: Any) -> Any:
    """The `Command` a wrap hook's result is or carries (an ExtendedModelResponse's), if any."""
    cls = type(result)
    read = _COMMAND_READERS.get(cls)
    if read is None:
        read = _command_reader(cls)
        if len(_COMMAND_READERS) < _KEPT_READERS:  # classes made on the fly do not pile up
            _COMMAND_READERS[cls] = read
    command = read(result)
    return command if isinstance(command, _command_type()) else None


_COMMAND_READERS: dict[type, Callable[[Any], Any]] = {}
"""Per class of result, how `_command_of` reads its `command` attribute (the result if none)."""
_KEPT_READERS = 256
_MISSING = object()


def _command_reader(cls: type) -> Callable[[Any], Any]:
    """How to read `getattr(result, "command", result)` for a `result` of class `cls`.

    A pydantic model without a `command` of its class (a message: `ToolMessage`,
    `AIMessage`) would look it up through pydantic's `__getattr__`, which raises
    and catches an `AttributeError` each time (microseconds, on every wrap hook
    that returns a message of its own); read where that lookup would find it, the
    instance's dictionary, then its extra fields, it costs two dictionary reads.
    """
    from pydantic import BaseModel

    if (isinstance(cls, type) and issubclass(cls, BaseModel)
            and cls.__getattr__ is BaseModel.__getattr__  # type: ignore[attr-defined]
            and cls.__getattribute__ is object.__getattribute__
            and "command" not in cls.model_fields
            and "command" not in cls.__private_attributes__
            and not hasattr(cls, "command")):
        return _model_command
    return _any_command


def _model_command(result: Any) -> Any:
    """`result.command` of a pydantic model whose class has none: its dictionary's, then its
    extra fields' (the result if neither has one)."""
    command = result.__dict__.get("command", _MISSING)
    if command is not _MISSING:
        return command
    try:
        extra = result.__pydantic_extra__
    except AttributeError:  # not initialised yet, as pydantic's own lookup allows
        return result
    return extra.get("command", result) if extra else result


def _any_command(result: Any) -> Any:
    """`result.command` (the result if it has none), by the usual attribute lookup."""
    return getattr(result, "command", result)


@functools.cache
def _command_type() -> type:
    """LangGraph's `Command`, imported once (not on every wrap hook's result)."""
    from langgraph.types import Command

    return Command


def _wrappers(label: str, policy: OnError, passes: type[BaseException],
              guard: _WriteGuard | None = None, limits: HookLimits | None = None,
              ) -> Callable[[Callable[..., Any], str, bool], Callable[..., Any]]:
    def wrapper(original: Callable[..., Any], hook: str, is_async: bool) -> Callable[..., Any]:
        failure = Failure(label, hook, policy)
        node = hook in NODE_HOOKS
        if limits is not None and (limits.time_budget is not None
                                   or limits.output_limit is not None):
            original = limited(original, hook, is_async, limits, label, wrap=not node)
        if node:
            watch = StateWatch(label, hook) if limits is not None and limits.untrusted else None
            return _node_wrapper(original, failure, is_async, passes, guard, hook, watch)
        if failure.skip:
            return _wrap_wrapper(original, failure, is_async, passes, guard, hook)
        return _failing_wrap_wrapper(original, failure, is_async, passes, guard, hook)
    return wrapper


def _plain(original: Callable[..., Any], *names: str) -> bool:
    """Whether `original` takes exactly `names`, positional or by keyword, none optional.

    Such a hook gets a wrapper with the same parameters, which Python calls
    without packing the arguments into a tuple and a dict.
    """
    try:
        parameters = list(inspect.signature(original).parameters.values())
    except (TypeError, ValueError):
        return False
    return [p.name for p in parameters] == list(names) and all(
        p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in parameters)


def _node_wrapper(original: Callable[..., Any], failure: Failure, is_async: bool,
                  passes: type[BaseException], guard: _WriteGuard | None = None,
                  hook: str = "", watch: StateWatch | None = None) -> Callable[..., Any]:
    """`original` under the policy, its update checked by `guard` (when there is one),
    its change of the state in place by `watch` (when there is one).

    One frame does both: the usual update (None, or a dict of keys the plugin
    may write) is let through by one subset test in it; anything else goes
    to `_WriteGuard.check`, whose refusal the policy handles like an exception
    the hook raised. A change in place is undone whether the hook returned or raised.
    """
    writable: frozenset[str] = guard.writable if guard is not None else frozenset()
    check = guard.check if guard is not None else None
    take = watch.take if watch is not None else None
    settle = watch.settle if watch is not None else _settled

    def failed(error: Exception, state: Any, taken: Any) -> None:
        if taken is not None and not isinstance(error, StateMutationError):
            try:
                settle(state, taken)  # it raised after changing the state in place
            except StateMutationError as mutation:
                error = mutation
        failure.handle(error, "no update")

    if is_async and _plain(original, "self", "state", "runtime"):
        async def anode_plain(self: Any, state: Any, runtime: Any) -> Any:
            taken = take(state) if take is not None else None
            try:
                update = await original(self, state, runtime)
                if taken is not None:
                    settle(state, taken)
                if update is None or check is None or (
                        type(update) is dict and update.keys() <= writable):
                    return update
                return check(update, hook)
            except passes:
                raise
            except Exception as error:
                failed(error, state, taken)
                return None
        return anode_plain

    if is_async:
        async def anode(self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
            taken = take(state) if take is not None else None
            try:
                update = await original(self, state, *args, **kwargs)
                if taken is not None:
                    settle(state, taken)
                if update is None or check is None or (
                        type(update) is dict and update.keys() <= writable):
                    return update
                return check(update, hook)
            except passes:
                raise
            except Exception as error:
                failed(error, state, taken)
                return None
        return anode

    if _plain(original, "self", "state", "runtime"):
        def node_plain(self: Any, state: Any, runtime: Any) -> Any:
            taken = take(state) if take is not None else None
            try:
                update = original(self, state, runtime)
                if taken is not None:
                    settle(state, taken)
                if update is None or check is None or (
                        type(update) is dict and update.keys() <= writable):
                    return update
                return check(update, hook)
            except passes:
                raise
            except Exception as error:
                failed(error, state, taken)
                return None
        return node_plain

    def node(self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
        taken = take(state) if take is not None else None
        try:
            update = original(self, state, *args, **kwargs)
            if taken is not None:
                settle(state, taken)
            if update is None or check is None or (
                    type(update) is dict and update.keys() <= writable):
                return update
            return check(update, hook)
        except passes:
            raise
        except Exception as error:
            failed(error, state, taken)
            return None
    return node


def _settled(state: Any, taken: Any) -> None:
    """No watch: nothing to settle."""


def _wrap_wrapper(original: Callable[..., Any], failure: Failure, is_async: bool,
                  passes: type[BaseException], guard: _WriteGuard | None = None,
                  hook: str = "") -> Callable[..., Any]:
    """`original` (a wrap hook) under the `skip` policy.

    The handler it is given is watched: whether it was called, what it last
    returned and the exception that last came out of it (None once it returned)
    are kept in the wrapper's own variables, from which `instead` decides what
    replaces a hook that raised.
    """
    check = _result_check(hook, guard)

    def instead(request: Any, called: bool, handled: Any, raised: BaseException | None,
                error: Exception) -> tuple[bool, Any]:
        """(call the handler with `request`?, else the result) in place of the hook."""
        if not called:
            failure.handle(error, "the handler ran with the original request")
            return True, None
        if raised is not None:
            # The handler failed and the plugin raised something else: without the
            # plugin the handler's exception would have propagated.
            failure.handle(error, "the handler's exception propagates")
            raise raised
        failure.handle(error, "kept the handler's result")
        return False, handled

    return _skip_wrapper(original, is_async, passes, check, hook, instead)


def _skip_wrapper(original: Callable[..., Any], is_async: bool,
                  passes: type[BaseException], check: Callable[..., None],
                  hook: str, instead: Callable[..., tuple[bool, Any]],
                  ) -> Callable[..., Any]:
    """`_wrap_wrapper`'s wrapper, passing on any parameters the hook has beyond
    `request, handler`."""
    # The async and sync wrappers (as in `_node_wrapper` and `_failing_wrap_wrapper`)
    # are twins on purpose: LangChain calls one form or the other, one awaits the
    # handler where the other calls it, and a body shared through a helper would add a
    # call to every hook of every run (the module docstring promises one call, one `try`).
    if is_async:
        async def awrap(self: Any, request: Any, handler: Callable[..., Any],
                        *args: Any, **kwargs: Any) -> Any:
            called = False
            handled = raised = None

            async def watched(inner: Any) -> Any:
                nonlocal called, handled, raised
                called = True
                try:
                    handled = await handler(inner)
                except BaseException as error:
                    raised = error
                    raise
                raised = None
                return handled

            try:
                result = await original(self, request, watched, *args, **kwargs)
                if result is not handled:
                    check(result, handled, hook)
                return result
            except passes:
                raise
            except Exception as error:
                if error is raised:
                    raise
                again, result = instead(request, called, handled, raised, error)
            return await handler(request) if again else result
        return awrap

    def wrap(self: Any, request: Any, handler: Callable[..., Any],
             *args: Any, **kwargs: Any) -> Any:
        called = False
        handled = raised = None

        def watched(inner: Any) -> Any:
            nonlocal called, handled, raised
            called = True
            try:
                handled = handler(inner)
            except BaseException as error:
                raised = error
                raise
            raised = None
            return handled

        try:
            result = original(self, request, watched, *args, **kwargs)
            if result is not handled:
                check(result, handled, hook)
            return result
        except passes:
            raise
        except Exception as error:
            if error is raised:
                raise
            again, result = instead(request, called, handled, raised, error)
        return handler(request) if again else result
    return wrap


def _failing_wrap_wrapper(original: Callable[..., Any], failure: Failure, is_async: bool,
                          passes: type[BaseException], guard: _WriteGuard | None = None,
                          hook: str = "") -> Callable[..., Any]:
    """`_wrap_wrapper` for the `fail` policy, which needs less from the handler's watch.

    Under `fail` every exception of the plugin's own stops the run, so all the
    wrapper keeps is the exception that came out of the handler (it passes
    unchanged), not whether the handler ran or what it returned.
    """
    if not _plain(original, "self", "request", "handler"):
        return _wrap_wrapper(original, failure, is_async, passes, guard, hook)
    check = _result_check(hook, guard)

    if is_async:
        async def awrap(self: Any, request: Any, handler: Callable[..., Any]) -> Any:
            raised = handled = None

            async def watched(inner: Any) -> Any:
                nonlocal raised, handled
                try:
                    handled = await handler(inner)
                except BaseException as error:
                    raised = error
                    raise
                return handled

            try:
                result = await original(self, request, watched)
                if result is not handled:
                    check(result, handled, hook)
                return result
            except Exception as error:
                if error is not raised and not isinstance(error, passes):
                    failure.handle(error, "")  # raises, under `fail`
                raise
        return awrap

    def wrap(self: Any, request: Any, handler: Callable[..., Any]) -> Any:
        raised = handled = None

        def watched(inner: Any) -> Any:
            nonlocal raised, handled
            try:
                handled = handler(inner)
            except BaseException as error:
                raised = error
                raise
            return handled

        try:
            result = original(self, request, watched)
            if result is not handled:
                check(result, handled, hook)
            return result
        except Exception as error:
            if error is not raised and not isinstance(error, passes):
                failure.handle(error, "")  # raises, under `fail`
            raise
    return wrap
