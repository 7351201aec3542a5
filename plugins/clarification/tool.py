"""The `ask_clarification` tool the clarification plugin contributes.

The schema is what the model is shown; it is advice, not validation. The
middleware intercepts every call before LangChain would validate arguments,
and `request.build_request` normalizes whatever arrived. The tool's own body
only runs if the middleware is missing from a chain, and then still answers
with the readable question.

`return_direct=True` is load-bearing: LangChain's agent loop routes from the
tools node back to the model unless every executed tool returns directly, and
a `Command(goto=END)` from a tool does not override that edge. With it, a turn
whose only tool call is `ask_clarification` ends right after the question.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from .request import build_request, render_text

__all__ = ["TOOL_NAME", "AskClarificationArgs", "FormFieldArgs", "make_tool"]

TOOL_NAME = "ask_clarification"

DESCRIPTION = (
    "Ask the user a question and stop until they answer. Use it when the request is "
    "ambiguous, information is missing, several approaches are reasonable, or an action is "
    "risky and needs consent. Give `options` for a pick-one answer (the user may also answer "
    "freely), or `fields` for a short form (at most 16 fields); otherwise the user answers in "
    "free text. Call it alone: the run ends after the question is shown."
)


class FormFieldArgs(BaseModel):
    """One form field, as the model is asked to write it."""

    name: str = Field(description="Key of the answer: letters, digits, '_' or '-'.")
    label: str | None = Field(None, description="What the user sees (default: the name).")
    type: Literal["text", "textarea", "number", "select", "multiselect", "checkbox"] = Field(
        "text", description="checkbox is a yes/no that starts at no; with required it means "
        "the user must agree.")
    required: bool = Field(False, description="The user must answer (checkbox: must agree).")
    options: list[str] | None = Field(None, description="Choices of select/multiselect "
                                      "(at most 24).")
    description: str | None = Field(None, description="Help text under the field.")
    placeholder: str | None = Field(None, description="Example answer shown in the input.")


class AskClarificationArgs(BaseModel):
    """Arguments of `ask_clarification`."""

    question: str = Field(description="The question, in the user's language.")
    context: str | None = Field(None, description="Why you ask: what is unclear or at stake.")
    mode: Literal["free_text", "choice_with_other", "form"] | None = Field(
        None, description="Usually left out: it follows from options/fields.")
    options: list[str] | None = Field(None, description="Answers the user can pick (at most 24).")
    fields: list[FormFieldArgs] | None = Field(None, description="A short form instead of one "
                                               "question (at most 16 fields).")


def _ask_clarification(**arguments: Any) -> str:
    # Only reached when no clarification middleware intercepts the call.
    return render_text(build_request({key: _plain(value) for key, value in arguments.items()}))


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_none=True)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def make_tool() -> BaseTool:
    """A fresh `ask_clarification` tool."""
    return StructuredTool.from_function(
        func=_ask_clarification,
        name=TOOL_NAME,
        description=DESCRIPTION,
        args_schema=AskClarificationArgs,
        return_direct=True,
        metadata={"antler": {"sandbox": False, "remote_content": False}},
    )
