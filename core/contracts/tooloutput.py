"""Tool-result files: where oversized tool output is kept, and how a result points at it.

A result too large for the model's context is written in full to a file in
the thread's outputs, under `TOOL_RESULTS_DIRNAME`, and the message keeps a
synopsis. Those files are process feedback, not deliverables: anything that
lists the thread's outputs as the agent's work (artifact listings, the ``ls``
tool) skips that folder (`is_tool_result_path`).

The message that stands for such a file carries
``additional_kwargs["antler_tool_output"] = {"path", "chars", "kind",
"externalized"}`` (``externalized`` false when the file could not be written
and the text was cut instead), so a later layer knows the content is already a
synopsis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TOOL_RESULTS_DIRNAME = ".tool-results"
"""The folder of oversized tool results inside the thread's outputs."""

OUTPUT_BUDGET_SERVICE = "tool_output_budget"
"""Build service a tool-output budget registers itself under.

While it is present, a tool may hand back more than its own output cap (a
sandbox command's whole captured output): the budget saves what is too long
for the model and shows a synopsis. Without it, tools keep their own caps.
"""

TOOL_OUTPUT_KEY = "antler_tool_output"
"""`ToolMessage.additional_kwargs` key of a budgeted result (see the module docstring)."""


def is_tool_result_path(path: str, dirname: str = TOOL_RESULTS_DIRNAME) -> bool:
    """Whether a path (virtual or host, any separator) is in or is a tool-results folder."""
    parts = path.replace("\\", "/").split("/")
    return dirname in parts


def budgeted_output(message: Any) -> dict[str, Any] | None:
    """The record of a budgeted result, or None for a message the budget left alone."""
    kwargs = getattr(message, "additional_kwargs", None)
    record = kwargs.get(TOOL_OUTPUT_KEY) if isinstance(kwargs, Mapping) else None
    return dict(record) if isinstance(record, Mapping) else None
