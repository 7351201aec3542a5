"""antler.runtime.sandbox.search: glob translation, regex errors and every bound's note."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from antler.runtime.sandbox import search
from antler.runtime.sandbox.search import SearchPatternError, compile_glob, compile_regex


@pytest.mark.parametrize(("pattern", "matches", "misses"), [
    ("*.py", ["a.py", ".hidden.py"], ["src/a.py", "a.pyc"]),
    ("**/*.py", ["a.py", "src/a.py", "src/deep/b.py"], ["a.pyc", "src/a.txt"]),
    ("src/**", ["src/a", "src/x/y"], ["other/a"]),
    ("src/*/c.txt", ["src/b/c.txt"], ["src/c.txt", "src/b/d/c.txt"]),
    ("file?.[ch]", ["file1.c", "filex.h"], ["file12.c", "file1.o"]),
    ("[!a]*", ["b", "zeta"], ["alpha"]),
    ("a[.txt", ["a[.txt"], ["a.txt"]),
])
def test_glob_patterns_match_relative_paths(pattern, matches, misses):
    regex, _ = compile_glob(pattern)
    assert [path for path in matches if regex.match(path)] == matches
    assert [path for path in misses if regex.match(path)] == []


def test_bad_regexes_are_clear_errors():
    with pytest.raises(SearchPatternError, match=r"Invalid regular expression '\(a': "
                                                 r"missing \) at position 2.*literal=true"):
        compile_regex("(a", literal=False, case_sensitive=False)
    compile_regex("(a", literal=True, case_sensitive=False)  # as plain text: fine


@pytest.mark.parametrize(("pattern", "line"), [
    ("(a|aa)+$", "a" * 40 + "!"),        # exponential
    ("a.*b.*c", "ab" * 30_000),          # cubic: hours in re on this line
])
def test_a_regex_that_backtracks_badly_stops_at_the_time_bound(tmp_path, monkeypatch,
                                                               pattern, line):
    (tmp_path / "hostile.txt").write_text(f"{line}\nafter\n")
    (tmp_path / "later.txt").write_text("abc\n")
    monkeypatch.setattr(search, "TIME_LIMIT_SECONDS", 0.3)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = search.grep(fd, "/mnt/user-data", pattern)
    finally:
        os.close(fd)
    assert found.truncated and found.matches == []
    assert found.notes == ["[output truncated: the search stopped after 0.3s; narrow `path` or "
                           "`glob`, or simplify the pattern]"]


@pytest.fixture
def tree(tmp_path: Path) -> int:
    for index in range(6):
        (tmp_path / f"f{index}.txt").write_text("needle\n" * 3)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_the_time_bound_stops_the_search_with_a_note(tree, monkeypatch):
    monkeypatch.setattr(search, "TIME_LIMIT_SECONDS", 0.0)
    found = search.grep(tree, "/mnt/user-data", "needle")
    assert found.truncated and found.notes[0].startswith(
        "[output truncated: the search stopped after 0s; narrow `path` or `glob`")


def test_byte_bounds_are_noted(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(search, "MAX_FILE_BYTES", 10)
    partial = search.grep(tree, "/mnt/user-data", "needle")
    assert len(partial.matches) == 6   # the first line of each file only
    assert "[6 file(s) larger than 10 bytes were searched in their first part only" in \
        partial.notes[0]
    monkeypatch.setattr(search, "MAX_TOTAL_BYTES", 25)
    total = search.grep(tree, "/mnt/user-data", "needle")
    assert total.truncated
    assert any("stopped after reading 25 bytes" in note for note in total.notes)


def test_the_walk_is_bounded(tree, monkeypatch):
    monkeypatch.setattr(search, "MAX_ENTRIES", 3)
    found = search.glob(tree, "/mnt/user-data", "*")
    assert len(found.matches) == 3 and found.truncated
    assert "the walk stopped after 3 entries" in found.notes[0]


def test_each_matching_line_is_reported_once_where_the_match_starts(tmp_path):
    (tmp_path / "crlf.txt").write_bytes(b"e e e\r\nnone here\r\nlast\r\n")
    (tmp_path / "split.txt").write_text("foo\nbar\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        every = search.grep(fd, "/v", "e", glob="crlf.txt").matches
        ends = search.grep(fd, "/v", "e$", glob="crlf.txt").matches
        across = search.grep(fd, "/v", r"foo\sbar", glob="split.txt").matches
    finally:
        os.close(fd)
    assert every == ["/v/crlf.txt:1: e e e", "/v/crlf.txt:2: none here"]
    assert ends == ["/v/crlf.txt:1: e e e", "/v/crlf.txt:2: none here"]   # not "last"
    assert across == ["/v/split.txt:1: foo"]   # reported where it starts
