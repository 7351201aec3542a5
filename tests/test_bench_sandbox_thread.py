"""`bench_sandbox_thread --init-against`: another init, measured beside this tree's."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_sandbox_thread
from benchmarks.bench_sandbox_thread import _init_from, report


def test_a_missing_init_file_is_named_with_how_to_write_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nsinit.py"
    with pytest.raises(SystemExit) as exited:
        bench_sandbox_thread.main(["--init-against", str(missing)])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert str(missing) in said and "git show REV:core/runtime/sandbox/nsinit.py" in said


def test_namespaces_started_meanwhile_read_the_other_init_and_then_this_trees(
        tmp_path: Path) -> None:
    from antler.runtime.sandbox import namespace

    own = namespace._INIT_SOURCE
    other = tmp_path / "nsinit.py"
    with _init_from(other):
        assert namespace._INIT_SOURCE is other
    assert namespace._INIT_SOURCE is own
    with pytest.raises(RuntimeError), _init_from(other):
        raise RuntimeError("a round failed")
    assert namespace._INIT_SOURCE is own
    with _init_from(None):
        assert namespace._INIT_SOURCE is own


def test_the_report_gives_the_other_inits_difference_round_by_round() -> None:
    rounds = 10
    samples = {
        "local": [[0.0, 2.0, 0.0, 0.0]] * rounds,
        "bwrap": [[1.0, 3.0 + i / 10, 0.5, 2.0] for i in range(rounds)],
        # Each round 0.5 ms dearer than bwrap's same round, whatever the round's load.
        "bwrap-other": [[1.0, 3.5 + i / 10, 0.5, 2.0] for i in range(rounds)],
    }
    text = report(samples, "cgroup", rounds)
    assert "bwrap-other" in text
    assert "the other init costs +0.50 ms a thread" in text
    assert "90% interval +0.50 to +0.50 ms" in text
