"""A directory of recordings replayed as a suite, in parallel up to the machine's cores.

Each recording replays in a worker process of its own (a replay builds its
own agent, so nothing is shared between them); a recording that cannot be read
or replayed is reported as an error for its row and the others go on.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SuiteRow", "recordings_in", "run_suite"]

SUFFIXES = (".yaml", ".yml")


@dataclass
class SuiteRow:
    """One recording's result in a suite: its diff as JSON, or the error that stopped it."""

    path: str
    diff: dict[str, Any] | None
    error: str | None = None

    @property
    def status(self) -> str:
        if self.error is not None:
            return "error"
        assert self.diff is not None
        return "equal" if self.diff["equal"] else "differs"


def recordings_in(directory: Path) -> list[Path]:
    """The recordings of `directory` (its `*.yaml`/`*.yml` files, sorted)."""
    return sorted(path for path in directory.iterdir()
                  if path.is_file() and path.suffix in SUFFIXES)


def _one(job: tuple[str, str | None, str | None, bool, bool | None, list[str], bool]) -> SuiteRow:
    path, config_path, against_path, stub, fuse, manifests, isolated = job
    from antler.errors import AntlerError, describe_error

    from .check import check_recording

    try:
        from antler.cli.session import Session

        session = Session(manifests=list(manifests), isolated=isolated)
        registry = session.registry()
        config = session.config(config_path)
        against = session.config(against_path) if against_path else None
        diff = check_recording(path, config, against, registry=registry, stub=stub, fuse=fuse)
        return SuiteRow(path, diff.as_json())
    except AntlerError as error:
        return SuiteRow(path, None, str(error))
    except Exception as error:  # one recording's failure does not stop the suite
        return SuiteRow(path, None, describe_error(error))


def run_suite(paths: Sequence[Path], config_path: str | None, against_path: str | None, *,
              stub: bool = False, fuse: bool | None = None, jobs: int | None = None,
              manifests: Sequence[str] = (), isolated: bool = False) -> list[SuiteRow]:
    """Replay every recording of `paths`; rows in the order of `paths`."""
    work = [(str(path), config_path, against_path, stub, fuse, list(manifests), isolated)
            for path in paths]
    workers = max(1, min(jobs or os.cpu_count() or 1, len(work)))
    if workers == 1:
        return [_one(job) for job in work]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_one, work))
