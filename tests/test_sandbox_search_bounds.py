"""antler.runtime.sandbox.search: glob translation, the regex vetting and every bound's note."""

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


@pytest.mark.parametrize("pattern", [
    "todo", r"def \w+\(", "[a-z]+(-[a-z]+)*", r"(\d+,)*\d+", r"\w+(\.\w+)*", "(foo|bar)+",
    r"(\d{1,3}\.){3}\d{1,3}", "(a+-)*", ".*error.*",
])
def test_ordinary_regexes_are_accepted(pattern):
    compile_regex(pattern, literal=False, case_sensitive=False)


@pytest.mark.parametrize(("pattern", "why"), [
    ("(a+)+$", "repetition inside another"),
    (r"(\w+\s?)+$", "repetition inside another"),
    ("(-[a-z-]+)*", "repetition inside another"),   # the separator is no separator
    (r"(x)\1", "backreference"),
    ("(?P<q>['\"]).*(?P=q)", "backreference"),
])
def test_regexes_that_can_backtrack_exponentially_are_refused(pattern, why):
    with pytest.raises(SearchPatternError, match=why):
        compile_regex(pattern, literal=False, case_sensitive=False)
    compile_regex(pattern, literal=True, case_sensitive=False)  # as plain text: fine


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


def test_long_lines_are_matched_in_their_first_part(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(search, "MAX_MATCH_LINE_CHARS", 50)
    (tmp_path / "long.txt").write_text("x" * 100 + "late\n" + "early" + "x" * 100 + "\n")
    found = search.grep(tree, "/mnt/user-data", "late|early", glob="long.txt")
    assert [m.split(":")[1] for m in found.matches] == ["2"]
    assert found.matches[0].endswith("early" + "x" * 100)   # shown whole (up to 300)
    assert "[2 line(s) longer than 50 characters" in found.notes[0]


def test_the_walk_is_bounded(tree, monkeypatch):
    monkeypatch.setattr(search, "MAX_ENTRIES", 3)
    found = search.glob(tree, "/mnt/user-data", "*")
    assert len(found.matches) == 3 and found.truncated
    assert "the walk stopped after 3 entries" in found.notes[0]
