"""A fused node's view of the state takes each member's writes as LangGraph's channels would.

`antler.compiler.steps.Run` applies a member's writes to its view without
LangGraph's channels where it can (a lone value of a plain key, a reducer's
operator, messages merged by id) and through a channel otherwise. Hypothesis
draws sequences of member results (None, dicts, `Command`s whose update lists a
key twice, lists of `Command`s) writing messages with and without ids, as
dicts and as removals, reducer lists, `Overwrite`s, plain and ephemeral keys.
Checked against LangGraph's own channels: the view after each member equals
the state its own node would have seen next (one superstep per member), an
update LangGraph refuses is refused the same way, and the node's writes
(`Run.finish`) applied in one superstep make the state the members left.
"""

from __future__ import annotations

import copy
import operator
from typing import Annotated, Any, NotRequired

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents.middleware import AgentState
from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.errors import InvalidUpdateError
from langgraph.types import Command, Overwrite

from antler.compiler.steps import Run, Step, StepRunner, state_channels


class ViewState(AgentState):
    log: NotRequired[Annotated[list[str], operator.add]]
    last: NotRequired[str]


CHANNELS, _ = state_channels([], ViewState)
START: dict[str, Any] = {
    "messages": [HumanMessage("hello", id="m-0"), HumanMessage("again", id="m-1")],
    "log": ["start"],
}


def _message(draw: Any, n: int) -> Any:
    kind = draw(st.sampled_from(["id", "id", "replace", "noid", "dict", "remove"]))
    if kind == "id":
        return HumanMessage(f"new {n}", id=f"m-new-{n}")
    if kind == "replace":
        return HumanMessage(f"edited {n}", id=draw(st.sampled_from(["m-0", "m-1"])))
    if kind == "noid":
        return HumanMessage(f"anonymous {n}")
    if kind == "dict":
        return {"role": "user", "content": f"as a dict {n}"}
    return RemoveMessage(id=draw(st.sampled_from(["m-0", "m-1", "m-new-0"])))


@st.composite
def writes(draw: Any, n: int) -> list[tuple[str, Any]]:
    """A member's writes, in order (a key may come twice)."""
    pairs: list[tuple[str, Any]] = []
    for i in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(["messages", "messages", "log", "last", "jump_to",
                                    "unknown"]))
        stamp = f"{n}.{i}"
        if key == "messages":
            batch = [_message(draw, 10 * n + i) for _ in range(draw(st.integers(1, 2)))]
            value: Any = (Overwrite(batch) if draw(st.integers(0, 6)) == 0
                          else batch[0] if len(batch) == 1 and draw(st.booleans()) else batch)
        elif key == "log":
            value = Overwrite([f"reset {stamp}"]) if draw(st.integers(0, 4)) == 0 \
                else [f"log {stamp}"]
        elif key == "jump_to":
            value = f"nowhere {stamp}"  # not a destination: the group goes on
        else:
            value = f"value {stamp}"
        pairs.append((key, value))
    return pairs


@st.composite
def results(draw: Any) -> list[Any]:
    """What each member of a fused node returns."""
    out: list[Any] = []
    for n in range(draw(st.integers(1, 5))):
        shape = draw(st.sampled_from(["none", "dict", "dict", "command", "commands"]))
        if shape == "none":
            out.append(None)
            continue
        pairs = draw(writes(n))
        if shape == "dict":
            out.append(dict(pairs))
        elif shape == "command":
            out.append(Command(update=pairs))
        else:
            out.append([Command(update=[pair]) for pair in pairs])
    return out


def _pairs(result: Any) -> list[tuple[str, Any]]:
    if result is None:
        return []
    if isinstance(result, dict):
        return list(result.items())
    if isinstance(result, Command):
        update = result.update
        return list(update.items() if isinstance(update, dict) else update)
    return [pair for command in result for pair in _pairs(command)]


def _superstep(state: dict[str, Any], pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`state` after one superstep writing `pairs`, through LangGraph's channels."""
    state = dict(state)
    grouped: dict[str, list[Any]] = {}
    for key, value in pairs:
        if key in CHANNELS:
            grouped.setdefault(key, []).append(value)
    for key, channel in CHANNELS.items():
        values = grouped.get(key, [])
        if not values and channel.kind != "ephemeral":
            continue
        live = channel.template.from_checkpoint(state[key]) if key in state \
            else channel.template.copy()
        live.update(values)
        if live.is_available():
            state[key] = live.get()
        else:
            state.pop(key, None)
    return state


def _shown(state: dict[str, Any]) -> dict[str, Any]:
    """`state` with messages as (type, content, id); ids the reducer made up read '<new>'."""
    shown = dict(state)
    if "messages" in shown:  # an Overwrite's value is kept as written: dicts stay dicts
        shown["messages"] = [
            m if isinstance(m, dict) else
            (m.type, m.content, m.id if str(m.id).startswith("m-") else "<new>")
            for m in shown["messages"]]
    return shown


def _node() -> StepRunner:
    return StepRunner(CHANNELS, "token", node="fused", loop_exit=False, can_jump=())


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(members=results())
def test_the_view_takes_each_write_as_the_channels_do(members: list[Any]) -> None:
    run = Run(_node(), START)
    expected = dict(START)
    for n, result in enumerate(members):
        step = Step(f"p{n}", f"p{n}.before_model", None, ())
        try:
            # A copy: add_messages gives an id-less message its id in place.
            expected = _superstep(expected, _pairs(copy.deepcopy(result)))
        except (InvalidUpdateError, ValueError) as refused:
            # Two values for a plain key, two Overwrites, removing a missing id.
            with pytest.raises(type(refused)):
                run.absorb(step, result, 0.0)
            return
        run.absorb(step, result, 0.0)
        assert _shown(run.view) == _shown(expected), f"after member {n}"

    written = run.finish(None, None)
    # The node's writes, applied in one superstep, make the state the members left.
    assert _shown(_superstep(START, _pairs(written))) == _shown(run.view)


def test_a_key_written_twice_in_one_update_with_an_overwrite_keeps_the_overwrite() -> None:
    # BinaryOperatorAggregate ignores the plain values after an Overwrite in one update.
    run = Run(_node(), START)
    run.absorb(Step("p", "p.before_model", None, ()),
               Command(update=[("log", Overwrite(["reset"])), ("log", ["after"])]), 0.0)
    assert run.view["log"] == ["reset"]
    assert run.finish(None, None) == {"log": Overwrite(["reset"])}


def test_a_reducer_key_written_by_two_members_is_written_twice_in_order() -> None:
    run = Run(_node(), START)
    step = Step("p", "p.before_model", None, ())
    run.absorb(step, {"log": ["one"], "last": "a"}, 0.0)
    run.absorb(step, {"log": ["two"], "last": "b"}, 0.0)
    assert run.view["log"] == ["start", "one", "two"]
    assert run.finish(None, None) == [Command(update={"log": ["one"], "last": "b"}),
                                      Command(update={"log": ["two"]})]
