"""One recording checked against one config, or two: the work of `antler replay FILE`.

Against one config, the replay is compared with what the recording observed
when it was made (so a conversation replayed against its own config is
"equal"). With `against`, both configs replay the recording and are compared
with each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .diff import BehaviourDiff, compare
from .recording import load_recording
from .replayer import replay

__all__ = ["check_recording"]

RECORDED = "recorded"


def check_recording(path: str | Path, config: Any, against: Any = None, *,
                    registry: Any = None, stub: bool = False,
                    fuse: bool | None = None) -> BehaviourDiff:
    """The behavioural diff of the recording at `path` (see the module docstring).

    Raises:
        RecordingError: the recording cannot be read.
    """
    from antler import __version__

    recording = load_recording(path)
    header = recording.recording
    inputs = [item.text if item.text is not None else f"(resume: {item.resume})"
              for item in recording.inputs]
    first = replay(recording, config, registry=registry, stub=stub, fuse=fuse)
    notes = list(first.notes)
    if header.antler_version != __version__:
        notes.append(f"recorded with Antler {header.antler_version}, replayed with "
                     f"{__version__}")
    if against is None:
        exported = header.source == "thread-export"
        if exported:
            notes.append("exported from a thread's history, which does not keep the hidden "
                         "messages the model was shown: they are not compared")
        diff = compare(str(path), RECORDED, [item.observed for item in recording.inputs],
                       _label(config), first.outcomes, inputs,
                       ignore=("hidden messages",) if exported else ())
        seconds = first.seconds
    else:
        second = replay(recording, against, registry=registry, stub=stub, fuse=fuse)
        notes += [note for note in second.notes if note not in notes]
        diverged = sum(len(outcome.divergences) for outcome in first.outcomes)
        if diverged:
            notes.append(f"{_label(config)} itself diverges from the recording in {diverged} "
                         "request(s): the recording was made with another chain")
        diff = compare(str(path), _label(config), first.outcomes, _label(against),
                       second.outcomes, inputs, a_facts=first.memory_facts,
                       b_facts=second.memory_facts)
        seconds = first.seconds + second.seconds
    diff.notes.extend(notes)
    diff.seconds = seconds
    return diff


def _label(config: Any) -> str:
    source = str(getattr(config, "source", "") or "<defaults>")
    return Path(source).name if source not in ("<defaults>", "<config>") else source
