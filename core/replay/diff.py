"""Behavioural diff: two descriptions of the same conversation, compared run by run.

Each side is a list of `TurnOutcome`s (one per recorded input): the recording's
own observations, or a replay against a config. For each run the diff lists
what differs: every tool call (executed with which status, refused by which
plugin and why, stripped by which plugin, missing from the chain, unanswered),
the stop reason, the hidden messages by plugin, the model calls and token
usage, the final answer, the title, an error that ended the run, and for a
replay the requests that diverged from the recording. Memory facts are compared
once, after the last run.

Hidden messages are compared by the plugins that injected them, not by their
text, which may hold the date; the text is shown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .recording import ToolOutcome, TurnOutcome

__all__ = ["BehaviourDiff", "Difference", "RunDiff", "compare", "describe_tool"]


@dataclass(frozen=True)
class Difference:
    """One aspect of a run that differs: what it is and how each side reads."""

    what: str
    a: str
    b: str

    def as_json(self) -> dict[str, str]:
        return {"what": self.what, "a": self.a, "b": self.b}


@dataclass
class RunDiff:
    """One recorded input and how its run differs between the sides."""

    index: int
    input: str
    a: TurnOutcome | None
    b: TurnOutcome | None
    differences: list[Difference] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.differences

    def as_json(self) -> dict[str, Any]:
        return {"run": self.index + 1, "input": self.input, "equal": self.equal,
                "differences": [d.as_json() for d in self.differences],
                "a": self.a.model_dump() if self.a else None,
                "b": self.b.model_dump() if self.b else None}


@dataclass
class BehaviourDiff:
    """The whole comparison of one recording between side `a` and side `b`."""

    recording: str
    a_label: str
    b_label: str
    runs: list[RunDiff]
    memory: Difference | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return self.memory is None and all(run.equal for run in self.runs)

    @property
    def differing_runs(self) -> int:
        return sum(not run.equal for run in self.runs)

    @property
    def divergences(self) -> int:
        return sum(len(side.divergences) for run in self.runs for side in (run.a, run.b)
                   if side is not None)

    def as_json(self) -> dict[str, Any]:
        return {"recording": self.recording, "a": self.a_label, "b": self.b_label,
                "equal": self.equal, "differing_runs": self.differing_runs,
                "runs": [run.as_json() for run in self.runs],
                "memory": self.memory.as_json() if self.memory else None,
                "notes": list(self.notes), "seconds": round(self.seconds, 3)}


def describe_tool(tool: ToolOutcome | None) -> str:
    """One side of a tool call in words."""
    if tool is None:
        return "not called"
    if tool.outcome == "executed":
        return f"executed ({tool.status})"
    if tool.outcome == "refused":
        return f"refused by {tool.by}: {tool.reason}"
    if tool.outcome == "stripped":
        return f"stripped by {tool.by}" if tool.by else "stripped from the reply"
    if tool.outcome == "missing":
        return "missing: the chain has no such tool"
    return "left without a result"


def _tool_key(tool: ToolOutcome | None) -> tuple[Any, ...]:
    if tool is None:
        return ("absent",)
    if tool.outcome == "stripped":
        return ("stripped",)  # the recording may not know who stripped it
    return (tool.outcome, tool.status, tool.by if tool.outcome == "refused" else None)


def _text(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    return str(value)


def _hidden(outcome: TurnOutcome) -> str:
    counts = Counter(note.source for note in outcome.hidden)
    return ", ".join(f"{source} x{count}" if count > 1 else source
                     for source, count in sorted(counts.items())) or "-"


def _usage(outcome: TurnOutcome) -> str:
    usage = outcome.usage or {}
    if not usage:
        return "-"
    return (f"{usage.get('total_tokens', 0)} tokens ({usage.get('input_tokens', 0)} in, "
            f"{usage.get('output_tokens', 0)} out)")


def compare_run(index: int, text: str, a: TurnOutcome | None,
                b: TurnOutcome | None, *, ignore: Sequence[str] = ()) -> RunDiff:
    """How run `index` differs between `a` and `b` (None: that side has no such run),
    leaving out the aspects named in `ignore`."""
    run = RunDiff(index, text, a, b)
    if a is None or b is None:
        run.differences.append(Difference("run", "ran" if a else "did not run",
                                          "ran" if b else "did not run"))
        return run
    tools_a = {tool.id: tool for tool in a.tools}
    tools_b = {tool.id: tool for tool in b.tools}
    for call_id in [*tools_a, *(key for key in tools_b if key not in tools_a)]:
        left, right = tools_a.get(call_id), tools_b.get(call_id)
        if _tool_key(left) != _tool_key(right):
            name = (left or right).name  # type: ignore[union-attr]
            run.differences.append(Difference(f"tool {name} ({call_id})", describe_tool(left),
                                              describe_tool(right)))
    aspects = (
        ("stop reason", _text(a.stop_reason), _text(b.stop_reason)),
        ("hidden messages", _hidden(a), _hidden(b)),
        ("model calls", str(a.model_calls), str(b.model_calls)),
        ("token usage", _usage(a), _usage(b)),
        ("final answer", _text(a.final), _text(b.final)),
        ("title", _text(a.title), _text(b.title)),
        ("error", _text(a.error), _text(b.error)),
        ("missing tools", _text(", ".join(a.missing_tools)),
         _text(", ".join(b.missing_tools))),
        ("diverged requests", _text("; ".join(a.divergences)),
         _text("; ".join(b.divergences))),
    )
    run.differences.extend(Difference(what, left, right) for what, left, right in aspects
                           if left != right and what not in ignore)
    return run


def compare(recording: str, a_label: str, a: Sequence[TurnOutcome | None], b_label: str,
            b: Sequence[TurnOutcome | None], inputs: Sequence[str], *,
            a_facts: Sequence[str] | None = None,
            b_facts: Sequence[str] | None = None,
            ignore: Sequence[str] = ()) -> BehaviourDiff:
    """The diff of two sides of a recording's runs (facts compared when both have them)."""
    runs = [compare_run(index, text, a[index] if index < len(a) else None,
                        b[index] if index < len(b) else None, ignore=ignore)
            for index, text in enumerate(inputs)]
    memory = None
    if a_facts is not None and b_facts is not None and sorted(a_facts) != sorted(b_facts):
        memory = Difference("memory facts", "; ".join(sorted(a_facts)) or "-",
                            "; ".join(sorted(b_facts)) or "-")
    return BehaviourDiff(recording, a_label, b_label, runs, memory)


def render_text(diff: BehaviourDiff) -> str:
    """The diff for a terminal: the runs that differ, aspect by aspect."""
    lines = [f"{diff.recording}: {diff.a_label} vs {diff.b_label}"]
    for run in diff.runs:
        head = f"  run {run.index + 1} {run.input!r}"
        if run.equal:
            lines.append(f"{head}: same behaviour")
            continue
        lines.append(f"{head}:")
        for difference in run.differences:
            lines.append(f"    {difference.what}:")
            lines.append(f"      {diff.a_label}: {difference.a}")
            lines.append(f"      {diff.b_label}: {difference.b}")
    if diff.memory is not None:
        lines.append("  memory facts:")
        lines.append(f"    {diff.a_label}: {diff.memory.a}")
        lines.append(f"    {diff.b_label}: {diff.memory.b}")
    lines.extend(f"  note: {note}" for note in diff.notes)
    verdict = "behaviour is equal" if diff.equal else \
        f"behaviour differs in {diff.differing_runs} of {len(diff.runs)} run(s)" + \
        (" and in memory facts" if diff.memory is not None else "")
    lines.append(f"  => {verdict}")
    return "\n".join(lines)
