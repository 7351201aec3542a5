"""The skills registry: `SKILL.md` files an operator installs, read once per agent build.

A skill is a folder holding a ``SKILL.md``: YAML front matter between two
``---`` lines, then Markdown instructions::

    ---
    name: data-report
    description: Summarizes uploaded tables into a short report.
    allowed-tools: [read_file, bash]
    ---
    Read every CSV under /mnt/user-data/uploads ...

Skills live under one or more roots (``skills: {paths: [...]}``, default
``skills`` in the working directory) as ``<root>/<category>/<name>/SKILL.md``
(categories such as ``public`` and ``custom`` group them). The sandbox
shows them read-only under ``/mnt/skills/<category>/<name>/``.

Front matter: ``name`` and ``description`` are required non-empty strings
(the name is lowercase words joined by ``-``); ``allowed-tools`` is optional:
absent means no restriction, a list of tool names restricts the tools the
model may use after the skill was activated (``[]``: framework tools only).
A file whose front matter is wrong, or that is larger than
``skills.max_file_bytes``, is reported with its path and line and skipped; the
other skills still load. The front matter is parsed within the limits every
Antler YAML reader shares (`antler.parselimits`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from antler.chain.config import DEFAULT_SKILL_FILE_BYTES as DEFAULT_MAX_FILE_BYTES
from antler.chain.config import SkillsSettings
from antler.parselimits import SourceLimitError, read_bounded
from antler.plugin_api.paths import SKILLS_VIRTUAL_ROOT
from antler.plugin_api.skills import SKILL_FILENAME, SkillError, parse_skill

__all__ = [
    "DEFAULT_CATEGORY",
    "MAX_FILE_BYTES_SETTING",
    "SKILLS_VIRTUAL_ROOT",
    "SKILL_FILENAME",
    "Skill",
    "SkillError",
    "SkillProblem",
    "SkillsRegistry",
    "SkillsSettings",
    "parse_skill",
]

logger = logging.getLogger(__name__)

DEFAULT_CATEGORY = "custom"
"""The category suggested for a skill placed directly under a root."""
MAX_FILE_BYTES_SETTING = "skills.max_file_bytes"


@dataclass(frozen=True)
class Skill:
    """One installed skill."""

    name: str
    description: str
    category: str
    file: Path
    """The host path of its `SKILL.md`."""
    relative: PurePosixPath
    """Its folder relative to the category (usually just the name)."""
    body: str
    allowed_tools: tuple[str, ...] | None = None
    enabled: bool = True

    @property
    def container_path(self) -> str:
        """Where the sandbox shows its `SKILL.md`."""
        return f"{SKILLS_VIRTUAL_ROOT}/{self.category}/{self.relative}/{SKILL_FILENAME}"

    def summary(self) -> dict[str, Any]:
        """The JSON form `antler skills list --json` prints."""
        return {"name": self.name, "description": self.description, "category": self.category,
                "enabled": self.enabled, "allowed_tools": list(self.allowed_tools)
                if self.allowed_tools is not None else None,
                "path": self.container_path, "file": str(self.file)}


# Like `yamlsource.Location` it holds a file and a line; it is a problem, not a place.
@dataclass(frozen=True)
class SkillProblem:
    """A `SKILL.md` that could not be loaded: where, and how to fix it."""

    file: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}; the skill is skipped"


class SkillsRegistry:
    """The installed skills under the configured roots, loaded on first use."""

    def __init__(self, roots: Iterable[str | Path], *, disabled: Iterable[str] = (),
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.roots = [Path(root).expanduser().absolute() for root in roots]
        self.disabled = frozenset(disabled)
        self.max_file_bytes = max_file_bytes
        self._lock = threading.Lock()
        self._loaded: tuple[dict[str, Skill], list[SkillProblem]] | None = None

    @classmethod
    def from_settings(cls, settings: SkillsSettings | None) -> SkillsRegistry:
        settings = settings or SkillsSettings()
        return cls(settings.paths, disabled=settings.disabled,
                   max_file_bytes=settings.max_file_bytes)

    def skills(self) -> list[Skill]:
        """Every installed skill (enabled or not), by category and name."""
        return sorted(self._load()[0].values(), key=lambda s: (s.category, s.name))

    def enabled(self) -> list[Skill]:
        return [skill for skill in self.skills() if skill.enabled]

    def get(self, name: str) -> Skill | None:
        return self._load()[0].get(name)

    def problems(self) -> list[SkillProblem]:
        return list(self._load()[1])

    def reload(self) -> None:
        with self._lock:
            self._loaded = None

    def index(self) -> str:
        """The enabled skills as a system-prompt section ('' when there are none)."""
        skills = self.enabled()
        if not skills:
            return ""
        lines = [f"- {s.name} ({s.container_path}): {s.description}" for s in skills]
        return ("<skills>\nSkills hold instructions for specific tasks. The user activates one "
                "with /skill-name; you may read a skill's SKILL.md when a task matches it.\n"
                + "\n".join(lines) + "\n</skills>")

    def _load(self) -> tuple[dict[str, Skill], list[SkillProblem]]:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._scan()
                for problem in self._loaded[1]:
                    logger.warning("skills: %s", problem)
            return self._loaded

    def _scan(self) -> tuple[dict[str, Skill], list[SkillProblem]]:
        found: dict[str, Skill] = {}
        problems: list[SkillProblem] = []
        for root in self.roots:
            if not root.is_dir():
                continue
            for file in sorted(root.rglob(SKILL_FILENAME)):
                try:
                    skill = self._read(root, file)
                except SkillError as exc:
                    problems.append(SkillProblem(file, exc.line, str(exc)))
                    continue
                except SourceLimitError as exc:
                    problems.append(SkillProblem(file, 1, _without_location(str(exc), file)))
                    continue
                if skill.name in found:
                    problems.append(SkillProblem(file, 1, f"a skill named {skill.name!r} is "
                                                 f"already loaded from {found[skill.name].file}"))
                    continue
                found[skill.name] = skill
        return found, problems

    def read_text(self, file: Path) -> str:
        """The text of a `SKILL.md`, read within `max_file_bytes` (`SourceLimitError`)."""
        return read_bounded(file, self.max_file_bytes, setting=MAX_FILE_BYTES_SETTING)

    def _read(self, root: Path, file: Path) -> Skill:
        if not file.resolve().is_relative_to(root.resolve()):
            raise SkillError(1, "resolves outside its skills root (a symlink?)")
        data, body = parse_skill(self.read_text(file))
        parts = PurePosixPath(*file.parent.relative_to(root).parts)
        if len(parts.parts) < 2:
            raise SkillError(1, "a skill lives in <root>/<category>/<name>/SKILL.md; move its "
                             f"folder into a category folder such as {DEFAULT_CATEGORY}/")
        category, relative = parts.parts[0], PurePosixPath(*parts.parts[1:])
        tools = data.get("allowed-tools")
        return Skill(name=data["name"], description=" ".join(data["description"].split()),
                     category=category, file=file, relative=relative, body=body,
                     allowed_tools=tuple(tools) if tools is not None else None,
                     enabled=data["name"] not in self.disabled)



def _without_location(message: str, file: Path) -> str:
    """`message` without the `file:line:col: ` prefix `SkillProblem` prints itself."""
    return re.sub(rf"^{re.escape(str(file))}(?::\d+)*: ", "", message)
