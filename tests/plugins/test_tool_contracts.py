"""The contract extensions the tool-result pipeline added: `result_meta` (metadata for a result
that carries none) and `tooloutput` (where saved results live, the marker on a budgeted one)."""

from __future__ import annotations

import pytest
from langchain_core.messages import ToolMessage

from antler.contracts.toolmeta import result_meta
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
