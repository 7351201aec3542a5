"""The built-in plugin tools' declared argument schemas (sandbox tools, view_image).

Each tool declares its arguments as a pydantic model of plain types instead of
``Annotated`` function hints, which LangChain rebuilt on every call. What the
model is shown must not change by a byte: `fixtures/builtin_tool_schemas.json`
holds, per tool, the OpenAI tool schema and the validation errors of a bad call
as the function-hint definitions produced them (generated from those
definitions before they were replaced).
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
from langchain.tools import ToolRuntime
from langchain_core.tools.base import get_all_basemodel_annotations
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ValidationError

from antler.contracts.runcontext import RunContext
from antler.plugin_api import PathLayout
from antler.plugins.sandbox.config import SandboxConfig
from antler.plugins.sandbox.tools import build_tools
from antler.plugins.view_image.tool import make_tool as make_view_image
from antler.runtime.sandbox.local import LocalSandboxProvider

EXPECTED = json.loads((Path(__file__).parent.parent / "fixtures" /
                       "builtin_tool_schemas.json").read_text(encoding="utf-8"))

BAD_CALLS: dict[str, dict[str, Any]] = {
    "bash": {}, "ls": {"path": 3},
    "read_file": {"path": "a", "start_line": "x", "end_line": 2.5},
    "write_file": {"path": "a", "append": "maybe"},
    "str_replace": {"path": "a", "old": 1, "new": []},
    "glob": {"pattern": "*", "max_results": None},
    "grep": {"pattern": "x", "path": "/mnt/user-data", "max_results": "many", "literal": 3},
    "view_image": {"image_path": ["x"]},
}

GOOD_CALLS: dict[str, dict[str, Any]] = {
    "bash": {"command": "true"}, "ls": {}, "read_file": {"path": "a", "end_line": 3},
    "write_file": {"path": "a", "content": "x"},
    "str_replace": {"path": "a", "old": "x", "new": "y"},
    "glob": {"pattern": "*", "path": "/mnt/user-data"},
    "grep": {"pattern": "x", "path": "/mnt/user-data", "glob": "*.py"},
    "view_image": {"image_path": "/mnt/user-data/uploads/a.png"},
}


def _tools(tmp_path: Path) -> dict[str, Any]:
    tools = [*build_tools(LocalSandboxProvider(), PathLayout(tmp_path), SandboxConfig()),
             make_view_image()]
    return {tool.name: tool for tool in tools}


def _runtime() -> ToolRuntime:
    return ToolRuntime(state={"messages": []}, context=RunContext(thread_id="t1"), config={},
                       stream_writer=None, tool_call_id="c1", store=None)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_model_sees_the_schema_the_hints_gave(tmp_path, name):
    """Byte for byte, key order included."""
    tool = _tools(tmp_path)[name]
    assert json.dumps(convert_to_openai_tool(tool)) == json.dumps(EXPECTED[name]["schema"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_bad_call_is_refused_with_the_errors_the_hints_gave(tmp_path, name):
    tool = _tools(tmp_path)[name]
    with pytest.raises(ValidationError) as caught:
        tool._to_args_and_kwargs({**BAD_CALLS[name], "runtime": None}, "c1")
    assert caught.value.title == EXPECTED[name]["error_title"] == name
    assert [[list(error["loc"]), error["type"], error["msg"]]
            for error in caught.value.errors()] == EXPECTED[name]["errors"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_call_gets_its_arguments_and_the_runtime_itself(tmp_path, name):
    """Defaults filled in as before; the injected runtime is passed on as the same object
    and left out of the validated input's dump."""
    tool = _tools(tmp_path)[name]
    runtime = _runtime()
    args, kwargs = tool._to_args_and_kwargs({**GOOD_CALLS[name], "runtime": runtime}, "c1")
    assert args == ()
    assert kwargs.pop("runtime") is runtime
    schema = tool.args_schema
    expected = {key: field.default for key, field in schema.model_fields.items()
                if key != "runtime" and not field.is_required()} | GOOD_CALLS[name]
    assert kwargs == expected
    assert "runtime" not in schema.model_validate({**GOOD_CALLS[name],
                                                   "runtime": runtime}).model_dump()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_no_annotation_langchain_rebuilds_per_call_is_a_hint(tmp_path, name):
    """LangChain reads the schema's annotations on every call and rebuilds each generic
    one: an ``Annotated`` description or a parameterized ``ToolRuntime`` is gone."""
    tool = _tools(tmp_path)[name]
    annotations = get_all_basemodel_annotations(tool.args_schema)
    assert annotations["runtime"] is ToolRuntime
    for key, annotation in annotations.items():
        assert typing.get_origin(annotation) is not typing.Annotated, (name, key)
