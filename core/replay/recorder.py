"""Recording a conversation while it runs: a LangChain callback handler on the agent.

`Recorder` watches two places, so nothing in the chain changes when recording
is on and nothing runs when it is off:

* the **graph** (in its run config's callbacks): a run of the lead graph starts
  (the caller's input, or the `Command(resume=...)` value), a tool returns its
  own result (before any plugin wraps it), and the run ends with its final
  state, which `summarize_turn` describes;
* the **chat models** (their own callbacks, so calls made off the run, like the
  memory queue's, are seen too): every call's request shape and its reply or
  provider error, filed as an agent turn or as a title / memory / tool-selector
  side call by the call's ``lc_source`` metadata.

After every run (and every side call that comes later) the thread's recording is
written again, redacted (`Redactor`), atomically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from .fingerprint import request_shape
from .outcome import hidden_notes, summarize_turn
from .recording import (
    RECORDING_FORMAT,
    RecordedInput,
    RecordedToolResult,
    Recording,
    RecordingError,
    RecordingHeader,
    RecordingWriter,
    load_recording,
    save_recording,
)
from .redact import Redactor
from .settings import RecordSettings
from .turns import error_turn, reply_turn

__all__ = ["IDENTITY_KEY", "Recorder", "config_digest", "record_settings"]

log = logging.getLogger("antler.record")

SIDE_PURPOSES = ("title", "memory", "tool_selector")
IDENTITY_KEY = "antler_identity"
"""Run-config metadata key under which `AntlerAgent` states the run's user and roles."""
RECORDINGS_DIRECTORY = "recordings"


def record_settings(record: Any, config: Any) -> RecordSettings | None:
    """The settings `create_agent(record=...)` asks for; None: do not record.

    None means the config's `record:` section; False never records; True records
    as the section says; a path records that one file; a mapping or
    `RecordSettings` is used as it is.
    """
    section: RecordSettings = config.record
    if record is None:
        return section if section.enabled else None
    if record is False:
        return None
    if record is True:
        return section.model_copy(update={"enabled": True})
    if isinstance(record, RecordSettings):
        return record if record.enabled else None
    if isinstance(record, Mapping):
        settings = RecordSettings.model_validate({"enabled": True, **record})
        return settings if settings.enabled else None
    if isinstance(record, (str, Path)):
        return section.model_copy(update={"enabled": True, "path": str(record),
                                          "directory": None})
    raise TypeError(f"record must be None, a bool, a path, a mapping or RecordSettings; got "
                    f"{type(record).__name__}")


def config_digest(config: Any) -> str:
    """A digest of the config's validated sections: equal configs, equal digests."""
    data = {key: section.model_dump(mode="json") for key, section in
            sorted(getattr(config, "sections", {}).items())}
    text = json.dumps(data, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class _Run:
    """One run of a thread while it is being recorded."""

    def __init__(self, thread: _Thread, item: RecordedInput, previous_stop: Any) -> None:
        self.thread = thread
        self.item = item
        self.previous_stop = previous_stop
        self.replies: list[Any] = []
        self.hidden: dict[tuple[str, str], Any] = {}


class _Thread:
    """A thread's recording, and where it is written."""

    def __init__(self, recording: Recording, path: Path) -> None:
        self.recording = recording
        self.path = path
        self.last_stop: Any = None
        self.writer = RecordingWriter()


class Recorder(BaseCallbackHandler):
    """Records every run of the agent it is attached to (see the module docstring)."""

    run_inline = True  # events in order, on the thread that made them

    def __init__(self, settings: RecordSettings, *, config: Any, base_dir: Path,
                 model: Any = None, runtime: Any = None) -> None:
        self.settings = settings
        self.redactor = Redactor(settings.redact)
        self.base_dir = Path(base_dir)
        self.config_stamp = {"source": getattr(config, "source", None),
                             "digest": config_digest(config)}
        self.model = model if isinstance(model, str) else getattr(model, "model_name", None)
        self.runtime = {key: getattr(runtime, key) for key in
                        ("plan_mode", "subagents_enabled", "supports_vision", "agent_name")
                        if runtime is not None and getattr(runtime, key, None) is not None}
        self.chain: list[str] = []
        self.graph_name: str | None = None
        """The name of the graph whose runs are recorded (other root runs are not)."""
        self._lock = threading.RLock()
        self._parents: dict[UUID, UUID | None] = {}
        self._runs: dict[UUID, _Run] = {}
        self._calls: dict[UUID, tuple[str, _Run | None, list[str]]] = {}
        self._threads: dict[str, _Thread] = {}
        self._last: _Thread | None = None
        self.problems: list[str] = []

    # -- attaching -------------------------------------------------------------------------

    def watch(self, model: Any) -> Any:
        """A copy of the chat model `model` that reports its calls to this recorder."""
        if not hasattr(model, "model_copy") or not hasattr(model, "callbacks"):
            return model
        callbacks = model.callbacks
        handlers = list(callbacks) if isinstance(callbacks, list) else \
            list(getattr(callbacks, "handlers", []) or [])
        if any(getattr(handler, "recorder", None) is self for handler in handlers):
            return model  # watched already
        return model.model_copy(update={"callbacks": [*handlers, _ModelWatch(self)]})

    def path_for(self, thread_id: str) -> Path:
        if self.settings.path:
            return Path(self.settings.path)
        directory = Path(self.settings.directory) if self.settings.directory else \
            self.base_dir / RECORDINGS_DIRECTORY
        return directory / f"{thread_id}.yaml"

    # -- graph events ----------------------------------------------------------------------

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, metadata: Any = None,
                       **kwargs: Any) -> None:
        with self._lock:
            if parent_run_id is not None and parent_run_id in self._parents:
                self._parents[run_id] = parent_run_id
                return
            if self.graph_name is not None and kwargs.get("name") != self.graph_name:
                return  # a root run of something else (a state update's writers, say)
            metadata = metadata or {}
            thread_id = metadata.get("thread_id") or (metadata.get("configurable") or {}).get(
                "thread_id")
            if not thread_id:
                return  # not a thread's run (nothing to file it under)
            self._parents[run_id] = None
            thread = self._thread(str(thread_id), metadata)
            item = self._input(inputs)
            self._runs[run_id] = _Run(thread, item, thread.last_stop)

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID,
                      parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with self._lock:
            if parent_run_id in self._parents:
                self._parents[run_id] = parent_run_id

    def on_tool_end(self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                    **kwargs: Any) -> None:
        with self._lock:
            run = self._run_of(run_id)
            self._parents.pop(run_id, None)
            message, update = _tool_output(output)
            call_id = getattr(message, "tool_call_id", None)
            if run is None or not call_id:
                return
            status = getattr(message, "status", "success")
            run.item.tool_results[str(call_id)] = RecordedToolResult(
                name=str(getattr(message, "name", None) or "tool"),
                status="error" if status == "error" else "success",
                content=self.redactor.data(getattr(message, "content", "")),
                state_update=self.redactor.data(update))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, outputs, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, None, error)

    def _end(self, run_id: UUID, outputs: Any, error: BaseException | None) -> None:
        with self._lock:
            if run_id not in self._runs:
                self._parents.pop(run_id, None)
                return
            self._forget(run_id)
            run = self._runs.pop(run_id)
            state = outputs if isinstance(outputs, Mapping) else {}
            problem = None
            if error is not None:
                from antler.errors import describe_error

                if type(error).__name__ in ("GraphInterrupt", "Interrupt"):
                    problem = None
                else:
                    problem = self.redactor.text(describe_error(error))
            outcome = summarize_turn(state, run.replies, hidden=list(run.hidden.values()),
                                     previous_stop=run.previous_stop, error=problem)
            run.item.observed = type(outcome).model_validate(
                self.redactor.data(outcome.model_dump()))
            if state.get("antler_stop_reason") is not None:
                run.thread.last_stop = state.get("antler_stop_reason")
            run.thread.recording.recording.inputs.append(run.item)
            self._last = run.thread
            self._save(run.thread)

    # -- model events ----------------------------------------------------------------------

    def model_started(self, messages: Sequence[Any], run_id: UUID,
                      parent_run_id: UUID | None, metadata: Mapping[str, Any] | None) -> None:
        purpose = (metadata or {}).get("lc_source")
        purpose = purpose if purpose in SIDE_PURPOSES else "turns"
        with self._lock:
            run = self._run_of(parent_run_id) if parent_run_id is not None else None
            if parent_run_id in self._parents:
                self._parents[run_id] = parent_run_id
            shape = request_shape(messages, self.redactor) if purpose == "turns" else []
            if run is not None and purpose == "turns":
                for note in hidden_notes(messages):
                    note = note.model_copy(update={"text": self.redactor.text(note.text)})
                    run.hidden.setdefault((note.source, note.text), note)
            self._calls[run_id] = (purpose, run, shape)

    def model_ended(self, run_id: UUID, reply: Any, error: BaseException | None) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
            entry = self._calls.pop(run_id, None)
            if entry is None:
                return
            purpose, run, shape = entry
            turn = error_turn(error, self.redactor) if error is not None else \
                reply_turn(reply, self.redactor)
            thread = run.thread if run is not None else self._last
            if thread is None:
                self.problems.append(f"a {purpose} model call outside any recorded run was "
                                     "not recorded")
                return
            if purpose != "turns":
                getattr(thread.recording, purpose).append(turn)
                if run is None:
                    self._save(thread)  # a side call after the run (the memory queue)
                return
            if run is None:
                self.problems.append("a model call outside any recorded run was not recorded")
                return
            thread.recording.turns.append(turn)
            run.item.calls += 1
            run.item.requests.append(shape)
            if error is None:
                run.replies.append(reply)

    # -- bookkeeping -----------------------------------------------------------------------

    def _run_of(self, run_id: UUID | None) -> _Run | None:
        """The recorded run that `run_id` belongs to (None: none, or not under a run)."""
        if run_id is None or run_id not in self._parents:
            return None
        return self._runs.get(self._root(run_id))  # type: ignore[arg-type]

    def _forget(self, root: UUID) -> None:
        """Drop the parent links of the finished run `root` (and of what ran under it)."""
        for run_id in [key for key in self._parents if self._root(key) == root]:
            del self._parents[run_id]

    def _root(self, run_id: UUID | None) -> UUID | None:
        while run_id is not None and self._parents.get(run_id) is not None:
            run_id = self._parents[run_id]
        return run_id

    def _thread(self, thread_id: str, metadata: Mapping[str, Any]) -> _Thread:
        thread = self._threads.get(thread_id)
        if thread is not None:
            return thread
        path = self.path_for(thread_id)
        recording = self._continued(path, thread_id)
        if recording is None:
            from antler import __version__

            identity = metadata.get(IDENTITY_KEY) or {}
            recording = Recording(
                recording=RecordingHeader(
                    format=RECORDING_FORMAT, antler_version=__version__,
                    config=self.config_stamp, chain=list(self.chain), model=self.model,
                    runtime=self.runtime, thread_id=thread_id,
                    identity={"user_id": identity.get("user_id", "default"),
                              "roles": list(identity.get("roles") or [])},
                    recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
                    redact=list(self.settings.redact)),
                model_name=self.model)
        thread = self._threads[thread_id] = _Thread(recording, path)
        return thread

    def _continued(self, path: Path, thread_id: str) -> Recording | None:
        """The recording at `path` when it records this thread (a later run continues it)."""
        if not path.is_file():
            return None
        try:
            recording = load_recording(path)
        except RecordingError:
            return None
        return recording if recording.recording.thread_id == thread_id else None

    def _input(self, inputs: Any) -> RecordedInput:
        resume = getattr(inputs, "resume", None)
        if resume is not None:
            return RecordedInput(resume=self.redactor.data(_plain(resume)))
        messages = inputs.get("messages") if isinstance(inputs, Mapping) else None
        messages = messages if isinstance(messages, list) else [messages] if messages else []
        try:  # a served run's input may be role/content mappings
            from langchain_core.messages import convert_to_messages

            messages = convert_to_messages(messages)
        except (ValueError, TypeError, NotImplementedError):
            pass
        human = next((m for m in reversed(messages) if getattr(m, "type", None) == "human"),
                     None)
        if human is None:
            return RecordedInput(text=None)
        from antler.contracts.messages import message_text

        files = (getattr(human, "additional_kwargs", None) or {}).get("files") or []
        names = [str(item.get("filename")) for item in files
                 if isinstance(item, Mapping) and item.get("filename")]
        return RecordedInput(text=self.redactor.text(message_text(human)), uploads=names)

    def _save(self, thread: _Thread) -> None:
        try:
            save_recording(thread.recording, thread.path, thread.writer)
        except OSError as error:
            message = f"the recording {thread.path} could not be written: {error}"
            if message not in self.problems:
                self.problems.append(message)
                log.warning(message)


def _tool_output(output: Any) -> tuple[Any, dict[str, Any]]:
    """(the tool's result message, the other state keys it updates as plain data) of what a
    tool returned: a `ToolMessage`, or a `Command` whose update holds one."""
    update = getattr(output, "update", None)
    if not isinstance(update, Mapping):
        return output, {}
    messages = update.get("messages")
    messages = messages if isinstance(messages, list) else [messages] if messages else []
    message = next((m for m in messages if getattr(m, "type", None) == "tool"), None)
    others = {}
    for key, value in update.items():
        if key == "messages":
            continue
        try:
            others[key] = json.loads(json.dumps(value))
        except (TypeError, ValueError):
            continue  # not plain data: a stubbed replay goes without it
    return message, others


def _plain(value: Any) -> Any:
    """A resume value as plain data (LangGraph may hand a mapping of interrupt ids)."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


class _ModelWatch(BaseCallbackHandler):
    """The recorder's handler on a chat model: forwards its calls to the `Recorder`."""

    run_inline = True

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __deepcopy__(self, memo: Any) -> _ModelWatch:
        return self  # a model copy reports to the same recorder

    def __copy__(self) -> _ModelWatch:
        return self

    def on_chat_model_start(self, serialized: Any, messages: list[list[Any]], *, run_id: UUID,
                            parent_run_id: UUID | None = None, metadata: Any = None,
                            **kwargs: Any) -> None:
        self.recorder.model_started(messages[0] if messages else [], run_id, parent_run_id,
                                    metadata)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        generations = getattr(response, "generations", None) or [[]]
        first = generations[0][0] if generations and generations[0] else None
        self.recorder.model_ended(run_id, getattr(first, "message", None), None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.recorder.model_ended(run_id, None, error)
