"""`antler.plugins._lib.jsontext`: the JSON list or object a text holds, or None."""

from __future__ import annotations

import pytest

from antler.parselimits import MAX_DEPTH
from antler.plugins._lib.jsontext import json_container


@pytest.mark.parametrize(("text", "expected"), [
    ('  ["a", "b"]\n', ["a", "b"]),
    ('{"k": 1}', {"k": 1}),
    ("[]", []),
])
def test_a_list_or_object_is_decoded(text, expected):
    assert json_container(text) == expected


@pytest.mark.parametrize("text", [
    "", "   ", "[draft] plan", "{not json}", '"[1, 2]"', "42", "true", "[1, 2",
])
def test_anything_else_is_none(text):
    assert json_container(text) is None


def test_nesting_past_the_parse_limit_is_none_not_a_recursion_error():
    assert json_container("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)) is None
    assert json_container("[" * 200_000) is None
