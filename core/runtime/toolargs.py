"""Tool argument schemas that do not copy the injected `ToolRuntime`.

LangChain validates a tool's input with its argument schema and then dumps the
validated model to a dict. A tool that takes `runtime: ToolRuntime` has the
runtime in that schema, and dumping it serializes the runtime's state: every
message of the thread, on every call, only for the dict to be thrown away (the
injected value itself is passed on from the input). `without_runtime_dump`
marks the field excluded from the dump, so a tool call costs the same on a
thread of two thousand messages as on an empty one. What the model sees of the
tool (`tool_call_schema`) and what the tool receives do not change.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, create_model

RUNTIME_ARG = "runtime"
"""The parameter name LangGraph's tools node injects the `ToolRuntime` into."""


def without_runtime_dump(tool: Any) -> Any:
    """`tool` with its `runtime` argument left out of the validated input's dump."""
    schema = tool.args_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return tool
    field = schema.model_fields.get(RUNTIME_ARG)
    if field is None:
        return tool
    excluded: Any = (field.annotation, Field(exclude=True))
    tool.args_schema = create_model(schema.__name__, __base__=schema, __doc__=schema.__doc__,
                                    **{RUNTIME_ARG: excluded})
    return tool
