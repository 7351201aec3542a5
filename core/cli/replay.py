"""`antler replay`: play recorded conversations against a config, offline, and compare.

Exit codes (so the command can gate a config change in CI): 0 behaviour is
equal, 1 it differs, 2 an error (a recording that cannot be read, a config
that does not load). Nothing is sent to a model provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from . import CliError
from .session import Session, manifest_option, pass_session

DIFFERS_EXIT_CODE = 1


class ReplayError(CliError):
    """A replay that could not be done: exit code 2, as `--help` documents."""

    exit_code = 2


@click.command("replay")
@click.argument("path", metavar="FILE|DIR")
@click.option("--config", "config_path", metavar="A.yaml", type=click.Path(dir_okay=False),
              default=None, help="The config to replay against (default: all defaults).")
@click.option("--against", "against_path", metavar="B.yaml",
              type=click.Path(dir_okay=False), default=None,
              help="Replay against this config too and compare A with B (without it, A is "
                   "compared with what the recording observed).")
@click.option("--stub-tools", "stub", is_flag=True,
              help="Answer tools with the recorded results instead of running them in a "
                   "scratch sandbox.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the diff as a self-contained HTML page to this file.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Recordings replayed at once for a directory (default: the cores).")
@click.option("--fuse/--no-fuse", default=None,
              help="Fuse node hooks (default: each config's chain.fuse).")
@manifest_option
@pass_session
def replay_command(session: Session, path: str, config_path: str | None,
                   against_path: str | None, stub: bool, as_json: bool,
                   html_path: str | None, jobs: int | None, fuse: bool | None) -> None:
    """Replay the recording FILE (or every recording in DIR) against --config, offline.

    Each recorded input runs through the chain of the config; model calls are
    answered from the recording by position within their run, and a request
    that differs from the recorded one is reported as diverged. Tools run in
    a scratch sandbox, or answer from the recording with --stub-tools.

    Without --against, the replay is compared with the behaviour the recording
    observed; with --against B.yaml, the replays of A and B are compared. Per
    run: tool calls executed, refused (by which plugin, why) or stripped; stop
    reason; hidden messages; model calls and token usage; final answer; title;
    memory facts (A vs B).

    \b
    Exit codes: 0 behaviour equal, 1 behaviour differs, 2 error.
    JSON (--json): {"recordings": [{"path", "diff": {"recording", "a", "b", "equal",
      "differing_runs", "runs": [{"run", "input", "equal", "differences": [{"what",
      "a", "b"}], "a", "b"}], "memory", "notes", "seconds"}} | {"path", "error"}],
      "equal": bool}
    """
    from antler.errors import AntlerError

    try:
        items = _replay(session, Path(path), config_path, against_path, stub=stub,
                        jobs=jobs, fuse=fuse)
    except AntlerError as error:
        raise ReplayError(str(error)) from error
    except (click.ClickException, click.exceptions.Exit):
        raise
    except Exception as error:
        from . import one_line

        raise ReplayError(one_line(error)) from error
    if html_path is not None:
        from antler.replay.html import render_diff_page

        try:
            Path(html_path).write_text(render_diff_page(items), encoding="utf-8")
        except OSError as error:
            raise ReplayError(f"cannot write {html_path}: {error}") from error
    equal = all(item.get("diff") and item["diff"]["equal"] for item in items)
    if as_json:
        from .output import print_json

        print_json({"recordings": items, "equal": equal})
    else:
        _print(items, directory=Path(path).is_dir())
    if any(item.get("error") for item in items):
        raise click.exceptions.Exit(ReplayError.exit_code)
    if not equal:
        raise click.exceptions.Exit(DIFFERS_EXIT_CODE)


def _replay(session: Session, path: Path, config_path: str | None, against_path: str | None,
            *, stub: bool, jobs: int | None, fuse: bool | None) -> list[dict[str, Any]]:
    from antler.replay.suite import recordings_in, run_suite

    if path.is_dir():
        paths = recordings_in(path)
        if not paths:
            raise ReplayError(f"{path}: no recordings (*.yaml) in this directory")
        # The configs are checked once here, so a bad one is one error, not one per file.
        session.config(config_path)
        if against_path:
            session.config(against_path)
        rows = run_suite(paths, config_path, against_path, stub=stub, fuse=fuse, jobs=jobs,
                         manifests=session.manifests, isolated=session.isolated)
        return [{"path": row.path, "diff": row.diff, "error": row.error} for row in rows]
    if not path.exists():
        raise ReplayError(f"{path}: no such recording file or directory")
    from antler.replay.check import check_recording

    config = session.config(config_path)
    against = session.config(against_path) if against_path else None
    diff = check_recording(path, config, against, registry=session.registry(), stub=stub,
                           fuse=fuse)
    return [{"path": str(path), "diff": diff.as_json(), "error": None}]


def _print(items: list[dict[str, Any]], *, directory: bool) -> None:
    from antler.replay.diff import BehaviourDiff, Difference, RunDiff, render_text

    for item in items:
        if item.get("error"):
            click.echo(f"{item['path']}: error: {item['error']}")
            continue
        data = item["diff"]
        if directory and data["equal"]:
            continue  # the summary table says so
        runs = [RunDiff(run["run"] - 1, run["input"], None, None,
                        [Difference(**d) for d in run["differences"]])
                for run in data["runs"]]
        memory = Difference(**data["memory"]) if data.get("memory") else None
        click.echo(render_text(BehaviourDiff(data["recording"], data["a"], data["b"], runs,
                                             memory, list(data.get("notes") or []))))
    if directory:
        from .output import console, table

        summary = table("recording", "behaviour", "runs that differ", "diverged", "seconds",
                        title="Replay suite")
        for item in items:
            data = item.get("diff")
            if data is None:
                summary.add_row(Path(item["path"]).name, "error", "-", "-", "-")
                continue
            diverged = sum(len((run.get(side) or {}).get("divergences") or [])
                           for run in data["runs"] for side in ("a", "b"))
            summary.add_row(Path(item["path"]).name, "equal" if data["equal"] else "differs",
                            f"{data['differing_runs']} of {len(data['runs'])}", str(diverged),
                            f"{data['seconds']:.1f}")
        console().print(summary)
