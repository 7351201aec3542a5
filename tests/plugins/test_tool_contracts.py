"""The contract extensions the tool-result pipeline added: `result_meta` (metadata for a result
that carries none) and `tooloutput` (where saved results live, the marker on a budgeted one)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import ToolMessage

from antler.contracts.toolmeta import (
    _PARTIAL_MARKERS,
    ToolMeta,
    classify_error_text,
    is_error_payload,
    result_meta,
)
from antler.contracts.tooloutput import (
    TOOL_OUTPUT_KEY,
    TOOL_RESULTS_DIRNAME,
    budgeted_output,
    is_tool_result_path,
)


@pytest.mark.parametrize(("text", "errored", "expected"), [
    ("fine", False, ("success", None)),
    ("fine", True, ("error", "unknown")),
    ("Error: connection reset by peer", False, ("error", "transient")),
    ("error - 403 forbidden", False, ("error", "auth")),
    ('{"error": "none"}', False, ("success", None)),
    ('{"error": {"code": 404}}', False, ("error", "not_found")),
    ("0 results for your query", False, ("partial_success", "no_results")),
    ("x" * 10_000 + "[file truncated: showing the first 10 of 20 characters]", False,
     ("partial_success", None)),
    ("the word error in a sentence: harmless", False, ("success", None)),
])
def test_result_meta_judges_a_result_from_its_status_and_text(text, errored, expected):
    meta = result_meta(text, errored=errored, source="probe")
    assert (meta.status, meta.error_type) == expected
    assert meta.source == "probe"


@pytest.mark.parametrize(("path", "inside"), [
    (f"/mnt/user-data/outputs/{TOOL_RESULTS_DIRNAME}/bash-0123456789ab.log", True),
    (f"/mnt/user-data/outputs/{TOOL_RESULTS_DIRNAME}/", True),
    (f"C:\\data\\outputs\\{TOOL_RESULTS_DIRNAME}\\x.txt", True),
    ("/mnt/user-data/outputs/report.md", False),
    ("/mnt/user-data/outputs/.tool-results-notes.md", False),
])
def test_saved_result_paths_are_recognised_whatever_the_separator(path, inside):
    assert is_tool_result_path(path) is inside


def test_budgeted_output_reads_the_marker_and_ignores_anything_else():
    record = {"path": "/x", "chars": 5, "kind": "text", "externalized": True}
    marked = ToolMessage("synopsis", tool_call_id="c", additional_kwargs={TOOL_OUTPUT_KEY: record})
    assert budgeted_output(marked) == record
    assert budgeted_output(ToolMessage("plain", tool_call_id="c")) is None
    broken = ToolMessage("odd", tool_call_id="c", additional_kwargs={TOOL_OUTPUT_KEY: "yes"})
    assert budgeted_output(broken) is None


# -- the shortcuts `result_meta` and `ToolMeta.as_dict` take give what the model gives ------

def _reference_result_meta(text: str, errored: bool, source: str) -> ToolMeta:
    """`result_meta` as a fresh model on every call, searching head and tail always."""
    if errored or is_error_payload(text):
        error_type, recoverable, action = classify_error_text(text)
        return ToolMeta(status="error", error_type=error_type, recoverable_by_model=recoverable,
                        recommended_next_action=action, source=source)
    for pattern, partial_type, next_action in _PARTIAL_MARKERS:
        if pattern.search(text[:4096]) or pattern.search(text[-512:]):
            return ToolMeta(status="partial_success", error_type=partial_type,
                            recommended_next_action=next_action, source=source)
    return ToolMeta(status="success", source=source)


_WORDS = st.sampled_from(["no results", "No Search Results", "nothing found", "0 results",
                          "[output truncated", "truncated]", "Error: ", "timeout", "404",
                          '{"error": "rate limit"}', "fine", " ", "\n", "x", "sno results"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(_WORDS, st.text(max_size=40)), max_size=8),
       pad=st.integers(0, 5000), errored=st.booleans(),
       source=st.sampled_from(["tool", "probe", "mcp"]))
def test_result_meta_matches_a_freshly_built_stamp(parts, pad, errored, source):
    text = "".join(parts[:4]) + "y" * pad + "".join(parts[4:])
    meta = result_meta(text, errored=errored, source=source)
    expected = _reference_result_meta(text, errored, source)
    assert meta == expected
    assert meta.as_dict() == expected.model_dump(exclude_none=False)
    assert list(meta.as_dict()) == list(expected.model_dump(exclude_none=False))


def test_as_dict_is_a_fresh_dict_with_extras_kept():
    plain = result_meta("fine")
    first = plain.as_dict()
    first["status"] = "error"
    assert plain.as_dict()["status"] == "success"
    extra = ToolMeta(status="error", error_type="blocked", source="gate", rule="r", allowed=["a"])
    assert extra.as_dict() == {"status": "error", "error_type": "blocked",
                               "recoverable_by_model": True,
                               "recommended_next_action": "continue", "source": "gate",
                               "rule": "r", "allowed": ["a"]}


@pytest.mark.parametrize("length", [100, 600, 3000, 9000])
def test_result_meta_reads_the_tail_on_its_own(length):
    # The tail is searched as its own text: a marker whose word starts before the tail
    # starts (here "sno results") reads as "no results" there.
    text = "x" * length + "s" + "no results" + " y" * 251
    assert result_meta(text) == _reference_result_meta(text, False, "tool")
    assert result_meta(text).status == "partial_success"
