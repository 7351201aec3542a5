"""Wrap layers: a run of `wrap_model_call` / `wrap_tool_call` hooks in one layer behaves as
LangChain's one layer per middleware.

Each chain is built twice, once as LangChain wires it and once compiled, and the two
runs are compared: final state, the model's requests, tool executions, and the order in
which every wrapper saw each call and its result. The wrappers edit requests, retry their
handler (also when the retry fails inside and the first answer stands), short-circuit,
and return `ExtendedModelResponse` commands.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, NotRequired

import pytest
from langchain.agents import create_agent as langchain_create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain.tools import tool
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from antler.compiler import FusedWraps, compile_fusion, create_fused_agent, plan_from_hooks
from antler.runtime.models import ScriptedChatModel


class WrapState(AgentState):
    log: NotRequired[Annotated[list[str], operator.add]]


class Wrapper(AgentMiddleware):
    """A wrapper that leaves traces of what it saw; `mode` picks its behaviour."""

    state_schema = WrapState

    def __init__(self, name: str, seen: list[str], mode: str = "tag") -> None:
        super().__init__()
        self._name = name
        self.seen = seen
        self.mode = mode

    @property
    def name(self) -> str:
        return self._name

    def _request(self, request: Any) -> Any:
        note = SystemMessage(content=f"{self._name} was here")
        return request.override(messages=[*request.messages, note])

    def _model_result(self, response: Any) -> Any:
        self.seen.append(f"{self._name} got {response.result[0].content!r}")
        if self.mode == "command":
            return ExtendedModelResponse(model_response=response,
                                         command=Command(update={"log": [self._name]}))
        return response

    def _flaky(self) -> None:
        """`flaky`: every second model call fails (before its handler runs)."""
        self.calls = getattr(self, "calls", 0) + 1
        if self.mode == "flaky" and self.calls % 2 == 0:
            self.seen.append(f"{self._name} fails")
            raise RuntimeError(f"{self._name} failed")

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(f"{self._name} model {len(request.messages)}")
        self._flaky()
        if self.mode == "short":
            return AIMessage(content=f"{self._name} answered", id=f"short-{len(self.seen)}")
        response = handler(self._request(request))
        if self.mode == "retry":
            response = handler(self._request(request))
        if self.mode == "recover":  # a second try that fails: the first answer stands
            try:
                handler(self._request(request))
            except RuntimeError:
                self.seen.append(f"{self._name} kept its first answer")
        return self._model_result(response)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(f"{self._name} model {len(request.messages)}")
        self._flaky()
        if self.mode == "short":
            return AIMessage(content=f"{self._name} answered", id=f"short-{len(self.seen)}")
        response = await handler(self._request(request))
        if self.mode == "retry":
            response = await handler(self._request(request))
        if self.mode == "recover":
            try:
                await handler(self._request(request))
            except RuntimeError:
                self.seen.append(f"{self._name} kept its first answer")
        return self._model_result(response)

    def _tool_result(self, result: Any) -> Any:
        self.seen.append(f"{self._name} tool result {getattr(result, 'content', result)!r}")
        if isinstance(result, ToolMessage):
            return result.model_copy(update={"content": f"{result.content} <{self._name}>"})
        return result

    def _refused(self, request: Any) -> Any:
        return ToolMessage(content=f"{self._name} refused", name=request.tool_call["name"],
                           tool_call_id=request.tool_call["id"], status="error")

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(f"{self._name} tool {request.tool_call['args']}")
        if self.mode == "short":
            return self._refused(request)
        result = handler(request)
        if self.mode == "retry":
            result = handler(request)
        return self._tool_result(result)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(f"{self._name} tool {request.tool_call['args']}")
        if self.mode == "short":
            return self._refused(request)
        result = await handler(request)
        if self.mode == "retry":
            result = await handler(request)
        return self._tool_result(result)


class Quiet(AgentMiddleware):
    """Has no wrap hooks: it sits between wrappers in the list but not in their chains."""

    def before_model(self, state: Any, runtime: Any) -> None:
        return None


CHAINS = {
    "tagging": ["tag", "tag", "tag"],
    "retrying": ["tag", "retry", "tag", "command"],
    "commands": ["command", "tag", "command"],
    "short circuit": ["tag", "short", "tag"],
    # The commands of a try that failed inside are dropped (LangChain clears them when the
    # handler is called again), while the answer of the try before stands.
    "failed retry": ["recover", "command", "flaky"],
}


def run_chain(modes: list[str], *, compiled: bool, use_async: bool) -> dict[str, Any]:
    seen: list[str] = []
    executed: list[str] = []

    @tool
    def echo(text: str) -> str:
        """Echo the text back."""
        executed.append(text)
        return f"echo {text}"

    middlewares: list[Any] = []
    for index, mode in enumerate(modes):
        middlewares.append(Wrapper(f"w{index}", seen, mode))
        middlewares.append(type(f"Quiet{index}", (Quiet,), {})())
    model = ScriptedChatModel([
        AIMessage(content="", id="call", tool_calls=[
            {"name": "echo", "args": {"text": "one"}, "id": "c1"}]),
        AIMessage(content="done", id="final"),
        AIMessage(content="spare", id="spare"),
    ])
    kwargs: dict[str, Any] = {"model": model, "tools": [echo], "state_schema": WrapState,
                              "checkpointer": InMemorySaver()}
    if compiled:
        graph, plan = create_fused_agent(middlewares, **kwargs)
        assert [layer.members for layer in plan.wraps] == [
            tuple(f"w{i}" for i in range(len(modes)))] * 2
        assert sum(isinstance(m, FusedWraps) for m in graph.nodes) == 0  # layers are not nodes
    else:
        graph = langchain_create_agent(middleware=middlewares, **kwargs)
    config = {"configurable": {"thread_id": "t"}}
    inputs = {"messages": [HumanMessage(content="hi", id="u1")]}
    if use_async:
        asyncio.run(graph.ainvoke(inputs, config))
    else:
        graph.invoke(inputs, config)
    state = graph.get_state(config).values
    return {
        "messages": [(m.type, m.id if m.type != "tool" else m.tool_call_id, m.content)
                     for m in state["messages"]],
        "log": state.get("log"),
        "requests": [[(m.type, m.content) for m in r.messages] for r in model.requests],
        "executed": executed,
        "seen": seen,
    }


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("modes", list(CHAINS.values()), ids=list(CHAINS))
def test_one_wrap_layer_behaves_as_langchains_nested_layers(modes, use_async):
    langchain = run_chain(modes, compiled=False, use_async=use_async)
    compiled = run_chain(modes, compiled=True, use_async=use_async)
    assert compiled == langchain
    assert langchain["seen"]  # every wrapper did see the calls


def test_the_layer_runs_its_members_outermost_first():
    result = run_chain(["tag", "tag"], compiled=True, use_async=False)
    assert result["seen"][:2] == ["w0 model 1", "w1 model 2"]  # w1 sees what w0 added
    assert result["requests"][0][-2:] == [("system", "w0 was here"), ("system", "w1 was here")]


def test_commands_from_members_reach_the_state():
    result = run_chain(["command", "tag", "command"], compiled=True, use_async=False)
    assert result["log"] == ["w2", "w0", "w2", "w0"]  # inner first, once per model call


def test_a_member_that_short_circuits_keeps_inner_members_out():
    result = run_chain(["tag", "short", "tag"], compiled=True, use_async=False)
    assert not any(line.startswith("w2") for line in result["seen"])
    assert result["executed"] == []


def test_wrap_layers_split_at_trace_policy_and_fusable_false():
    plan = plan_from_hooks([
        ("a", ["wrap_model_call"], True), ("b", ["wrap_model_call", "wrap_tool_call"], True),
        ("c", ["wrap_model_call"], False), ("d", ["wrap_model_call"], True),
        ("e", ["wrap_model_call", "wrap_tool_call"], True), ("f", ["wrap_tool_call"], True),
    ])
    assert [(w.kind, w.members) for w in plan.wraps] == [
        ("wrap_model_call", ("a", "b")), ("wrap_model_call", ("d", "e")),
        ("wrap_tool_call", ("b", "e", "f"))]

    seen: list[str] = []
    first, second, third = (Wrapper(n, seen) for n in ("p", "q", "r"))
    second.trace_policy = object()  # type: ignore[attr-defined]
    compiled = compile_fusion([first, second, third])
    assert compiled.plan.wraps == []  # each run of equal policies has one member


def test_traced_members_keep_their_own_spans(monkeypatch):
    """Under LangSmith tracing each member still runs in a span named as LangChain names it."""
    from langsmith import run_helpers
    from langsmith.run_trees import RunTree

    monkeypatch.setattr(RunTree, "post", lambda self, *a, **k: None)
    monkeypatch.setattr(RunTree, "patch", lambda self, *a, **k: None)
    monkeypatch.setattr(RunTree, "end", lambda self, *a, **k: None)
    spans: list[str] = []

    class Spanned(Wrapper):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            run = run_helpers.get_current_run_tree()
            spans.append(run.name if run is not None else "-")
            return handler(request)

    model = ScriptedChatModel([AIMessage(content="done", id="one"),
                               AIMessage(content="done", id="two")])
    middlewares = [Spanned("s0", []), Spanned("s1", [])]
    graph, plan = create_fused_agent(middlewares, model=model, tools=[])
    assert plan.wraps
    graph.invoke({"messages": [HumanMessage(content="hi")]})
    assert spans == ["-", "-"]  # untraced: no span, and no traceable bookkeeping
    with run_helpers.tracing_context(enabled=True, client=_NoClient()):
        graph.invoke({"messages": [HumanMessage(content="hi again")]})
    assert spans[2:] == ["s0.wrap_model_call", "s1.wrap_model_call"]


class _NoClient:
    """A LangSmith client that sends nothing anywhere."""

    tracing_queue = None

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def counted_traced_setups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions LangSmith sets a traced run up for (`_setup_run`), in
    order; no run tree is sent anywhere."""
    from langsmith import run_helpers
    from langsmith.run_trees import RunTree

    for method in ("post", "patch", "end"):
        monkeypatch.setattr(RunTree, method, lambda self, *a, **k: None)
    setups: list[str] = []
    real_setup = run_helpers._setup_run

    def counted_setup(func: Any, *args: Any, **kwargs: Any) -> Any:
        setups.append(getattr(func, "__name__", ""))
        return real_setup(func, *args, **kwargs)

    monkeypatch.setattr(run_helpers, "_setup_run", counted_setup)
    return setups


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_call_nothing_could_trace_skips_traceable(monkeypatch, use_async):
    """The fused layers (model and tool calls) run without LangSmith's `traceable` when
    nothing could trace the call; a callback handler listening, or tracing enabled, still
    gets the traced layer."""
    from langchain_core.callbacks import BaseCallbackHandler
    from langsmith import run_helpers

    setups = counted_traced_setups(monkeypatch)
    seen: list[str] = []

    @tool
    def echo(text: str) -> str:
        """Echo the text back."""
        return f"echo {text}"

    model = ScriptedChatModel([
        AIMessage(content="", id=f"call{i}", tool_calls=[
            {"name": "echo", "args": {"text": str(i)}, "id": f"c{i}"}]) if i % 2 == 0
        else AIMessage(content="done", id=f"final{i}") for i in range(6)])
    graph, plan = create_fused_agent([Wrapper("w0", seen), Wrapper("w1", seen)], model=model,
                                     tools=[echo], state_schema=WrapState)
    assert [layer.kind for layer in plan.wraps] == ["wrap_model_call", "wrap_tool_call"]

    def run(text: str, config: dict[str, Any] | None = None) -> None:
        inputs = {"messages": [HumanMessage(content=text)]}
        if use_async:
            asyncio.run(graph.ainvoke(inputs, config))
        else:
            graph.invoke(inputs, config)

    run("quiet")
    assert setups == []  # two model calls and a tool call, none under traceable
    assert seen.count("w1 model 2") == 1 and "w1 tool {'text': '0'}" in seen
    run("listened", {"callbacks": [BaseCallbackHandler()]})
    assert sorted(set(setups)) == ["wrap_model_call", "wrap_tool_call"] if not use_async \
        else sorted(set(setups)) == ["awrap_model_call", "awrap_tool_call"]
    setups.clear()
    with run_helpers.tracing_context(enabled=True, client=_NoClient()):
        run("traced")
    assert len(setups) >= 3 * 3  # the layer and its two members, per call
