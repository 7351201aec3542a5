"""Tiny installed distributions for tests: a package tree plus its `.dist-info`.

A directory holding `pkg/...` and `pkg-1.0.dist-info/{METADATA,entry_points.txt}`
is, once on `sys.path`, indistinguishable from an installed wheel as far as
`importlib.metadata` and stevedore are concerned. That is enough to exercise
discovery exactly as an operator's environment would, without pip or network.
"""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path


def dist_info_name(name: str, version: str) -> str:
    """The `.dist-info` directory name for a distribution (underscores, no dashes)."""
    return f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"


class Site:
    """A `site-packages`-like directory that tests add distributions and modules to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self.top_level: set[str] = set()

    def module(self, dotted: str, source: str) -> Path:
        """Write module `dotted` (creating package `__init__.py` files on the way)."""
        parts = dotted.split(".")
        for depth in range(1, len(parts)):
            init = self.path.joinpath(*parts[:depth], "__init__.py")
            if not init.exists():
                self._write(init, "")
        target = self.path.joinpath(*parts[:-1], parts[-1] + ".py")
        self._write(target, source)
        self.top_level.add(parts[0])
        importlib.invalidate_caches()
        return target

    def distribution(
        self,
        name: str,
        version: str = "1.0",
        *,
        files: Mapping[str, str],
        entry_points: Mapping[str, Mapping[str, str]] | None = None,
        summary: str = "a test distribution",
    ) -> Path:
        """Write `files` (paths relative to the site) and the distribution's metadata."""
        written = []
        for relative, text in files.items():
            target = self.path / relative
            self._write(target, text)
            written.append(relative)
            self.top_level.add(Path(relative).parts[0].removesuffix(".py"))
        info = self.path / dist_info_name(name, version)
        info.mkdir()
        self._write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\n"
                                       f"Version: {version}\nSummary: {summary}\n")
        sections = []
        for group, targets in (entry_points or {}).items():
            lines = "".join(f"{ep} = {target}\n" for ep, target in targets.items())
            sections.append(f"[{group}]\n{lines}")
        self._write(info / "entry_points.txt", "\n".join(sections))
        record = [*written, *(f"{info.name}/{f}" for f in ("METADATA", "entry_points.txt"))]
        self._write(info / "RECORD", "".join(f"{line},,\n" for line in [*record,
                                                                        f"{info.name}/RECORD"]))
        importlib.invalidate_caches()
        return info

    def purge_modules(self) -> None:
        """Forget every module imported from this site, so the next test imports afresh."""
        for module in list(sys.modules):
            if module.partition(".")[0] in self.top_level:
                del sys.modules[module]
        importlib.invalidate_caches()

    @staticmethod
    def _write(target: Path, text: str) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
