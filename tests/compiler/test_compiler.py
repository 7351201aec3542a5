"""antler.compiler: fused hook nodes behave exactly like LangChain's one-node-per-hook graph.

The synthetic middlewares here (`Synth`) are programmed with actions that add,
replace and remove messages, write channels with and without reducers, and
jump; `tests/compiler/test_compiler_properties.py` draws random chains of them. Every
differential check builds the same chain twice (fresh instances), once as
LangChain wires it and once fused, and compares final state, message ids and
order, model requests, tool executions and errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import re
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

import pytest
from langchain.agents import create_agent as langchain_create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.tools import tool
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, Overwrite, interrupt

from antler.compiler import (
    FUSED_EVENT,
    FusionPlan,
    asking_for_hook_events,
    compile_fusion,
    create_fused_agent,
    expand_fused_updates,
    fuse,
    plan_from_hooks,
)
from antler.contracts.writes import WRITES_KEY
from antler.errors import FusionError
from antler.runtime.models import ScriptedChatModel

# -- synthetic middlewares ---------------------------------------------------------------


class SynthState(AgentState):
    tally: NotRequired[Annotated[int, operator.add]]
    log: NotRequired[Annotated[list[str], operator.add]]
    visits: NotRequired[Annotated[list[str], operator.add]]
    last: NotRequired[str]


Action = tuple[Any, ...]


@dataclass
class MwSpec:
    """One synthetic middleware: its hooks' actions and which variants it implements."""

    name: str
    hooks: dict[str, list[Action]] = field(default_factory=dict)
    variants: str = "sync"  # "sync" | "async" | "both"
    fusable: bool = True
    wrap: bool = False  # also a wrap_model_call that tags the request


JUMPABLE = {
    "before_agent": ("end", "model"),
    "before_model": ("end", "model"),
    "after_model": ("end", "model", "tools"),
    "after_agent": ("end", "model"),
}


class Synth(AgentMiddleware):
    """Runs a programmed list of actions per hook; see `MwSpec`."""

    state_schema = SynthState

    def __init__(self, name: str, hooks: dict[str, list[Action]]) -> None:
        super().__init__()
        self._name = name
        self.program = hooks
        self.tools = []

    @property
    def name(self) -> str:
        return self._name

    def act(self, kind: str, state: dict[str, Any], ask: Any = None) -> Any:
        # Everything a hook does depends on its state only (so a re-run after a
        # failure or an interrupt does the same): `visits` counts its own calls.
        here = f"{self._name}.{kind}"
        n = state.get("visits", []).count(here) + 1
        messages = state["messages"]
        stamp = f"{here}#{n}"
        update: dict[str, Any] = {"visits": [here]}
        out: list[Any] = []
        ours = [m for m in messages if str(m.id).startswith("h-")]
        for action in self.program.get(kind, []):
            op = action[0]
            if op == "add":
                out.append(HumanMessage(content=f"{stamp} saw {len(messages)}", id=f"h-{stamp}"))
            elif op == "add_noid":
                out.append(HumanMessage(content=f"{stamp} (no id)"))
            elif op == "add_dict":
                out.append({"role": "user", "content": f"{stamp} (dict)"})
            elif op == "replace" and ours:
                old = ours[-1]
                out.append(HumanMessage(content=f"{old.content} / edited by {stamp}", id=old.id))
            elif op == "remove" and ours:
                out.append(RemoveMessage(id=ours[0].id))
                ours = ours[1:]
            elif op == "tally":
                update["tally"] = action[1]
            elif op == "log":
                update["log"] = [f"{stamp}: {len(messages)} msgs, tally={state.get('tally')}, "
                                 f"last={state.get('last', '-')}, "
                                 f"jump_to={state.get('jump_to', '-')}"]
            elif op == "overwrite":
                update["log"] = Overwrite([f"reset by {stamp}"])
            elif op == "set":
                update["last"] = stamp
            elif op == "jump" and n <= action[2]:
                update["jump_to"] = action[1]
            elif op == "command":
                return Command(update={**update, "messages": out} if out else update)
            elif op == "ask" and n <= 1:
                answer = ask(f"{stamp} asks")
                update["last"] = f"{stamp} got {answer}"
            elif op == "fail" and FLAKY.pop(stamp, False):
                raise RuntimeError(f"{stamp} failed once")
        if out:
            update["messages"] = out
        return update


FLAKY: dict[str, bool] = {}
"""Stamps (`name.kind#n`) that raise once, for the failure-and-resume tests."""


def _hook(kind: str, declared: tuple[str, ...], is_async: bool,
          asks: bool) -> Callable[..., Any]:
    # A hook that may ask calls LangGraph's `interrupt` itself, which is what the
    # compiler looks for; the others never mention it.
    function: Callable[..., Any]
    if is_async and asks:
        async def aask(self: Synth, state: Any, runtime: Any) -> Any:
            await asyncio.sleep(0)
            return self.act(kind, state, interrupt)
        function = aask
    elif is_async:
        async def ahook(self: Synth, state: Any, runtime: Any) -> Any:
            await asyncio.sleep(0)
            return self.act(kind, state)
        function = ahook
    elif asks:
        def ask(self: Synth, state: Any, runtime: Any) -> Any:
            return self.act(kind, state, interrupt)
        function = ask
    else:
        def hook(self: Synth, state: Any, runtime: Any) -> Any:
            return self.act(kind, state)
        function = hook
    function.__name__ = ("a" if is_async else "") + kind
    if declared:
        function = hook_config(can_jump_to=list(declared))(function)  # type: ignore[arg-type]
    return function


_CLASSES: dict[tuple[Any, ...], type] = {}


def make_middleware(spec: MwSpec) -> Synth:
    key = (tuple(sorted((k, tuple(a[:2] for a in v if a[0] in ("jump", "ask")))
                        for k, v in spec.hooks.items())), spec.variants, spec.fusable, spec.wrap)
    cls = _CLASSES.get(key)
    if cls is None:
        body: dict[str, Any] = {}
        for kind, actions in spec.hooks.items():
            declared = tuple(t for t in JUMPABLE[kind] if any(
                a[0] == "jump" and a[1] == t for a in actions))
            asks = any(a[0] == "ask" for a in actions)
            if spec.variants in ("sync", "both"):
                body[kind] = _hook(kind, declared, False, asks)
            if spec.variants in ("async", "both"):
                body["a" + kind] = _hook(kind, declared, True, asks)
        if not spec.fusable:
            body["antler_fusable"] = False
        if spec.wrap:
            def wrap_model_call(self: Synth, request: Any, handler: Any) -> Any:
                return handler(request.override(system_message=None))

            async def awrap_model_call(self: Synth, request: Any, handler: Any) -> Any:
                return await handler(request.override(system_message=None))
            body["wrap_model_call"] = wrap_model_call
            body["awrap_model_call"] = awrap_model_call
        cls = type(f"Synth{len(_CLASSES)}", (Synth,), body)
        _CLASSES[key] = cls
    return cls(spec.name, {k: list(v) for k, v in spec.hooks.items()})


# -- running both graphs -----------------------------------------------------------------


def script(tool_rounds: int = 1, finals: int = 12, *, direct: bool = False) -> list[Any]:
    """`tool_rounds` calls to `echo`, then answers; with `direct`, each answer is a call to
    the `return_direct` tool `stop` (the run ends after the tools node)."""
    turns: list[Any] = [AIMessage(content="", id=f"ai-call-{i}", tool_calls=[
        {"name": "echo", "args": {"text": f"round {i}"}, "id": f"call-{i}"}])
        for i in range(tool_rounds)]
    if direct:
        turns += [AIMessage(content="", id=f"ai-stop-{i}", tool_calls=[
            {"name": "stop", "args": {"text": f"final {i}"}, "id": f"stop-{i}"}])
            for i in range(finals)]
    else:
        turns += [AIMessage(content=f"final {i}", id=f"ai-final-{i}") for i in range(finals)]
    return turns


@dataclass
class Outcome:
    values: dict[str, Any] | None
    error: str | None
    requests: list[list[tuple[str, str, str]]]
    tools: list[str]
    checkpoints: int
    interrupts: int = 0

    def comparable(self) -> tuple[Any, ...]:
        """What must be equal; ids `add_messages` generated are named by first appearance.

        A message without an id gets a fresh random one in both graphs, and LangGraph
        may convert a message dict more than once (a conditional edge reads the
        node's writes before they are applied), so only the pattern of generated
        ids can be compared: the same message keeps the same name everywhere.
        """
        names: dict[str, str] = {}

        def name(rows: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
            out = []
            for kind, message_id, content in rows:
                if message_id.startswith("auto-"):
                    message_id = names.setdefault(message_id, f"generated-{len(names)}")
                out.append((kind, message_id, content))
            return out

        requests = [name(r) for r in self.requests]
        values = None
        if self.values is not None:
            values = {k: v for k, v in self.values.items() if k != "messages"}
            values["messages"] = name(describe(self.values["messages"]))
        return values, self.error, requests, self.tools


def describe(messages: Sequence[Any]) -> list[tuple[str, str, str]]:
    return [(m.type, str(m.id), str(m.content)) if not isinstance(m, dict)
            else ("dict", "", str(m.get("content"))) for m in messages]


@contextlib.contextmanager
def counted_ids() -> Iterator[None]:
    """`add_messages` gives id-less messages uuid4 ids; make them a counter meanwhile."""
    import langgraph.graph.message as message_module

    counter = itertools.count()
    saved = message_module.uuid
    message_module.uuid = types.SimpleNamespace(  # type: ignore[assignment]
        uuid4=lambda: f"auto-{next(counter)}")
    try:
        yield
    finally:
        message_module.uuid = saved


@pytest.fixture(autouse=True)
def _no_flaky_leftovers() -> Iterator[None]:
    FLAKY.clear()
    yield
    FLAKY.clear()


Fused = bool | str
"""How `build` compiles: False (LangChain's graph), True (node fusion) or "model"
(node fusion and the model-call hooks inside the model node)."""

FUSED_MODES: tuple[Fused, ...] = (True, "model")


def build(specs: Sequence[MwSpec], *, fused: Fused, turns: list[Any] | None = None,
          checkpointer: Any = True, tools: bool = True,
          ) -> tuple[Any, ScriptedChatModel, list[str], FusionPlan | None]:
    executed: list[str] = []

    @tool
    def echo(text: str) -> str:
        """Echo the text back."""
        executed.append(text)
        return f"echo: {text}"

    @tool(return_direct=True)
    def stop(text: str) -> str:
        """Answer the user with the text and end the run."""
        executed.append(f"stop {text}")
        return text

    middlewares: list[Any] = [make_middleware(spec) for spec in specs]
    model = ScriptedChatModel(turns if turns is not None else script())
    kwargs: dict[str, Any] = {
        "model": model, "tools": [echo, stop] if tools else [], "state_schema": SynthState,
        "checkpointer": InMemorySaver() if checkpointer else None}
    unfusable = {s.name for s in specs if not s.fusable and not s.wrap}
    if fused == "model":
        graph, plan = create_fused_agent(middlewares, unfusable=unfusable, **kwargs)
        return graph, model, executed, plan
    plan = None
    if fused:
        compiled = compile_fusion(middlewares, unfusable=unfusable)
        middlewares, plan = compiled.middlewares, compiled.plan
    graph = langchain_create_agent(middleware=middlewares, **kwargs)
    return graph, model, executed, plan


def run(specs: Sequence[MwSpec], *, fused: Fused, use_async: bool = False,
        resume: Any = None, turns: list[Any] | None = None, retry: bool = False) -> Outcome:
    with counted_ids():
        return _run(specs, fused=fused, use_async=use_async, resume=resume, turns=turns,
                    retry=retry)


def _run(specs: Sequence[MwSpec], *, fused: Fused, use_async: bool, resume: Any,
         turns: list[Any] | None, retry: bool) -> Outcome:
    graph, model, executed, _plan = build(specs, fused=fused, turns=turns)
    config = {"configurable": {"thread_id": "t"}}
    error = None
    interrupts = 0
    inputs: Any = {"messages": [HumanMessage(content="hello", id="user-1")]}
    for _attempt in range(6):
        try:
            if use_async:
                asyncio.run(graph.ainvoke(inputs, config))
            else:
                graph.invoke(inputs, config)
            error = None
        except Exception as exc:  # compared between the two graphs
            error = type(exc).__name__
            if retry and error == "RuntimeError":
                inputs = None  # resume from the last checkpoint
                continue
            break
        snapshot = graph.get_state(config)
        if snapshot.interrupts and resume is not None:
            interrupts += 1
            inputs = Command(resume=resume)
            continue
        break
    values = None if error else dict(graph.get_state(config).values)
    requests = [describe(r.messages) for r in model.requests]
    checkpoints = len(list(graph.get_state_history(config)))
    return Outcome(values, error, requests, executed, checkpoints, interrupts)


def assert_same(specs: Sequence[MwSpec], *, modes: Sequence[Fused] = FUSED_MODES,
                **kwargs: Any) -> tuple[Outcome, Outcome]:
    """Run the chain unfused and in every fused mode; all must agree. (unfused, last)."""
    unfused = run(specs, fused=False, **kwargs)
    fused = unfused
    for mode in modes:
        FLAKY.clear()
        fused = run(specs, fused=mode, **kwargs)
        assert fused.comparable() == unfused.comparable(), f"fused={mode!r} differs"
        assert fused.interrupts == unfused.interrupts, f"fused={mode!r} differs"
    return unfused, fused


def spec(name: str, variants: str = "sync", **hooks: list[Action]) -> MwSpec:
    return MwSpec(name, dict(hooks), variants)


EVERYTHING = [
    spec("a", before_agent=[("add",), ("set",)],
         before_model=[("log",), ("tally", 1), ("set",)],
         after_model=[("add",), ("log",)], after_agent=[("log",)]),
    spec("b", before_agent=[("log",)], before_model=[("add_noid",), ("replace",)],
         after_model=[("tally", 2), ("set",)], after_agent=[("add",), ("set",)]),
    spec("c", before_model=[("remove",), ("log",), ("set",)], after_model=[("add_dict",)]),
    spec("d", before_model=[("add",), ("tally", 3)], after_model=[("log",), ("replace",)],
         after_agent=[("set",), ("log",)]),
]


# -- planning ----------------------------------------------------------------------------


def test_node_hooks_of_one_kind_share_one_node_in_langchains_order():
    plan = compile_fusion([make_middleware(s) for s in EVERYTHING]).plan
    by_kind = {node.kind: node for node in plan.nodes}
    assert by_kind["before_agent"].members == ("a", "b")
    assert by_kind["before_model"].members == ("a", "b", "c", "d")
    assert by_kind["after_model"].members == ("d", "c", "b", "a")  # reverse list order
    assert by_kind["after_agent"].members == ("d", "b", "a")
    assert plan.node_count == 4 and plan.unfused_node_count == 13
    assert "fused_2.before_model: a -> b -> c -> d" in plan.render()


def test_the_compiled_graph_has_one_node_per_fused_group_and_keeps_the_rest():
    graph, *_ = build(EVERYTHING, fused=True)
    nodes = set(graph.get_graph().nodes)
    assert {"fused_1.before_agent", "fused_2.before_model", "fused_3.after_model",
            "fused_4.after_agent", "model", "tools"} <= nodes
    assert not any(n.startswith(("a.", "b.", "c.", "d.")) for n in nodes)


def test_unfusable_members_stand_alone_and_split_the_run():
    specs = [spec(n, before_model=[("log",)]) for n in "abcde"]
    specs[2].fusable = False
    middlewares = [make_middleware(s) for s in specs]
    plan = compile_fusion(middlewares).plan
    assert [n.members for n in plan.nodes] == [("a", "b"), ("c",), ("d", "e")]
    assert plan.nodes[1].node == "c.before_model"
    assert plan.nodes[1].alone == "antler_fusable = False"
    # The same through the manifest flag (the `unfusable` labels).
    specs[2].fusable = True
    plan = compile_fusion([make_middleware(s) for s in specs], unfusable={"d"}).plan
    assert [n.members for n in plan.nodes] == [("a", "b", "c"), ("d",), ("e",)]
    assert plan.nodes[1].alone == "fusable: false"


def test_a_hook_that_can_interrupt_keeps_its_own_node_but_its_other_hooks_fuse():
    specs = [spec("a", before_model=[("log",)], after_model=[("log",)]),
             spec("b", before_model=[("log",)], after_model=[("ask",)]),
             spec("c", before_model=[("log",)], after_model=[("log",)])]
    plan = compile_fusion([make_middleware(s) for s in specs]).plan
    assert [(n.kind, n.members) for n in plan.nodes] == [
        ("before_model", ("a", "b", "c")),
        ("after_model", ("c",)), ("after_model", ("b",)), ("after_model", ("a",))]
    assert plan.nodes[2].alone == "may call interrupt()"


def test_langchains_human_in_the_loop_middleware_is_detected_as_interrupting():
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    hitl = HumanInTheLoopMiddleware(interrupt_on={"echo": True})
    before = make_middleware(spec("x", after_model=[("log",)]))
    after = make_middleware(spec("y", after_model=[("log",)]))
    plan = compile_fusion([before, hitl, after]).plan
    assert all(not node.fused for node in plan.nodes)


def test_different_trace_policies_are_not_fused_together():
    from langchain.agents.middleware.types import TracePolicy

    middlewares = [make_middleware(spec(n, before_model=[("log",)])) for n in "abc"]
    policy = TracePolicy(process_inputs=lambda inputs: {})
    middlewares[1].trace_policy = middlewares[2].trace_policy = policy
    compiled = compile_fusion(middlewares)
    assert [n.members for n in compiled.plan.nodes] == [("a",), ("b", "c")]
    fused = [m for m in compiled.middlewares if m.name.startswith("fused_")]
    assert [m.trace_policy for m in fused] == [policy]


def test_the_loop_entry_is_split_when_a_later_member_may_jump_back_to_it():
    specs = [spec("a", before_model=[("log",)]),
             spec("b", before_model=[("jump", "model", 1)]),
             spec("c", before_model=[("log",)])]
    plan = compile_fusion([make_middleware(s) for s in specs]).plan
    assert [n.members for n in plan.nodes] == [("a",), ("b", "c")]
    assert_same(specs)


def test_model_call_hooks_can_run_inside_the_model_node():
    graph, _model, _tools, plan = build(EVERYTHING, fused="model")
    assert plan is not None
    assert [(n.kind, n.node, n.absorbed) for n in plan.nodes] == [
        ("before_agent", "__start__", True),
        ("before_model", "model", True),
        ("after_model", "model", True),
        ("after_agent", "fused_1.after_agent", False)]
    assert plan.node_count == 1 and plan.unfused_node_count == 13
    assert "model (after_model, inside the model node): d -> c -> b -> a" in plan.render()
    assert "__start__ (before_agent, inside the input step): a -> b" in plan.render()
    nodes = set(graph.nodes)
    assert not any(n.endswith((".before_agent", ".before_model", ".after_model"))
                   for n in nodes)
    # One superstep per model call: fewer checkpoints than node fusion alone.
    assert run(EVERYTHING, fused="model").checkpoints < run(EVERYTHING, fused=True).checkpoints


def test_an_interrupting_after_model_hook_keeps_both_model_call_kinds_in_nodes():
    specs = [spec("a", before_model=[("log",)], after_model=[("log",)]),
             spec("b", before_model=[("log",)], after_model=[("ask",)])]
    compiled = compile_fusion([make_middleware(s) for s in specs], into_model=True)
    assert compiled.model_hooks is None and not compiled.plan.absorbed
    assert "after_model hooks keep their nodes: b.after_model stands alone" in \
        compiled.plan.note
    assert "before_model hooks keep their nodes: its jumps must skip" in compiled.plan.note


def test_a_model_wrapper_that_can_interrupt_keeps_the_model_call_hooks_in_nodes():
    class Approval(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            interrupt("approve this model call?")
            return handler(request)

    middlewares = [make_middleware(spec("a", before_model=[("log",)], after_model=[("log",)])),
                   Approval()]
    compiled = compile_fusion(middlewares, into_model=True)
    assert compiled.model_hooks is None
    assert "Approval.wrap_model_call may call interrupt()" in compiled.plan.note


def test_after_model_hooks_go_inside_even_when_before_model_hooks_cannot():
    specs = [spec("a", before_model=[("ask",)], after_model=[("log",), ("tally", 1)]),
             spec("b", before_model=[("log",)], after_model=[("add",)])]
    compiled = compile_fusion([make_middleware(s) for s in specs], into_model=True)
    assert [n.kind for n in compiled.plan.absorbed] == ["after_model"]
    assert_same(specs, resume="yes")


def test_without_tools_a_jump_back_to_the_model_keeps_the_hooks_in_their_nodes():
    # With no tools the model node has a plain edge to the end: it cannot route a
    # jump to the model, so the graph is built again with the hooks in nodes.
    specs = [spec("a", before_model=[("log",)]),
             spec("b", after_model=[("log",), ("jump", "model", 1)])]
    graph, _model, _tools, plan = build(specs, fused="model", tools=False)
    assert plan is not None and not plan.absorbed
    assert "no conditional edge" in plan.note
    assert any(n.endswith(".after_model") for n in graph.get_graph().nodes)
    # Jumps to the end need no edge of their own: those hooks still go inside.
    specs[1].hooks["after_model"] = [("log",), ("jump", "end", 1)]
    _graph, _model, _tools, plan = build(specs, fused="model", tools=False)
    assert plan is not None and len(plan.absorbed) == 2


def test_install_refuses_a_graph_it_cannot_route_and_a_second_install():
    specs = [spec("a", after_model=[("jump", "model", 1)])]
    compiled = compile_fusion([make_middleware(s) for s in specs], into_model=True)

    def graph(**kwargs: Any) -> Any:
        return langchain_create_agent(model=ScriptedChatModel(script(0)), state_schema=SynthState,
                                      middleware=compiled.middlewares, **kwargs)

    with pytest.raises(FusionError, match=r"no conditional edge.*into_model=False"):
        compiled.install(graph())
    # LangChain gives the model node's edge a way back to the model only when some
    # middleware wraps the model call: with none in the chain, the compile adds a
    # pass-through wrapper (the after_model nodes it replaces had that way back).
    assert [m.name for m in compiled.middlewares][-1] == "antler_model_edge"
    with_tools = graph(tools=[echo_tool()])
    compiled.install(with_tools)
    with pytest.raises(FusionError, match="already run inside"):
        compiled.install(with_tools)


def test_the_plan_from_declarations_matches_the_compiled_plan():
    rows = [("a", ["before_agent", "before_model", "wrap_model_call"], True),
            ("b", ["before_model", "after_model"], True),
            ("c", ["after_model"], False),
            ("d", None, True),
            ("e", ["after_model", "before_model"], True)]
    plan = plan_from_hooks(rows)
    assert [(n.kind, n.members, n.node) for n in plan.nodes] == [
        ("before_agent", ("a",), "a.before_agent"),
        ("before_model", ("a", "b", "e"), "fused_1.before_model"),
        ("after_model", ("e",), "e.after_model"),
        ("after_model", ("c",), "c.after_model"),
        ("after_model", ("b",), "b.after_model"),
    ]
    assert plan.nodes[3].alone == "fusable: false"
    assert plan.as_dict()["hook_nodes_unfused"] == 7


def test_chain_show_can_plan_from_the_resolved_specs_alone():
    from antler.chain import plan_chain
    from antler.compiler import plan_for_specs
    from antler.plugin_api.context import RuntimeOptions

    chain = plan_chain(None, "lead", RuntimeOptions(subagents_enabled=True))
    specs = [chain.resolution.placements[name].spec for name in chain.order]
    plan = plan_for_specs(specs)
    assert plan.enabled and plan.unfused_node_count >= plan.node_count
    assert all(node.node.endswith("." + node.kind) for node in plan.nodes)
    off = plan_for_specs(specs, enabled=False)
    assert not off.enabled and off.render() == "node fusion: off (chain.fuse: false)"


def test_proxies_keep_name_tools_schema_wrap_hooks_and_instance_state():
    specs = [MwSpec("a", {"before_model": [("log",)]}, wrap=True),
             MwSpec("b", {"before_model": [("log",)]})]
    originals = [make_middleware(s) for s in specs]
    originals[0].tools = ["marker"]
    fused = fuse(originals)
    proxy = next(m for m in fused if getattr(m, "name", None) == "a")
    assert isinstance(proxy, type(originals[0]))
    assert proxy.tools == ["marker"] and proxy.state_schema is SynthState
    assert type(proxy).wrap_model_call is type(originals[0]).wrap_model_call
    assert type(proxy).before_model is AgentMiddleware.before_model
    assert proxy.program is originals[0].program
    # The input list and instances are untouched.
    assert type(originals[0]).before_model is not AgentMiddleware.before_model
    assert [m.name for m in fused] == ["fused_1", "a", "b"]


class Delegating(AgentMiddleware):
    """Async hooks that call the sync ones through `self`, a common pattern."""

    state_schema = SynthState

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def before_model(self, state: Any, runtime: Any) -> Any:
        return {"log": [f"{self._name} before {len(state['messages'])}"]}

    async def abefore_model(self, state: Any, runtime: Any) -> Any:
        return self.before_model(state, runtime)

    def after_model(self, state: Any, runtime: Any) -> Any:
        return {"log": [f"{self._name} after {len(state['messages'])}"]}

    async def aafter_model(self, state: Any, runtime: Any) -> Any:
        return self.after_model(state, runtime)


@pytest.mark.parametrize("use_async", [False, True])
def test_hooks_that_call_their_sibling_through_self_still_reach_it(use_async):
    def run_with(fused: bool) -> list[str]:
        mws: list[Any] = [Delegating("p"), Delegating("q")]
        if fused:
            mws = fuse(mws)
            assert len(mws) == 4
        graph = langchain_create_agent(model=ScriptedChatModel(script(0)), middleware=mws,
                                       checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        inputs = {"messages": [HumanMessage("hi", id="u")]}
        if use_async:
            asyncio.run(graph.ainvoke(inputs, config))
        else:
            graph.invoke(inputs, config)
        return list(graph.get_state(config).values["log"])

    assert run_with(True) == run_with(False) == [
        "p before 1", "q before 1", "q after 2", "p after 2"]


def test_a_chain_with_nothing_to_fuse_is_returned_as_is():
    middlewares = [make_middleware(spec("a", before_model=[("log",)])),
                   make_middleware(spec("b", after_model=[("log",)]))]
    assert fuse(middlewares) == middlewares


# -- differential: fused and unfused graphs agree ----------------------------------------


def test_everything_at_once_gives_the_same_state_ids_requests_and_tools():
    unfused, fused = assert_same(EVERYTHING)
    assert unfused.error is None
    assert unfused.values is not None and unfused.values["log"]  # the hooks did run
    assert fused.checkpoints < unfused.checkpoints


def test_async_invocation_agrees_and_sync_only_members_still_run():
    specs = [MwSpec(s.name, s.hooks, variants) for s, variants in
             zip(EVERYTHING, ("both", "sync", "async", "both"), strict=True)]
    unfused, _fused = assert_same(specs, use_async=True)
    assert unfused.error is None


def test_an_async_only_member_fails_a_sync_invocation_in_both_graphs():
    specs = [spec("a", before_model=[("add",)]),
             spec("b", "async", before_model=[("add",)])]
    unfused, _fused = assert_same(specs)
    assert unfused.error == "TypeError"


@pytest.mark.parametrize("kind,target", [
    ("before_agent", "end"), ("before_agent", "model"), ("before_model", "end"),
    ("before_model", "model"), ("after_model", "end"), ("after_model", "model"),
    ("after_model", "tools"),
    ("after_agent", "end"), ("after_agent", "model"),
])
def test_a_jump_ends_the_group_where_the_unfused_graph_skips_the_rest(kind, target):
    specs = [spec("a", **{kind: [("add",), ("log",)]}),
             spec("b", **{kind: [("log",), ("jump", target, 1), ("set",)]}),
             spec("c", **{kind: [("add",), ("log",)]}),
             spec("d", before_model=[("log",)], after_model=[("log",)])]
    unfused, _fused = assert_same(specs)
    assert unfused.values is not None or unfused.error


def test_the_next_member_sees_jump_to_only_right_after_it_was_written():
    # `jump_to` is ephemeral: b writes None (no jump), c sees it, d no longer does.
    specs = [spec("a", before_model=[("log",)]),
             spec("b", before_model=[("jump", None, 5), ("log",)]),
             spec("c", before_model=[("log",)]),
             spec("d", before_model=[("log",)])]
    unfused, _fused = assert_same(specs)
    assert unfused.values is not None


def test_an_undeclared_jump_is_not_routed_in_either_graph():
    class Sneaky(Synth):
        def before_model(self, state: Any, runtime: Any) -> Any:
            return {"jump_to": "end", "log": [f"{self.name} sneaks"]}

    def run_with(fused: bool) -> Outcome:
        model = ScriptedChatModel(script(0))
        mws = [make_middleware(spec("a", before_model=[("log",)])), Sneaky("s", {}),
               make_middleware(spec("c", before_model=[("log",)]))]
        if fused:
            mws = fuse(mws)
        graph = langchain_create_agent(model=model, middleware=mws, state_schema=SynthState,
                                       checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        graph.invoke({"messages": [HumanMessage("hi", id="u")]}, config)
        values = dict(graph.get_state(config).values)
        return Outcome(values, None, [describe(r.messages) for r in model.requests], [], 0)

    with counted_ids():
        fused = run_with(True)
    with counted_ids():
        assert fused.comparable() == run_with(False).comparable()


def test_overwrite_followed_by_more_writes_keeps_the_sequential_result():
    specs = [spec("a", before_model=[("log",)]),
             spec("b", before_model=[("overwrite",)]),
             spec("c", before_model=[("log",)])]
    unfused, _ = assert_same(specs)
    assert unfused.values is not None and unfused.values["log"][0].startswith("reset by b")


def test_a_hook_returning_a_command_is_applied_like_a_dict():
    specs = [spec("a", before_model=[("add",), ("log",)]),
             spec("b", before_model=[("add",), ("tally", 4), ("command",)]),
             spec("c", before_model=[("log",)])]
    assert_same(specs)


def test_message_dicts_become_messages_with_the_same_ids_in_both_graphs():
    specs = [spec("a", before_model=[("add_dict",)]),
             spec("b", before_model=[("add_noid",), ("replace",)]),
             spec("c", before_model=[("remove",), ("log",)])]
    unfused, fused = assert_same(specs)
    assert fused.values is not None
    assert [m.id for m in fused.values["messages"]] == [
        m.id for m in unfused.values["messages"]]  # type: ignore[index]


def test_structured_output_agrees_with_hooks_inside_the_model_node():
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import BaseModel

    class Answer(BaseModel):
        text: str

    specs = [spec("a", before_model=[("add",), ("log",)], after_model=[("log",), ("set",)]),
             spec("b", before_model=[("tally", 2)], after_model=[("add",)])]
    turns = [AIMessage(content="", id="ai-call-0", tool_calls=[
                 {"name": "echo", "args": {"text": "x"}, "id": "call-0"}]),
             AIMessage(content="", id="ai-answer", tool_calls=[
                 {"name": "Answer", "args": {"text": "done"}, "id": "call-answer"}])]

    def outcome(fused: Fused) -> tuple[Any, ...]:
        model = ScriptedChatModel(list(turns))
        kwargs: dict[str, Any] = {"model": model, "tools": [echo_tool()],
                                  "state_schema": SynthState, "response_format":
                                  ToolStrategy(Answer), "checkpointer": InMemorySaver()}
        mws: list[Any] = [make_middleware(s) for s in specs]
        if fused == "model":
            graph, plan = create_fused_agent(mws, **kwargs)
            assert plan.absorbed
        else:
            graph = langchain_create_agent(middleware=fuse(mws) if fused else mws, **kwargs)
        with counted_ids():
            result = graph.invoke({"messages": [HumanMessage("hi", id="u")]},
                                  {"configurable": {"thread_id": "t"}})
        values = {k: v for k, v in result.items() if k != "messages"}
        return (values, describe(result["messages"]),
                [describe(r.messages) for r in model.requests])

    unfused = outcome(False)
    assert unfused[0]["structured_response"] == Answer(text="done")
    assert outcome(True) == unfused
    assert outcome("model") == unfused


# -- interrupts, failures and resuming ---------------------------------------------------


def test_an_interrupt_and_resume_end_in_the_same_state():
    specs = [spec("a", before_model=[("add",)], after_model=[("log",), ("tally", 1)]),
             spec("b", after_model=[("log",), ("ask",), ("log",)]),
             spec("c", before_model=[("log",)], after_model=[("add",), ("log",)])]
    unfused, fused = assert_same(specs, resume="yes")
    assert unfused.interrupts == 1
    assert fused.values is not None and "got yes" in fused.values["last"]


def test_a_failed_run_resumed_ends_in_the_same_state():
    specs = [spec("a", before_model=[("add",), ("tally", 1)]),
             spec("b", before_model=[("log",), ("fail",)]),
             spec("c", before_model=[("add",), ("log",)]),
             spec("d", after_model=[("log",), ("fail",)]),
             spec("e", after_model=[("add",)])]

    def arm() -> None:
        FLAKY.update({"b.before_model#1": True, "d.after_model#2": True})

    arm()
    unfused = run(specs, fused=False, retry=True)
    arm()
    fused = run(specs, fused=True, retry=True)
    assert unfused.error is None and fused.error is None
    assert fused.comparable()[0] == unfused.comparable()[0]
    # What differs by design: the fused node re-ran its earlier members (a's hook),
    # so their calls appear twice in the log only if they log; the state is the same.


def test_inside_the_model_node_a_failed_before_model_hook_resumes_to_the_same_state():
    specs = [spec("a", before_model=[("add",), ("tally", 1)]),
             spec("b", before_model=[("log",), ("fail",)]),
             spec("c", after_model=[("add",), ("log",)])]
    FLAKY["b.before_model#2"] = True
    unfused = run(specs, fused=False, retry=True)
    FLAKY["b.before_model#2"] = True
    inside = run(specs, fused="model", retry=True)
    assert unfused.error is None and inside.comparable() == unfused.comparable()


def test_a_compiled_turn_writes_as_many_checkpoints_as_a_bare_agent():
    """before_agent hooks run in the input step, after_agent hooks in the model node
    that ends the run: no superstep of their own."""
    bare = run([], fused=False)
    inside = run(EVERYTHING, fused="model")
    nodes_only = run(EVERYTHING, fused=True)
    assert inside.checkpoints == bare.checkpoints
    assert nodes_only.checkpoints > inside.checkpoints


def test_inside_the_input_step_a_failed_before_agent_hook_leaves_the_input_unwritten():
    """Input and before_agent updates are saved together: a failure writes neither,
    resuming runs the input step again, and the run ends as LangChain's graph ends."""
    specs = [spec("a", before_agent=[("add",), ("log",)]),
             spec("b", before_agent=[("log",), ("fail",)]),
             spec("c", after_model=[("add",)])]
    FLAKY["b.before_agent#1"] = True
    unfused = run(specs, fused=False, retry=True)
    FLAKY["b.before_agent#1"] = True
    with counted_ids():
        graph, _model, _executed, plan = build(specs, fused="model")
        assert plan is not None and plan.node_of("b", "before_agent") == "__start__"
        config = {"configurable": {"thread_id": "t"}}
        with pytest.raises(RuntimeError, match=r"b\.before_agent#1 failed once"):
            graph.invoke({"messages": [HumanMessage(content="hello", id="user-1")]}, config)
        failed = graph.get_state(config)
        assert failed.next == ("__start__",)
        assert "user-1" not in [m.id for m in failed.values.get("messages", [])]
        graph.invoke(None, config)
        resumed = graph.get_state(config).values
    assert [m.id for m in resumed["messages"]][:1] == ["user-1"]
    assert resumed["log"] == unfused.values["log"] if unfused.values else False
    FLAKY["b.before_agent#1"] = True
    inside = run(specs, fused="model", retry=True)
    assert unfused.error is None and inside.comparable() == unfused.comparable()


def test_inside_the_model_node_a_failed_after_model_hook_does_not_repeat_the_model_call():
    """In one process the retried node takes the model's answer it kept, as LangChain's
    graph takes the one it checkpointed before its after_model nodes ran."""
    specs = [spec("a", before_model=[("tally", 1)]),
             spec("d", after_model=[("log",), ("fail",)]),
             spec("e", after_model=[("add",)])]
    FLAKY["d.after_model#1"] = True
    unfused = run(specs, fused=False, retry=True, turns=script(0))
    FLAKY["d.after_model#1"] = True
    inside = run(specs, fused="model", retry=True, turns=script(0))
    assert unfused.error is None and inside.error is None
    assert len(inside.requests) == len(unfused.requests) == 1
    assert inside.comparable() == unfused.comparable()


def test_resumed_in_another_process_the_model_node_calls_the_model_again():
    """The documented difference: the kept answer lives in the process that failed."""
    specs = [spec("d", after_model=[("log",), ("fail",)])]
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "t"}}

    def graph(model: ScriptedChatModel) -> Any:
        built, _plan = create_fused_agent([make_middleware(s) for s in specs], model=model,
                                          tools=[echo_tool()], state_schema=SynthState,
                                          checkpointer=saver)
        return built

    first, second = ScriptedChatModel(script(0)), ScriptedChatModel(script(0, finals=2)[1:])
    FLAKY["d.after_model#1"] = True
    with pytest.raises(RuntimeError, match="failed once"):
        graph(first).invoke({"messages": [HumanMessage("hello", id="user-1")]}, config)
    values = graph(second).invoke(None, config)  # a fresh compile: nothing kept
    assert len(first.requests) == len(second.requests) == 1
    assert [m.content for m in values["messages"] if m.type == "ai"] == ["final 1"]


# -- observability -----------------------------------------------------------------------


def platform_registry() -> Any:
    from antler.plugin_api.manifest import Manifest, builtin_manifest
    from antler.plugin_api.registry import PluginRegistry

    manifest = builtin_manifest()
    return PluginRegistry.from_manifests([Manifest(
        source="platform", points=manifest.points, slots=manifest.slots,
        default_slot=manifest.default_slot)])


def antler_agent(tmp_path: Any, fuse_: bool | None, tracer: Any = None,
                 config: Any = None) -> Any:
    from antler.runtime.agent import create_agent

    return create_agent(config, registry=platform_registry(), model=ScriptedChatModel(script()),
                        tools=[echo_tool()], checkpointer="memory", base_dir=tmp_path,
                        custom_middlewares=[make_middleware(s) for s in EVERYTHING],
                        tracer=tracer, fuse=fuse_)


def echo_tool() -> Any:
    @tool
    def echo(text: str) -> str:
        """Echo the text back."""
        return f"echo: {text}"
    return echo


def test_the_trace_lists_the_same_plugin_hooks_fused_or_not(tmp_path):
    from antler.runtime.tracing import Tracer

    timelines = []
    for fused in (False, True):
        tracer = Tracer()
        with counted_ids(), antler_agent(tmp_path / str(fused), fused, tracer) as agent:
            agent.invoke("hello", thread_id="t")
            assert (agent.fusion is not None) is fused
        timelines.append(tracer.hooks())
    assert timelines[0] == timelines[1]
    before_model = {plugin for plugin, hook in timelines[1] if hook == "before_model"}
    assert len(before_model) == 4  # every plugin is named, not the fused node


def test_streamed_updates_name_each_plugin_hook_as_the_unfused_graph_does(tmp_path):
    streams = []
    for fused in (False, True):
        with counted_ids(), antler_agent(tmp_path / str(fused), fused) as agent:
            chunks = list(agent.stream("hello", thread_id="t"))
        streams.append([{node: _plain(update) for node, update in chunk.items()}
                        for chunk in chunks])
    assert streams[1] == streams[0]
    assert any(node.endswith(".before_model") and not node.startswith("fused")
               for chunk in streams[1] for node in chunk)


def test_streaming_with_several_modes_keeps_the_requested_shape(tmp_path):
    with antler_agent(tmp_path, True) as agent:
        chunks = list(agent.stream("hello", thread_id="t", stream_mode=["updates", "values"]))
    modes = {mode for mode, _ in chunks}
    assert modes == {"updates", "values"}
    nodes = [node for mode, payload in chunks if mode == "updates" for node in payload]
    assert not any(node.startswith("fused_") for node in nodes)


def test_custom_events_describe_each_member_with_its_time():
    graph, _model, _executed, plan = build(EVERYTHING, fused=True)
    assert plan is not None
    config = asking_for_hook_events({"configurable": {"thread_id": "t"}}, plan)
    events = [payload for payload in graph.stream(
        {"messages": [HumanMessage("hi", id="u")]}, config, stream_mode="custom")
        if isinstance(payload, dict) and FUSED_EVENT in payload]
    first = events[0]
    assert first[FUSED_EVENT] == "fused_1.before_agent"
    assert [h["plugin"] for h in first["hooks"]] == ["a", "b"]
    assert [h["node"] for h in first["hooks"]] == ["a.before_agent", "b.before_agent"]
    assert all(h["duration_ms"] >= 0 for h in first["hooks"])


class AsksAModel(AgentMiddleware):
    """A before_model hook that calls a chat model of its own (as summarization does)."""

    def __init__(self) -> None:
        super().__init__()
        self.helper = ScriptedChatModel(["a summary"] * 4)

    def before_model(self, state: Any, runtime: Any) -> None:
        self.helper.invoke("summarize")


@pytest.mark.parametrize("fused", [False, True, "model"])
def test_a_hooks_own_model_calls_stream_under_the_hooks_node_name(fused):
    mws: list[Any] = [AsksAModel(), make_middleware(spec("b", before_model=[("log",)]))]
    kwargs: dict[str, Any] = {"model": ScriptedChatModel(script(0)), "tools": [echo_tool()],
                              "state_schema": SynthState}
    if fused == "model":
        graph, plan = create_fused_agent(mws, **kwargs)
        assert plan.absorbed
    else:
        graph = langchain_create_agent(middleware=fuse(mws) if fused else mws, **kwargs)
    seen = [(message.content, metadata["langgraph_node"]) for message, metadata in graph.stream(
        {"messages": [HumanMessage("hi", id="u")]}, stream_mode="messages")]
    # The scripted models stream word by word: join each node's chunks.
    text: dict[str, str] = {}
    for content, node in seen:
        text[node] = text.get(node, "") + content
    assert text["AsksAModel.before_model"].startswith("a summary")
    assert text["model"] == "final 0"


@pytest.mark.parametrize("configurable", [{}, {"antler_hook_events": "guessed"}],
                         ids=["not-asked", "wrong-token"])
def test_hook_events_stay_in_the_process_unless_asked_with_the_plans_token(configurable):
    # The events hold every hook's update, private channels included: a stream that
    # asks for `custom` (a server client) without the plan's token never sees them.
    graph, _model, _executed, plan = build(EVERYTHING, fused=True)
    assert plan is not None and plan.streamed_nodes
    config = {"configurable": {"thread_id": "t", **configurable}}
    chunks = list(graph.stream({"messages": [HumanMessage("hi", id="u")]}, config,
                               stream_mode="custom"))
    assert not [c for c in chunks if isinstance(c, dict) and FUSED_EVENT in c]
    assert plan.token not in repr(chunks)


def test_expansion_leaves_foreign_chunks_alone():
    plan = plan_from_hooks([("a", ["before_model"], True), ("b", ["before_model"], True)])
    chunks = [("custom", {"other": 1}), ("updates", {"model": {"messages": []}})]
    assert list(expand_fused_updates(chunks, plan, "updates")) == [{"model": {"messages": []}}]
    assert list(expand_fused_updates(chunks, plan, ["updates", "custom"])) == chunks


def _plain(update: Any) -> Any:
    if isinstance(update, dict):
        return {k: describe(v if isinstance(v, list) else [v]) if k == "messages" else v
                for k, v in update.items()}
    return update


# -- configuration -----------------------------------------------------------------------


def test_chain_fuse_false_in_the_operator_config_turns_fusion_off(tmp_path):
    from antler.chain.config import parse_config

    config = parse_config("chain: {fuse: false}\n", platform_registry())
    with antler_agent(tmp_path / "off", None, config=config) as agent:
        assert agent.fusion is None
        assert not any(n.startswith("fused_") for n in agent.graph.get_graph().nodes)
    with antler_agent(tmp_path / "on", None) as agent:
        assert agent.fusion is not None and agent.fusion.fused
        assert any(n.startswith("fused_") for n in agent.graph.get_graph().nodes)


def test_chain_fuse_into_model_false_keeps_model_call_hooks_in_fused_nodes(tmp_path):
    from antler.chain.config import parse_config

    config = parse_config("chain: {fuse_into_model: false}\n", platform_registry())
    with antler_agent(tmp_path / "nodes", None, config=config) as agent:
        assert agent.fusion is not None and not agent.fusion.absorbed
        assert "fused_2.before_model" in agent.graph.get_graph().nodes
    with antler_agent(tmp_path / "inside", None) as agent:
        assert agent.fusion is not None
        assert [n.kind for n in agent.fusion.absorbed] == [
            "before_agent", "before_model", "after_model"]
        assert not any(n.endswith((".before_agent", ".before_model"))
                       for n in agent.graph.get_graph().nodes)


# -- the built-in plugins: the real chains, fused and not --------------------------------


class RecordingQueue:
    """Stands in for the memory queue and records what would be extracted."""

    def __init__(self) -> None:
        self.submissions: list[Any] = []

    def add(self, **kwargs: Any) -> None:
        self.submissions.append((kwargs.get("thread_id"), describe(kwargs["messages"]),
                                 kwargs.get("title")))

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


def builtin_chain(name: str) -> tuple[Any, Any]:
    from antler.chain.config import OperatorConfig
    from antler.plugin_api.context import RuntimeOptions
    from antler.plugin_api.registry import discover
    from antler.runtime.demo import all_optional_config

    if name == "default":
        return OperatorConfig(), RuntimeOptions(subagents_enabled=True, user_id="u")
    config = all_optional_config(discover())
    return config, RuntimeOptions(subagents_enabled=True, plan_mode=True, supports_vision=True,
                                  user_id="u")


def deterministic_trace(hooks: list[tuple[str, str]]) -> list[Any]:
    """The trace with each tool phase as a sorted block.

    The demo's first turn runs `bash` and `task` in parallel, so the order in
    which their tool wrappers (and the subagent inside `task`) start depends on
    thread timing, fused or not; everything else is strictly ordered.
    """
    out: list[Any] = []
    phase: list[tuple[str, str]] = []
    for plugin, hook in hooks:
        if hook == "wrap_tool_call" or plugin.startswith("subagent:"):
            phase.append((plugin, hook))
            continue
        if phase:
            out.append(sorted(phase))
            phase = []
        out.append((plugin, hook))
    if phase:
        out.append(sorted(phase))
    return out


def play_demo(base: Any, chain: str, fused: bool, into_model: bool = True) -> dict[str, Any]:
    """The demo's two turns through the real chain; everything observable, normalized."""
    from antler.plugin_api.context import MEMORY_MODEL, MEMORY_QUEUE, TITLE_MODEL
    from antler.plugin_api.uploads import stage_upload
    from antler.runtime.agent import create_agent
    from antler.runtime.demo import LEAD_SCRIPT, MEMORY_SCRIPT, SUBAGENT_SCRIPT, TITLE_SCRIPT
    from antler.runtime.tracing import Tracer

    config, runtime = builtin_chain(chain)
    queue = RecordingQueue()
    lead = ScriptedChatModel(LEAD_SCRIPT)
    sub = ScriptedChatModel(SUBAGENT_SCRIPT)
    services = {TITLE_MODEL: ScriptedChatModel(TITLE_SCRIPT),
                MEMORY_MODEL: ScriptedChatModel(MEMORY_SCRIPT), MEMORY_QUEUE: queue}
    tracer = Tracer()
    with counted_ids(), create_agent(config, model=lead, subagent_model=sub, runtime=runtime,
                                     services=services, base_dir=base, checkpointer="memory",
                                     tracer=tracer, fuse=fused,
                                     fuse_into_model=into_model) as agent:
        assert (agent.fusion is not None and bool(agent.fusion.fused)) is fused
        paths = agent.services.get("paths").thread("u", "t")
        files = []
        scratch = base / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        for name, text in (("sales.csv", "month,revenue\n2026-01,1200\n"),
                           ("notes.md", "# Notes\nMarch dipped.\n")):
            source = scratch / name
            source.write_text(text, encoding="utf-8")
            files.append(stage_upload(paths, source))
        agent.graph.update_state(agent.run_config("t"), {"messages": [
            HumanMessage(content="List the files you can see.", id="earlier-question"),
            AIMessage(content="", id="earlier-call", tool_calls=[
                {"name": "ls", "args": {"path": "/mnt/user-data"}, "id": "call_interrupted"}]),
        ]})
        streamed = [list(chunk) for chunk in agent.stream(
            "Analyse the uploaded files, please.", thread_id="t", user_id="u", files=files,
            run_id="run-1")]
        agent.invoke("Now draft a revenue forecast.", thread_id="t", user_id="u", run_id="run-2")
        state = agent.state("t")
    where = str(base)
    parts = {
        # (The message-write journal lists writes, which a fused node makes differently.)
        "state": repr({k: describe(v) if k == "messages" else v for k, v in state.items()
                       if k != WRITES_KEY}),
        "requests": repr([describe(r.messages) for r in lead.requests]),
        "subagent": repr([describe(r.messages) for r in sub.requests]),
        "memory": repr(queue.submissions),
        "trace": repr(deterministic_trace(tracer.hooks())),
        "streamed_nodes": repr(streamed),
    }
    # Ids LangChain and LangGraph generate (random in any two runs) are named by
    # first appearance, so the same message keeps the same name everywhere.
    names: dict[str, str] = {}

    def name(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"<id{len(names)}>")

    return {key: LEDGER_TOKEN.sub(r"'\1': <token>", WALL_CLOCK.sub(
                "'created_at': <time>", GENERATED_ID.sub(name, text.replace(where, "<base>"))))
            for key, text in parts.items()}


GENERATED_ID = re.compile(r"lc_run--[0-9a-f-]+|auto-\d+")
WALL_CLOCK = re.compile(r"'created_at': '[^']*'")
"""When durable_context recorded a delegation: the wall clock, which differs by the second."""
LEDGER_TOKEN = re.compile(r"'(base|token)': '[0-9a-f]{32}'")
"""input_sanitization's ledger marks (random per write)."""


def agreeing_demo(tmp_path: Any, chain: str, label: str, **compile: Any) -> dict[str, Any]:
    """`play_demo`, played a second time when it disagrees with the unfused run.

    The demo's bash and task calls run in parallel threads, and the counter that
    stands in for generated message ids numbers them in the order the threads
    reach it; a rare interleaving renumbers them. A real difference repeats.
    """
    unfused = play_demo(tmp_path / f"{label}-unfused", chain, fused=False)
    played = play_demo(tmp_path / label, chain, **compile)
    if played != unfused:
        unfused = play_demo(tmp_path / f"{label}-unfused-again", chain, fused=False)
        played = play_demo(tmp_path / f"{label}-again", chain, **compile)
    assert played == unfused
    return played


@pytest.mark.parametrize("chain", ["default", "all-optional"])
def test_the_builtin_chains_agree_fused_or_not(tmp_path, chain):
    agreeing_demo(tmp_path, chain, "nodes", fused=True, into_model=False)
    fused = agreeing_demo(tmp_path, chain, "fused", fused=True)
    assert "Sales data analysis" in fused["state"]  # the title plugin ran
    assert fused["memory"] != "[]"  # so did memory


def test_a_jump_to_an_undeclared_destination_fails_in_both_graphs():
    class Confused(Synth):
        @hook_config(can_jump_to=["end"])
        def after_model(self, state: Any, runtime: Any) -> Any:
            return {"jump_to": "tools"}  # declared "end" only

    def run_with(fused: bool) -> str | None:
        mws: list[Any] = [make_middleware(spec("a", after_model=[("log",)])),
                          Confused("x", {}), make_middleware(spec("c", after_model=[("log",)]))]
        if fused:
            mws = fuse(mws)
        graph = langchain_create_agent(model=ScriptedChatModel(script(0)), middleware=mws,
                                       state_schema=SynthState, checkpointer=InMemorySaver())
        try:
            graph.invoke({"messages": [HumanMessage("hi", id="u")]},
                         {"configurable": {"thread_id": "t"}})
        except Exception as exc:  # which error differs; that both fail does not
            return type(exc).__name__
        return None

    assert run_with(False) is not None
    assert run_with(True) == "InvalidUpdateError"


@pytest.mark.parametrize("chain", ["default", "all-optional"])
def test_the_declared_plan_matches_the_compiled_one_for_the_builtin_chains(tmp_path, chain):
    from antler.compiler import plan_for_specs
    from antler.runtime.agent import create_agent

    config, runtime = builtin_chain(chain)
    with create_agent(config, model=ScriptedChatModel([]), runtime=runtime, base_dir=tmp_path,
                      checkpointer=None, fuse=True) as agent:
        compiled = agent.fusion
        declared = plan_for_specs((entry.spec for entry in agent.chain.entries),
                                  into_model=True)
    assert compiled is not None and compiled.fused and compiled.absorbed
    assert [(n.kind, n.node, n.members) for n in declared.nodes] == [
        (n.kind, n.node, n.members) for n in compiled.nodes]
    assert compiled.wraps and declared.wraps == compiled.wraps  # the wrap layers too
