"""`requestcopy.overridden`: the request `ModelRequest.override(...)` gives, made cheaper."""

from __future__ import annotations

import dataclasses
from typing import Any

from langchain.agents.middleware.types import ModelRequest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from antler.plugins._lib.requestcopy import overridden


def _request(**extra: Any) -> ModelRequest[Any]:
    return ModelRequest(model=object(), messages=[HumanMessage("hi", id="1")],
                        system_message=SystemMessage("be brief"), tool_choice="auto",
                        tools=[{"name": "t"}], response_format=None,
                        state={"messages": [], "title": "x"}, runtime=object(),
                        model_settings={"temperature": 0}, **extra)


def test_the_copy_equals_what_override_gives_attribute_by_attribute():
    request = _request()
    messages = [AIMessage("a", id="2"), HumanMessage("b", id="3")]
    fast, slow = overridden(request, messages=messages), request.override(messages=messages)
    assert type(fast) is type(slow) is ModelRequest
    # Every attribute, not only the dataclass fields: one set in the constructor
    # alone would be missed by a field-wise comparison.
    assert vars(fast).keys() == vars(slow).keys()
    for name, value in vars(slow).items():
        assert getattr(fast, name) is value, name
    assert {f.name for f in dataclasses.fields(ModelRequest)} <= vars(fast).keys()


def test_the_original_request_is_untouched():
    request = _request()
    before = dict(vars(request))
    fast = overridden(request, messages=[AIMessage("a", id="2")])
    assert vars(request) == before and request.messages[0].id == "1"
    assert [m.id for m in fast.messages] == ["2"]
    assert fast.system_prompt == "be brief"


def test_a_subclass_goes_through_override():
    class Tagged(ModelRequest):
        def override(self, **overrides: Any) -> ModelRequest[Any]:
            copy = super().override(**overrides)
            object.__setattr__(copy, "tag", "overridden")
            return copy

    request = Tagged(model=object(), messages=[])
    copy = overridden(request, messages=[HumanMessage("x", id="1")])
    assert type(copy) is Tagged and copy.tag == "overridden"  # type: ignore[attr-defined]


def test_a_request_subclass_or_an_unknown_field_goes_through_override() -> None:
    class Custom(ModelRequest):  # type: ignore[type-arg]
        pass

    request = Custom(model=None, messages=[], tools=[], runtime=None)
    copy = overridden(request, messages=[HumanMessage("x")])
    assert type(copy) is Custom and copy.messages == [HumanMessage("x")]
    try:
        overridden(ModelRequest(model=None, messages=[]), nonsense=1)
    except TypeError as exc:
        assert "nonsense" in str(exc)
    else:
        raise AssertionError("an unknown field must be refused as override refuses it")
