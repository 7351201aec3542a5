"""The stop-reason channel: why a run ended before the model finished on its own.

A guard that cuts a run short (a loop stopped, a token budget spent, a reply
cut by the length limit or a safety filter, the delegation cap reached)
records a reason here. `antler run` prints it and the `task` tool hands a
subagent's reason to the lead in its result.

The channel is one graph state key, `antler_stop_reason`, holding
``{"reason", "run_id", "detail"}``. It is private to the server (callers cannot
set it in graph input) and scoped to a run: a value written by an earlier run
of the thread is not this run's reason (`stop_reason_of`). Writers choose
between overwrite (the latest guard to act explains the stop) and first
writer wins (a reason that must not be masked by later ones), per reason.

A middleware that writes it declares `StopReasonState` (or a subclass) as its
`state_schema` and returns `record_stop_reason(...)` from a node hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentState
from langchain.agents.middleware.types import OmitFromInput

from antler.contracts.runcontext import run_id_of

STOP_REASON_KEY = "antler_stop_reason"

KNOWN_REASONS = {
    "loop_capped": "the same tool calls repeated until the loop guard stopped them",
    "token_capped": "the run used its token budget",
    "safety_capped": "the provider stopped the reply for safety reasons",
    "model_length_capped": "the reply was cut at the model's length limit",
    "subagent_limit_capped": "the run reached its delegation limit",
    "turn_capped": "the subagent reached its step limit",
    "error_fallback": "the model call failed and the reply is an error notice",
    "input_refused": "the input held a message role callers may not send; no model was called",
}
"""Reasons the built-in plugins record, with the sentence `antler run` prints."""

FIRST_WRITER_WINS = frozenset({"model_length_capped"})
"""Reasons that keep a run's first recorded reason (later ones do not replace it)."""


def _merge(current: Any, new: Any) -> Any:
    """The channel's reducer: per run, overwrite unless the new value says keep-first."""
    if not isinstance(new, Mapping):
        return current
    if (isinstance(current, Mapping) and new.get("first_writer")
            and current.get("run_id") == new.get("run_id")):
        return current
    return {key: value for key, value in new.items() if key != "first_writer"}


class StopReasonState(AgentState[Any]):
    """State schema of a middleware that records stop reasons."""

    # LangGraph takes the reducer from the last annotation.
    antler_stop_reason: NotRequired[Annotated[dict[str, Any], OmitFromInput, _merge]]


def record_stop_reason(reason: str, runtime: Any = None, *, detail: str | None = None,
                       first_writer: bool | None = None) -> dict[str, Any]:
    """The state update recording `reason` for the current run.

    `first_writer` defaults to the reason's policy (`FIRST_WRITER_WINS`).
    """
    if first_writer is None:
        first_writer = reason in FIRST_WRITER_WINS
    value: dict[str, Any] = {"reason": reason, "run_id": run_id_of(runtime), "detail": detail}
    if first_writer:
        value["first_writer"] = True
    return {STOP_REASON_KEY: value}


def stop_reason_of(state: Mapping[str, Any], run_id: str | None = None) -> dict[str, Any] | None:
    """The recorded stop reason; with `run_id`, only when that run recorded it."""
    value = state.get(STOP_REASON_KEY) if isinstance(state, Mapping) else None
    if not isinstance(value, Mapping) or not value.get("reason"):
        return None
    if run_id is not None and value.get("run_id") != run_id:
        return None
    return dict(value)


def describe_stop_reason(value: Mapping[str, Any]) -> str:
    """One line for people: the reason, what it means and the detail, if any."""
    reason = str(value.get("reason"))
    text = f"{reason}: {KNOWN_REASONS.get(reason, 'recorded by a plugin')}"
    detail = value.get("detail")
    return f"{text} ({detail})" if detail else text
