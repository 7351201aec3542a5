"""The recording file: a conversation in the scripted-model format, plus what replay needs.

A recording is a YAML file that `ScriptedChatModel.from_yaml` reads as it is
(`--model scripted:FILE` plays its replies), with one more top-level mapping,
``recording:``, first in the file::

    recording:
      format: 1                      # RECORDING_FORMAT; another format is refused
      antler_version: 0.1.0
      config: {source: a.yaml, digest: sha256:...}
      chain: [input_sanitization, ...]
      model: openai:gpt-4o
      runtime: {plan_mode: false, subagents_enabled: false, supports_vision: false}
      thread_id: t1
      identity: {user_id: default, roles: []}
      redact: ['ACME-[0-9]+']         # the operator's patterns, so replay redacts alike
      inputs:                        # one per run of the thread, in order
      - text: write a file
        uploads: [notes.md]          # names only; replay stages empty files
        calls: 2                     # model calls of this run: the next 2 of `turns`
        requests: [[user 3f2a...], [user 3f2a..., assistant 9b1c... calls bash(c1), ...]]
        tool_results: {c1: {name: bash, status: success, content: "hello\\n"}}
        observed: {...}              # the run's behaviour (`TurnOutcome`)
    turns: [...]                     # every model reply, as scripted turns
    title: [...]                     # title side calls
    memory: [...]                    # memory side calls

`load_recording` refuses a file of another format, a damaged file or one whose
parts do not add up, naming the file, line and key and what to do.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from antler.errors import AntlerError
from antler.plugin_api.diagnostics import describe_validation_error
from antler.plugin_api.yamlsource import YamlSyntaxError, load_yaml_file
from antler.runtime.models.scripted import TurnSpec

__all__ = [
    "RECORDING_FORMAT", "HiddenNote", "RecordedInput", "RecordedToolResult", "Recording",
    "RecordingError", "RecordingHeader", "RecordingWriter", "ToolOutcome", "TurnOutcome",
    "dump_recording", "load_recording", "save_recording",
]

RECORDING_FORMAT = 1
"""The recording format this Antler reads and writes."""

MAX_RECORDING_BYTES = 64 * 1024 * 1024


class RecordingError(AntlerError):
    """A recording that cannot be read: its file, where in it and what to do."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolOutcome(_Strict):
    """What became of one tool call the model made."""

    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    outcome: Literal["executed", "refused", "stripped", "missing", "unanswered"]
    status: str | None = None
    """executed: the result's status, or its error type when it failed."""
    by: str | None = None
    """refused or stripped: the plugin that did it (when known)."""
    reason: str | None = None
    result: str | None = None
    """The start of the result the model got."""


class HiddenNote(_Strict):
    """A message a plugin put in front of the model, not the user's or the model's."""

    source: str
    text: str


class TurnOutcome(_Strict):
    """How one run of the thread behaved: what replay and the diff compare."""

    model_calls: int = 0
    tools: list[ToolOutcome] = Field(default_factory=list)
    stop_reason: str | None = None
    stop_detail: str | None = None
    hidden: list[HiddenNote] = Field(default_factory=list)
    usage: dict[str, int] | None = None
    final: str = ""
    title: str | None = None
    error: str | None = None
    divergences: list[str] = Field(default_factory=list)
    """Replay only: model requests that left the recorded ones."""
    missing_tools: list[str] = Field(default_factory=list)
    """Replay only: tools the recorded replies call that the chain does not have."""


class RecordedToolResult(_Strict):
    """A tool's own result, before any plugin wrapped it: what `--stub-tools` answers."""

    name: str
    status: Literal["success", "error"] = "success"
    content: Any = ""
    state_update: dict[str, Any] = Field(default_factory=dict)
    """Other state keys the tool updated (plain data only), applied again with the result."""


class RecordedInput(_Strict):
    """One run of the thread: what the caller sent and what the run did."""

    text: str | None = None
    resume: Any = None
    """A run that continued a paused one sends this `Command(resume=...)` value instead."""
    uploads: list[str] = Field(default_factory=list)
    calls: int = Field(0, ge=0)
    requests: list[list[str]] = Field(default_factory=list)
    tool_results: dict[str, RecordedToolResult] = Field(default_factory=dict)
    observed: TurnOutcome | None = None

    @model_validator(mode="after")
    def _one_request_per_call(self) -> RecordedInput:
        if len(self.requests) != self.calls:
            raise ValueError(f"has {self.calls} model call(s) but {len(self.requests)} "
                             "request shape(s); each call needs one")
        return self


class RecordingHeader(_Strict):
    """The `recording:` mapping."""

    format: int
    antler_version: str
    source: Literal["recorded", "thread-export"] = "recorded"
    config: dict[str, str | None] = Field(default_factory=dict)
    chain: list[str] = Field(default_factory=list)
    model: str | None = None
    runtime: dict[str, Any] = Field(default_factory=dict)
    thread_id: str
    identity: dict[str, Any] = Field(default_factory=dict)
    recorded_at: str | None = None
    redact: list[str] = Field(default_factory=list)
    inputs: list[RecordedInput] = Field(default_factory=list)


class Recording(_Strict):
    """A whole recording file."""

    recording: RecordingHeader
    model_name: str | None = None
    turns: list[TurnSpec] = Field(default_factory=list)
    title: list[TurnSpec] = Field(default_factory=list)
    memory: list[TurnSpec] = Field(default_factory=list)
    tool_selector: list[TurnSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _calls_add_up(self) -> Recording:
        counted = sum(item.calls for item in self.recording.inputs)
        if counted != len(self.turns):
            raise ValueError(f"the inputs account for {counted} model call(s) but `turns` "
                             f"holds {len(self.turns)}; the file was cut or edited")
        return self

    def start_of(self, index: int) -> int:
        """The position in `turns` of input `index`'s first model call."""
        return sum(item.calls for item in self.recording.inputs[:index])

    @property
    def inputs(self) -> list[RecordedInput]:
        return self.recording.inputs


def _turn_data(turn: TurnSpec) -> dict[str, Any]:
    return turn.model_dump(exclude_none=True, exclude_defaults=True) or {"content": ""}


def _yaml(data: Any) -> str:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's, where built
    return yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True, width=100)


def _indented(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


class RecordingWriter:
    """Renders a recording that grows (runs and turns are only ever appended) again and
    again, each run and turn once: a long conversation's recording is written after every
    run without rendering its beginning each time."""

    def __init__(self) -> None:
        self._inputs: list[str] = []
        self._turns: list[str] = []

    def text(self, recording: Recording) -> str:
        header = recording.recording.model_dump(exclude_none=True, exclude={"inputs"})
        inputs = recording.recording.inputs
        self._inputs += [_indented(_yaml([item.model_dump(exclude_none=True)]), 2)
                         for item in inputs[len(self._inputs):]]
        self._turns += [_yaml([_turn_data(turn)]) for turn in recording.turns[len(self._turns):]]
        parts = [_yaml({"recording": header}),
                 "  inputs:\n" + "".join(self._inputs) if inputs else "  inputs: []\n"]
        if recording.model_name:
            parts.append(_yaml({"model_name": recording.model_name}))
        parts.append("turns:\n" + "".join(self._turns) if recording.turns else "turns: []\n")
        for side in ("title", "memory", "tool_selector"):
            turns = getattr(recording, side)
            if turns:
                parts.append(_yaml({side: [_turn_data(turn) for turn in turns]}))
        return "".join(parts)


def dump_recording(recording: Recording) -> str:
    """The YAML text of `recording`, header first."""
    return RecordingWriter().text(recording)


def save_recording(recording: Recording, path: Path,
                   writer: RecordingWriter | None = None) -> None:
    """Write `recording` to `path` atomically: a crash leaves the previous file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    text = (writer or RecordingWriter()).text(recording)
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def load_recording(path: str | Path) -> Recording:
    """Read and check a recording.

    Raises:
        RecordingError: the file is missing, not YAML, not a recording, of another
            format, or inconsistent; the message names the file, line and key.
    """
    from antler import __version__

    source = Path(path)
    if not source.is_file():
        raise RecordingError(f"{source}: no such recording file")
    try:
        doc = load_yaml_file(source, max_bytes=MAX_RECORDING_BYTES)
    except YamlSyntaxError as error:
        raise RecordingError(f"{source}: damaged recording, not readable YAML: {error}. "
                             "Record the conversation again.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RecordingError(f"{source}: cannot be read: {error}") from None
    data = doc.data
    if not isinstance(data, dict) or not isinstance(data.get("recording"), dict):
        raise RecordingError(
            f"{doc.locate(())}: not a recording: it has no `recording:` header. A plain "
            "script of replies runs with `antler run --model scripted:FILE`; a recording is "
            "written by `antler run --record FILE` or `antler threads export THREAD "
            "--format script`.")
    header = data["recording"]
    found = header.get("format")
    if found != RECORDING_FORMAT:
        written = header.get("antler_version", "an unknown version")
        raise RecordingError(
            f"{doc.locate(('recording', 'format'))}: recording.format is {found!r}, but this "
            f"Antler ({__version__}) reads format {RECORDING_FORMAT}; the file was written by "
            f"Antler {written}. Replay it with that version, or record the conversation "
            "again with this one.")
    try:
        return Recording.model_validate(data)
    except ValidationError as error:
        lines = describe_validation_error(error, doc, model=Recording)
        raise RecordingError(f"{source}: damaged recording:\n  " + "\n  ".join(lines)
                             + "\nRecord the conversation again (or fix the named key).") \
            from None


