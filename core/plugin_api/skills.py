"""A skill's `SKILL.md`: its file name, and reading its front matter and body.

YAML front matter between two ``---`` lines, then Markdown instructions.
``name`` and ``description`` are required non-empty strings (the name is
lowercase words joined by ``-``); ``allowed-tools`` is optional (absent: no
restriction; a list of tool names restricts the tools the model may use after
the skill was activated). The registry of installed skills is the runtime's
(the `skills` service); a plugin that reads a skill file parses it here.
"""

from __future__ import annotations

import re
from typing import Any

from .yamlsource import YamlSyntaxError, load_yaml

__all__ = ["SKILL_FILENAME", "SkillError", "parse_skill"]

SKILL_FILENAME = "SKILL.md"
NAME_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_DESCRIPTION_CHARS = 1024
"""A description is listed in every system prompt; the details belong in the body."""
_KNOWN_KEYS = frozenset({"name", "description", "allowed-tools", "license", "metadata",
                         "compatibility", "version", "author"})


class SkillError(ValueError):
    """A `SKILL.md` is malformed (carries the line it points at)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def parse_skill(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, body) of a `SKILL.md`; `SkillError` names the line of a problem."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillError(1, "a SKILL.md starts with a '---' line opening its YAML front matter")
    end = next((i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---"), None)
    if end is None:
        raise SkillError(1, "the front matter opened on line 1 is never closed by a '---' line")
    try:
        front = load_yaml("\n".join(lines[1:end]), SKILL_FILENAME)
    except YamlSyntaxError as exc:
        hint = ""
        if "mapping values are not allowed" in exc.problem:
            hint = " (a value containing ': ' must be quoted, e.g. description: \"a: b\")"
        problem = exc.problem.removeprefix("invalid YAML: ")
        what = "invalid YAML front matter" if problem != exc.problem else "front matter"
        raise SkillError(exc.line + 1 if exc.line else 2, f"{what}: {problem}{hint}") from None
    data = front.data
    if not isinstance(data, dict):
        raise SkillError(2, "the front matter must be a mapping of keys such as name: and "
                            "description:")
    keys = {key: front.locate((key,)).line + 1 for key in data}
    unknown = sorted(str(k) for k in data if k not in _KNOWN_KEYS)
    if unknown:
        raise SkillError(keys[unknown[0]], f"unknown front-matter key {unknown[0]!r}; known "
                         f"keys: {', '.join(sorted(_KNOWN_KEYS))}")
    for key in ("name", "description"):
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            raise SkillError(keys.get(key, 2), f"{key!r} must be a non-empty string")
    if len(data["description"]) > MAX_DESCRIPTION_CHARS:
        raise SkillError(keys["description"], f"the description has {len(data['description']):,} "
                         f"characters, more than {MAX_DESCRIPTION_CHARS:,}: it is part of every "
                         "system prompt, so say when to use the skill and move the details into "
                         "the body")
    if not NAME_PATTERN.fullmatch(data["name"]):
        raise SkillError(keys["name"], f"name {data['name']!r} must be lowercase letters and "
                         "digits joined by '-', such as data-report")
    tools = data.get("allowed-tools")
    if "allowed-tools" in data and not (
            isinstance(tools, list) and all(isinstance(t, str) and t for t in tools)):
        raise SkillError(keys["allowed-tools"], "'allowed-tools' must be a list of tool names, "
                         "such as [read_file, bash]")
    return data, "\n".join(lines[end + 1:]).strip()
