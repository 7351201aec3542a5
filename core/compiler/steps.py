"""Running hooks inside a graph node: what every node that does so shares.

A node that runs members' hooks one after another (a fused node, the model
node, the input step, the tools node) is a `StepRunner`: each member is a
`Step`, and one execution (`Run`) keeps the members' view of the state, applying
each update through the channel's real LangGraph channel (`state_channels`), so
reducers behave as in the graph; `jump_to` ends the run where the unfused graph
would skip nodes, and the node returns writes equal to the members' updates
applied in sequence. The nodes that take over one of LangChain's own (model,
tools) keep its result for the retry of the same task (`SavedAnswers`, keyed by
`task_key`) and end the run through its edge when they ran the `after_agent`
hooks themselves (`ending_edge`, `END_MARK`).
"""

from __future__ import annotations

import collections
import functools
import threading
import time
import weakref
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_type_hints

from antler.compat import branch_spec, runnable_callable, task_config_keys, update_fields
from antler.contracts.folding import fold_of

from .fusionplan import DESTINATIONS, FUSED_EVENT, JUMP_KEY, MODEL_NODE, Member, hook_events_asked
from .leanchannels import lean_aggregate_class
from .proxies import overrides

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig


@dataclass(frozen=True)
class Channel:
    kind: str  # "reduce" | "last" | "ephemeral"
    template: Any
    messages: bool = False
    merged_by_id: bool = False
    """The reducer is `add_messages` itself (no `format`): `Run` merges a write that only
    adds or replaces messages by id without calling it (`Run._merge_messages`)."""
    fold: Any = None
    """How a node's several writes of this reducer key fold into fewer
    (`antler.contracts.folding`; `fold_messages` for `add_messages`), or None."""


_SCHEMA_HINTS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()
_SCHEMA_HINTS_LOCK = threading.Lock()


def schema_hints(schema: type) -> dict[str, Any]:
    """A state schema's type hints (with `Annotated` extras), worked out once per class:
    every build of every agent asks for the same few schemas' hints, a few ms each."""
    hints = _SCHEMA_HINTS.get(schema)
    if hints is None:
        hints = get_type_hints(schema, include_extras=True)
        with _SCHEMA_HINTS_LOCK:
            _SCHEMA_HINTS[schema] = hints
    return hints


def state_channels(middlewares: Sequence[Any], base: type
                    ) -> tuple[dict[str, Channel], str]:
    """The merged state's channels, as `create_agent` merges the schemas; or why not."""
    from typing import TypedDict

    from langgraph.channels import (
        BinaryOperatorAggregate,
        EphemeralValue,
        LastValue,
        UntrackedValue,
    )
    from langgraph.graph import StateGraph

    hints: dict[type, dict[str, Any]] = {}
    for schema in [*(m.state_schema for m in middlewares), base]:
        hints.pop(schema, None)  # a schema listed twice counts at its last position
        hints[schema] = schema_hints(schema)
    merged: dict[str, Any] = {}
    for fields in hints.values():
        merged.update(fields)
    graph = StateGraph(TypedDict("FusionView", merged))  # type: ignore[operator]
    lean = lean_aggregate_class()
    channels: dict[str, Channel] = {}
    for key, channel in graph.channels.items():
        if isinstance(channel, BinaryOperatorAggregate):
            # The template a run copies for a key's first value (`Run._through_channel`):
            # a `LeanAggregate` copies without working its empty value's type out again.
            template = (lean.of(channel) if type(channel) is BinaryOperatorAggregate
                        else None) or channel
            plain = _is_plain_add_messages(channel.operator)
            channels[key] = Channel("reduce", template, _is_add_messages(channel.operator),
                                     plain, fold_messages if plain else fold_of(channel.operator))
        elif isinstance(channel, EphemeralValue):
            channels[key] = Channel("ephemeral", channel)
        elif type(channel) in (LastValue, UntrackedValue):
            channels[key] = Channel("last", channel)
        else:
            return {}, (f"state key {key!r} uses a {type(channel).__name__} channel, which "
                        "the fused node cannot replay; fusion skipped")
    return channels, ""


def _is_add_messages(operator: Any) -> bool:
    from langgraph.graph.message import add_messages

    if operator is add_messages:
        return True
    inner = operator.func if isinstance(operator, functools.partial) else None
    return getattr(inner, "__name__", "") == "add_messages" and \
        getattr(inner, "__module__", "") == "langgraph.graph.message"


def fold_messages(values: list[Any]) -> list[Any]:
    """A node's writes of an `add_messages` key as one list, when each only adds or replaces
    messages that have their ids (the values unchanged otherwise).

    `add_messages` applies a list's messages one by one, replacing the one with the same id
    or appending, so their concatenation gives what the writes one after another give.
    """
    kinds = _message_kinds
    batch: list[Any] = []
    for value in values:
        items = value if type(value) is list else [value]
        for message in items:
            cls = type(message)
            if (kinds[cls] if cls in kinds else _message_kind(cls)) != _PLAIN or \
                    message.id is None:
                return values  # a removal, a conversion or an id the reducer gives: kept
        batch.extend(items)
    return [batch]


def _is_plain_add_messages(operator: Any) -> bool:
    from langgraph.graph.message import add_messages

    return operator is add_messages


@functools.cache
def _message_types() -> tuple[type, type, type]:
    """(BaseMessage, BaseMessageChunk, RemoveMessage), imported once (no langchain import
    at load)."""
    from langchain_core.messages import BaseMessage, BaseMessageChunk, RemoveMessage

    return BaseMessage, BaseMessageChunk, RemoveMessage


def _fresh_id() -> str:
    """An id for a message written without one, made as `add_messages` makes it (its
    module's `uuid.uuid4`, looked up at the call)."""
    return str(_message_module().uuid.uuid4())


@functools.cache
def _message_module() -> Any:
    import langgraph.graph.message as module

    return module


@functools.cache
def _overwrite_type() -> type:
    from langgraph.types import Overwrite

    return Overwrite


@functools.cache
def command_type() -> Any:
    """LangGraph's `Command`, imported once (an import statement on every call costs more
    than the rest of a small hook's bookkeeping)."""
    from langgraph.types import Command

    return Command


_CONVERTED, _REMOVAL, _PLAIN = 0, 1, 2
"""What a write's item is to `add_messages` (`_message_kind`): something it converts to a
message first (a chunk, a dict, a tuple, a string), a removal, or a message it keeps."""

_message_kinds: dict[type, int] = {}


def _message_kind(cls: type) -> int:
    """`_CONVERTED`, `_REMOVAL` or `_PLAIN` for an item of class `cls`, worked out once per
    class (the same three isinstance checks on every message of every write otherwise)."""
    kind = _message_kinds.get(cls)
    if kind is None:
        message, chunk, remove = _message_types()
        kind = (_CONVERTED if not issubclass(cls, message) or issubclass(cls, chunk)
                else _REMOVAL if issubclass(cls, remove) else _PLAIN)
        _message_kinds[cls] = kind
    return kind


def _as_messages(value: Any) -> Any:
    """An `add_messages` write as message objects, so the view and the graph share ids."""
    if type(value) is list:
        items = value
    elif _is_overwrite(value):
        return value
    else:
        items = value if isinstance(value, list) else [value]
    kinds = _message_kinds
    for item in items:
        cls = type(item)
        if (kinds[cls] if cls in kinds else _message_kind(cls)) == _CONVERTED:
            break
    else:
        return value
    from langchain_core.messages import convert_to_messages
    from langchain_core.messages.utils import message_chunk_to_message

    # `add_messages` turns a chunk into a new message (and gives an id-less one a
    # fresh id): done once here, the view and the graph hold the same message.
    return [message_chunk_to_message(m) for m in convert_to_messages(items)]


def _is_overwrite(value: Any) -> bool:
    if type(value) is list:
        return False  # the usual write: never an Overwrite
    return isinstance(value, _overwrite_type()) or (isinstance(value, dict) and (
        "__overwrite__" in value or value.get("type") == "__overwrite__"))


@dataclass(frozen=True)
class Step:
    label: str
    node: str  # the member's own node name in an unfused graph
    call: Any  # a RunnableCallable, built exactly as create_agent builds a hook node
    can_jump: tuple[str, ...]
    traced: Any = None
    """The same hook as a run of its own, named as its node (used when callbacks listen)."""
    loop_exit: bool = False
    """The last `after_model` hook of a turn: LangChain's edge routes whatever it writes
    to `jump_to`, declared or not."""
    direct: Any = None
    """The sync hook itself, when `call.invoke` would only call it with the runtime."""
    adirect: Any = None
    """The async hook itself, likewise for `call.ainvoke`."""


def make_step(original: Any, proxy: Any, member: Member, kind: str) -> Step:
    RunnableCallable = runnable_callable()

    cls = type(original)
    sync = getattr(proxy, kind) if overrides(cls, kind) else None
    async_ = getattr(proxy, "a" + kind) if overrides(cls, "a" + kind) else None
    node = f"{member.name}.{kind}"
    call = RunnableCallable(sync, async_, trace=False)
    return Step(member.label, node, call, member.can_jump.get(kind, ()),
                 traced=RunnableCallable(sync, async_, name=node, trace=True),
                 direct=_direct(call, sync), adirect=_direct(call, async_))


def _direct(call: Any, hook: Any) -> Any:
    """`hook` when all `call` (its untraced RunnableCallable) would add is the runtime.

    That is a hook whose only parameter besides the state is `runtime` (every
    `before_*`/`after_*` hook of the usual form): `_invoke` then calls it
    without building the keyword arguments `RunnableCallable.invoke` builds.
    """
    if hook is None or call.kwargs or call.explode_args or set(call.func_accepts) != {"runtime"}:
        return None
    return hook


END = "__end__"
"""LangGraph's `END` (`langgraph.graph.END`), the destination that ends a run."""

END_MARK = "antler_agent_ended"
"""Private channel, never checkpointed: the model node ran the `after_agent` hooks."""


class StepRunner:
    """A graph node that runs steps (hooks, or the model node) one after another.

    Each step sees the state the earlier ones left (`Run`); the node returns
    their writes as one update.
    """

    def __init__(self, channels: dict[str, Channel], token: str, *, node: str,
                 loop_exit: bool, can_jump: tuple[str, ...]) -> None:
        self.channels = channels
        self.token = token
        self.node = node
        self.loop_exit = loop_exit
        self.can_jump = can_jump
        self.ephemeral = tuple(k for k, c in channels.items() if c.kind == "ephemeral")

    def _steps(self) -> Iterable[Step]:
        raise NotImplementedError

    def run(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        return self._continue(Run(self, state, config), runtime, config)

    async def arun(self, state: Any, runtime: Any, config: RunnableConfig) -> Any:
        return await self._acontinue(Run(self, state, config), runtime, config)

    def _continue(self, run: Run, runtime: Any, config: RunnableConfig) -> Any:
        """Run the steps on `run`'s view; the node's writes."""
        run_steps(run, self._steps(), runtime, config)
        return run.finish(runtime, config)

    async def _acontinue(self, run: Run, runtime: Any, config: RunnableConfig) -> Any:
        await arun_steps(run, self._steps(), runtime, config)
        return run.finish(runtime, config)


def run_steps(run: Run, steps: Iterable[Step], runtime: Any, config: RunnableConfig,
               ) -> None:
    """Run `steps` one after another on `run`'s view, until one ends the group.

    `runtime` is the node's own (LangGraph's `Runtime` of this task), which is
    what each member would be given as a node of its own. A hook that only
    takes the runtime besides the state (`Step.direct`) is called here, in the
    loop, when nothing listens: what `_invoke` does for it, without its frame
    and without working the node's metadata out again for every member.
    """
    direct = runtime if runtime is not None and not _listened(config) else None
    timed = run.events is not None  # a step's duration is only reported in its event
    view, ephemeral = run.view, run.node.ephemeral
    metadata = config.get("metadata")
    var = _CHILD_CONFIG[0] if _CHILD_CONFIG else _child_config_var()
    for step in steps:
        started = time.perf_counter() if timed else 0.0
        hook = step.direct if direct is not None else None
        if hook is not None:
            # `_invoke`'s direct case; the member's config as `_member_config` makes it.
            node = step.node
            member = config if node == MODEL_NODE else {
                **config, "metadata": {**metadata, "langgraph_node": node} if metadata
                else {"langgraph_node": node}}
            # Each hook node gets a fresh dict from LangGraph; so does each member here.
            state = view.copy()
            token = var.set(member)
            try:
                result = hook(state, runtime=direct)
                if result is not None and type(result) is not dict and _is_runnable(result):
                    result = result.invoke(state, member)  # as RunnableCallable.invoke recurses
            finally:
                var.reset(token)
        else:
            result = _invoke(step, view.copy(), direct, config)
        if result is None and not timed:  # the usual result: `absorb`'s first case, inline
            run.step += 1
            for key in ephemeral:
                view.pop(key, None)
        elif run.absorb(step, result, started):
            break


async def arun_steps(run: Run, steps: Iterable[Step], runtime: Any, config: RunnableConfig,
                      ) -> None:
    direct = runtime if runtime is not None and not _listened(config) else None
    timed = run.events is not None
    view, ephemeral = run.view, run.node.ephemeral
    for step in steps:
        started = time.perf_counter() if timed else 0.0
        result = await _ainvoke(step, view.copy(), direct, config)
        if result is None and not timed:
            run.step += 1
            for key in ephemeral:
                view.pop(key, None)
        elif run.absorb(step, result, started):
            break


def _member_config(step: Step, config: RunnableConfig) -> RunnableConfig:
    """The node's config, with `langgraph_node` naming the member's own (unfused) node.

    Chat models and runnables a hook calls inherit this metadata, so their
    streamed messages and traces say which plugin's hook made them, as in
    LangChain's graph: a consumer that keeps the `model` node's tokens (the
    answer) does not get a summary or title model's tokens with them.
    """
    node = step.node
    if node == MODEL_NODE:
        return config
    metadata = config.get("metadata")
    return {**config, "metadata": {**metadata, "langgraph_node": node} if metadata
            else {"langgraph_node": node}}


def _listened(config: RunnableConfig) -> bool:
    """Whether a callback handler (a tracer, LangGraph's `messages` stream) is listening."""
    callbacks = config.get("callbacks")
    handlers = getattr(callbacks, "handlers", callbacks)
    return bool(handlers)


def _runnable(step: Step, config: RunnableConfig) -> Any:
    # With a listener, each hook is a run of its own named as its unfused node, as
    # LangGraph makes each node a run: traces nest under it and the `messages`
    # stream reports what the hook wrote under its name, in its place. Without
    # one, that bookkeeping is skipped.
    return step.traced if step.traced is not None and _listened(config) else step.call


def _invoke(step: Step, state: dict[str, Any], runtime: Any, config: RunnableConfig) -> Any:
    """`step` on `state`: its hook called directly when `runtime` is given (nothing
    listens) and the hook allows it (`Step.direct`), else through its runnable."""
    member = _member_config(step, config)
    var = _CHILD_CONFIG[0] if _CHILD_CONFIG else _child_config_var()
    token = var.set(member)
    try:
        if runtime is not None and step.direct is not None:
            result = step.direct(state, runtime=runtime)
            if result is None or type(result) is dict:
                return result  # the usual results: not a runnable to run in its place
            if _is_runnable(result):  # as RunnableCallable.invoke recurses
                return result.invoke(state, member)
            return result
        return _runnable(step, member).invoke(state, member)
    finally:
        var.reset(token)


async def _ainvoke(step: Step, state: dict[str, Any], runtime: Any,
                   config: RunnableConfig) -> Any:
    member = _member_config(step, config)
    var = _CHILD_CONFIG[0] if _CHILD_CONFIG else _child_config_var()
    token = var.set(member)
    try:
        if runtime is not None and step.adirect is not None:
            result = await step.adirect(state, runtime=runtime)
            if _is_runnable(result):  # as RunnableCallable.ainvoke recurses
                return await result.ainvoke(state, member)
            return result
        return await _runnable(step, member).ainvoke(state, member)
    finally:
        var.reset(token)


_CHILD_CONFIG: list[Any] = []
"""LangChain's context variable of the config a runnable called now inherits, once known
(`_child_config_var`): every step sets it, and a cached call costs more than a look here."""


def _child_config_var() -> Any:
    """LangChain's context variable holding the config a runnable called now inherits."""
    from langchain_core.runnables.config import var_child_runnable_config

    if not _CHILD_CONFIG:
        _CHILD_CONFIG.append(var_child_runnable_config)
    return var_child_runnable_config


def _is_runnable(result: Any) -> bool:
    """Whether a hook returned a runnable, which `RunnableCallable` runs in its place.

    Known per class (`Runnable` is an ABC: an `isinstance` test goes through
    `ABCMeta.__instancecheck__` on every result of a hook's other kinds, a `Command`).
    """
    if result is None or type(result) is dict:
        return False  # the usual results
    cls = type(result)
    known = _RUNNABLE_CLASSES.get(cls)
    if known is None:
        known = issubclass(cls, _runnable_type())
        if len(_RUNNABLE_CLASSES) < _KEPT_CLASSES:  # classes made on the fly do not pile up
            _RUNNABLE_CLASSES[cls] = known
    return known


_RUNNABLE_CLASSES: dict[type, bool] = {}
"""Per class of a hook's result, whether it is a `Runnable` (`_is_runnable`)."""
_KEPT_CLASSES = 256


@functools.cache
def _runnable_type() -> type:
    from langchain_core.runnables import Runnable

    return Runnable


class Run:
    """One execution of a fused node: the members' view of the state and their writes.

    Writes reach the view as LangGraph's channels would apply them. The common
    writes skip building a channel: a lone value of a plain key is the key's
    value, a reducer key already in the view takes its operator directly, and
    an `add_messages` write that only adds or replaces messages is merged by id
    against an index of the view's list kept for the whole run
    (`_merge_messages`), where `add_messages` would index the whole list again
    on every write. A member's dict of updates (the usual result) is applied
    key by key as it is, without being regrouped.
    """

    __slots__ = ("before", "events", "extra", "indexed", "jumped", "last_writer", "node",
                 "overwritten", "step", "view", "writes")

    def __init__(self, node: StepRunner, state: Any, config: RunnableConfig | None = None,
                 ) -> None:
        self.node = node
        self.before: Any = state
        """The state the node read: a plain key's write of the value it holds is left out."""
        self.view: dict[str, Any] = dict(state)
        self.writes: dict[str, list[Any]] = {}
        self.indexed: dict[str, tuple[list[Any], dict[Any, int]]] = {}
        """Per messages key: the view's list and where each message id is in it."""
        self.last_writer: dict[str, int] = {}
        """The member that last wrote each key without a reducer (by `step`)."""
        self.overwritten: set[str] = set()
        """Reducer keys a member wrote an `Overwrite` to: the node writes the key's value."""
        self.extra: list[Any] = []
        self.events: list[dict[str, Any]] | None = (
            [] if config is not None and hook_events_asked(config, node.token) else None)
        """The hook events (`FUSED_EVENT`), kept only when the run asked for them."""
        self.step = -1
        self.jumped = False

    def absorb(self, step: Step, result: Any, started: float) -> bool:
        """Apply one member's result to the view; True when the group ends here."""
        self.step += 1
        events = self.events
        view = self.view
        if result is None:  # the common case: nothing to apply, a superstep passes
            if events is not None:
                events.append({"plugin": step.label, "node": step.node, "update": None,
                               "duration_ms": (time.perf_counter() - started) * 1000})
            for key in self.node.ephemeral:
                view.pop(key, None)
            return False
        written: Collection[str]
        if type(result) is dict and events is None:  # the usual update: each key once
            self._apply_update(result)
            written, stop = result, False
        else:
            pairs, extra, stop = _updates_of(result, step.label)
            if events is not None:
                # As LangGraph's `updates` stream shows a node's write: keys the state has.
                channels = self.node.channels
                events.append({"plugin": step.label, "node": step.node,
                               "update": _shown([p for p in pairs if p[0] in channels]),
                               "duration_ms": (time.perf_counter() - started) * 1000})
            self.extra.extend(extra)
            written = self._apply(pairs)
        for key in self.node.ephemeral:
            if key not in written:
                view.pop(key, None)  # a superstep passed: an ephemeral value is gone
        if JUMP_KEY in written and view.get(JUMP_KEY) in DESTINATIONS:
            target = view[JUMP_KEY]
            if target in step.can_jump:
                self.jumped = True
                return True
            if step.can_jump and not step.loop_exit:
                raise _jump_error(step, target)
        return stop

    def write(self, pairs: list[tuple[str, Any]]) -> None:
        """Apply writes the node makes itself (the run's input, a marker), not a member."""
        self._apply(pairs)

    def _apply(self, pairs: list[tuple[str, Any]]) -> dict[str, list[Any]]:
        """Apply writes to the view through each key's channel; the writes by key."""
        channels = self.node.channels
        grouped: dict[str, list[Any]] = {}
        for key, value in pairs:
            if key in channels:  # LangGraph drops keys the state does not have, silently
                grouped.setdefault(key, []).append(value)
        for key, values in grouped.items():
            if len(values) == 1:
                self._put(key, channels[key], values[0])
            else:
                self._put_all(key, channels[key], values)
        return grouped

    def _apply_update(self, update: dict[str, Any]) -> None:
        """`_apply` of a dict of updates, whose keys are written once each."""
        channels = self.node.channels
        for key, value in update.items():
            channel = channels.get(key)
            if channel is not None:  # LangGraph drops keys the state does not have
                self._put(key, channel, value)

    def _put(self, key: str, channel: Channel, value: Any) -> None:
        """Apply one value written to `key` in a superstep, as its channel would."""
        view = self.view
        if channel.kind != "reduce":
            view[key] = value  # what LastValue and EphemeralValue do with one value
            self.last_writer[key] = self.step
        else:
            if channel.messages:
                value = _as_messages(value)
            if type(value) is not list and _is_overwrite(value):  # a list never is one
                self.overwritten.add(key)
                self._through_channel(key, channel, [value])
            elif key not in view:
                self._through_channel(key, channel, [value])  # the channel's first value
            elif not (channel.merged_by_id and self._merge_messages(key, value)):
                # What BinaryOperatorAggregate.update does with a value and no Overwrite.
                view[key] = channel.template.operator(view[key], value)
        writes = self.writes.get(key)
        if writes is None:
            self.writes[key] = [value]
        else:
            writes.append(value)

    def _put_all(self, key: str, channel: Channel, values: list[Any]) -> None:
        """Apply several values written to `key` in one superstep, as its channel would."""
        if channel.messages:
            values = [_as_messages(value) for value in values]
        if channel.kind == "reduce" and key in self.view and \
                not any(_is_overwrite(value) for value in values):
            for value in values:  # what BinaryOperatorAggregate.update does: one by one
                self._put(key, channel, value)
            return
        if channel.kind == "reduce" and any(_is_overwrite(value) for value in values):
            self.overwritten.add(key)
        self._through_channel(key, channel, values)
        self.writes.setdefault(key, []).extend(values)
        self.last_writer[key] = self.step

    def _through_channel(self, key: str, channel: Channel, values: list[Any]) -> None:
        """Apply `values` through a LangGraph channel of `key` holding the view's value."""
        view = self.view
        template = channel.template
        live = template.from_checkpoint(view[key]) if key in view else template.copy()
        live.update(values)
        if live.is_available():
            view[key] = live.get()
        else:
            view.pop(key, None)

    def _merge_messages(self, key: str, value: Any) -> bool:
        """`add_messages` of `value` onto the view's list, when it only adds or replaces
        messages (False, nothing done, otherwise: a removal, or a view list some message of
        which lacks an id).

        A written message without an id gets one here as `add_messages` gives it (a
        fresh `uuid4`, set on the message itself), so the view and the node's writes
        hold it under the same id. The result is a new list, as `add_messages` returns
        (a hook may hold the old one).
        """
        current = self.view[key]
        if type(current) is not list:
            return False
        batch = value if type(value) is list else value if isinstance(value, list) else [value]
        kinds = _message_kinds
        for message in batch:
            cls = type(message)
            if (kinds[cls] if cls in kinds else _message_kind(cls)) != _PLAIN:
                return False
        indexed = self.indexed.get(key)
        if indexed is not None and indexed[0] is current:
            positions = indexed[1]
        else:
            for cls in set(map(type, current)):
                if _message_kind(cls) == _CONVERTED:
                    return False  # an Overwrite's dicts or chunks: add_messages converts them
            positions = {m.id: i for i, m in enumerate(current)}
            if None in positions:
                return False  # add_messages gives those ids; let it
        merged = current.copy()
        for message in batch:
            if message.id is None:
                message.id = _fresh_id()  # as add_messages does, in place
            at = positions.get(message.id)
            if at is None:
                positions[message.id] = len(merged)
                merged.append(message)
            else:
                merged[at] = message
        self.view[key] = merged
        self.indexed[key] = (merged, positions)
        return True

    def finish(self, runtime: Any, config: RunnableConfig | None) -> Any:
        node, view, before = self.node, self.view, self.before
        channels = node.channels
        emitted: dict[str, list[Any]] = {}
        repeated: dict[str, list[Any]] = {}  # reducer keys written more than once
        for key, values in self.writes.items():
            kind = channels[key].kind
            if kind == "reduce":
                if key in self.overwritten:
                    emitted[key] = [_overwrite(view[key])]
                else:
                    if len(values) > 1 and channels[key].fold is not None:
                        values = channels[key].fold(values)  # fewer writes, the same value
                    emitted[key] = values
                    if len(values) > 1:
                        repeated[key] = values
            elif kind == "last":
                value = values[-1]
                if type(value) in _UNCHANGING and key in before and \
                        type(before[key]) is type(value) and before[key] == value:
                    continue  # the channel holds this value already: the write changes nothing
                emitted[key] = [value]
            elif self.last_writer[key] == self.step and key in view:
                if (key == JUMP_KEY and not self.jumped and not node.loop_exit
                        and node.can_jump and view[key] in DESTINATIONS):
                    continue  # see the module docs: an undeclared jump is not routed
                emitted[key] = [view[key]]
        if self.events is not None:
            writer = getattr(runtime, "stream_writer", None)
            if writer is not None:
                writer({FUSED_EVENT: node.node, "token": node.token, "hooks": self.events})
        if not repeated:
            first = {key: values[0] for key, values in emitted.items()}
            if not self.extra:
                return first or None
            commands: list[Any] = [command_type()(update=first)] if first else []
            return commands + self.extra
        # A reducer key's writes in order, one update each, as the members made them.
        Command = command_type()
        commands = [Command(update={key: values[0] for key, values in emitted.items()})]
        for i in range(1, max(len(values) for values in repeated.values())):
            commands.append(Command(update={key: values[i] for key, values in repeated.items()
                                            if i < len(values)}))
        return commands + self.extra


_UNCHANGING = frozenset({type(None), bool, int, float, str, bytes})
"""Types of plain values `Run.finish` leaves unwritten when the channel holds an equal one of
the same type: immutable, so no member can have changed the channel's object in place (a
mutable one might have been, and the saver stores a channel's value only when it is written)."""


def _overwrite(value: Any) -> Any:
    return _overwrite_type()(value)


def _jump_error(step: Step, target: str) -> Exception:
    from langgraph.errors import InvalidUpdateError

    return InvalidUpdateError(
        f"{step.node} (plugin {step.label!r}) set jump_to={target!r} but its hook declares "
        f"can_jump_to={list(step.can_jump)}; declare the destination with "
        "@hook_config(can_jump_to=[...])"
    )


def _updates_of(result: Any, label: str) -> tuple[list[tuple[str, Any]], list[Any], bool]:
    """(state writes, Commands to pass on, whether the group ends) from a hook's result."""
    if result is None:
        return [], [], False
    if isinstance(result, dict):
        return list(result.items()), [], False
    Command = command_type()
    if type(result) is list and len(result) == 1 and type(result[0]) is Command:
        result = result[0]  # the model's or a tool's usual result: read as the Command itself
    if isinstance(result, Command):
        if result.graph == Command.PARENT:
            return [], [result], True
        update = result.update
        pairs = (list(update.items()) if isinstance(update, dict)
                 else [tuple(p) for p in update] if isinstance(update, (list, tuple))
                 else [] if update is None else None)
        if pairs is None:
            raise _invalid(update, label)
        extra = [Command(goto=result.goto)] if result.goto else []
        return pairs, extra, False
    if isinstance(result, (list, tuple)) and result and \
            any(isinstance(r, Command) for r in result):
        pairs_all: list[tuple[str, Any]] = []
        extra_all: list[Any] = []
        stop = False
        for item in result:
            pairs, extra, ends = _updates_of(item, label)
            pairs_all.extend(pairs)
            extra_all.extend(extra)
            stop = stop or ends
        return pairs_all, extra_all, stop
    get_cached_annotated_keys, get_update_as_tuples = update_fields()
    keys = get_cached_annotated_keys(type(result))
    if keys:  # a dataclass or model instance, as LangGraph accepts from a node
        return list(get_update_as_tuples(result, keys)), [], False
    raise _invalid(result, label)


def _invalid(value: Any, label: str) -> Exception:
    from langgraph.errors import InvalidUpdateError

    return InvalidUpdateError(f"a hook of plugin {label!r} returned {value!r}; expected a dict "
                              "of state updates, a Command or None")


def _shown(pairs: list[tuple[str, Any]]) -> Any:
    """A member's update as LangGraph's `updates` stream would show its node's."""
    if not pairs:
        return None
    keys = [key for key, _ in pairs]
    if len(set(keys)) == len(keys):
        return dict(pairs)
    return [{key: value} for key, value in pairs]


def route_caller(route: Any) -> Any:
    """`route.invoke`, or a call of its function alone where that is all `invoke` would do.

    That is an untraced `RunnableCallable` whose function takes nothing but the
    state, as LangChain's routing functions do: a node asks the edge after it
    on every run, and `invoke` would build its keyword arguments and look up
    the runtime each time.
    """
    func = getattr(route, "func", None)
    if type(route) is not runnable_callable() or func is None or route.trace or \
            route.kwargs or route.explode_args or route.func_accepts:
        return route.invoke
    recurse = route.recurse

    def invoke(state: Any, config: RunnableConfig) -> Any:
        result = func(state)
        if recurse and _is_runnable(result):  # as RunnableCallable.invoke recurses
            return result.invoke(state, config)
        return result

    return invoke


def edge_writer(graph: Any, node: str = MODEL_NODE) -> Any:
    """The writer of LangChain's conditional edge after `node`, if it has one."""
    BranchSpec = branch_spec()
    for writer in graph.nodes[node].writers:
        owner = getattr(getattr(writer, "func", None), "__self__", None)
        if isinstance(owner, BranchSpec):
            return writer
    return None


class DecidedRoute:
    """Where the edge goes, as the node already worked it out (not a state: never a dict)."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


def _decided_or_read(decided: SavedAnswers, read: Any) -> Any:
    """The edge's reader: the route the node left for this task, else the state as read."""
    def reader(config: RunnableConfig) -> Any:
        known = decided.take(task_key(config))
        return known if known is not None else read(config)

    return reader


def ending_edge(graph: Any, node: str, decided: SavedAnswers | None = None,
                ) -> tuple[list[Any], Any]:
    """(`node`'s writers with LangChain's edge ending the run when the node did, the edge's path).

    The edge sends a finished run to the first `after_agent` node; when the
    node ran those hooks itself (it wrote `END_MARK` true), the run ends here.
    A route the node left in `decided` for its task is taken as it is, without
    reading the state.
    """
    RunnableCallable = runnable_callable()
    edge = edge_writer(graph, node)
    spec = edge.func.__self__
    route = spec.path
    read = edge.kwargs["reader"]
    if decided is not None and read is not None:
        read = _decided_or_read(decided, read)

    ask = route_caller(route)

    def ending(state: Any, config: RunnableConfig) -> Any:
        if isinstance(state, DecidedRoute):
            return state.result
        # The node decided on the state before its after_agent hooks changed it.
        return END if state.get(END_MARK) else ask(state, config)

    ends = None if spec.ends is None else {**spec.ends, END: END}
    # `recurse=False`: `ask` already runs a runnable the route returns (`route_caller`).
    routed = spec._replace(path=RunnableCallable(ending, trace=False, recurse=False), ends=ends)
    replaced = routed.run(edge.kwargs["writer"], read)
    return [replaced if writer is edge else writer for writer in graph.nodes[node].writers], route


class SavedAnswers:
    """The model's writes of model-node runs not finished yet, by task, for their retry.

    When an `after_model` hook fails, LangGraph keeps nothing of the node, and
    the retry (a resume, or a retry policy) runs the same task again from the
    same checkpoint. Taking the model's writes from here, the retry does not
    call the model a second time, as LangChain's graph would not: it saved the
    answer before its `after_model` nodes ran. In this process only: a resume
    elsewhere calls the model again. Entries of runs never retried age out.
    """

    def __init__(self, size: int = 64) -> None:
        self._items: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def put(self, key: tuple[Any, ...] | None, value: Any) -> None:
        if key is None:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def take(self, key: tuple[Any, ...] | None) -> Any:
        if key is None:
            return None
        with self._lock:
            return self._items.pop(key, None)

    def discard(self, key: tuple[Any, ...] | None) -> None:
        self.take(key)


def task_key(config: RunnableConfig) -> tuple[Any, ...] | None:
    """The LangGraph task running `config` (stable when the same task is run again)."""
    thread_key, namespace_key, task_id_key = _task_config_keys()
    configurable = config.get("configurable") or {}
    task = configurable.get(task_id_key)
    if not task:
        return None
    return (configurable.get(thread_key), configurable.get(namespace_key),
            task)


_task_config_keys = functools.cache(task_config_keys)
"""`task_config_keys`, looked up once: `task_key` runs a few times in every model node."""
