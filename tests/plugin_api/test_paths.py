"""Per-thread paths: id validation, lazy layout, and the virtual path boundary."""

from __future__ import annotations

import json
import os
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from antler.plugin_api.paths import (
    ANTLER_HOME_ENV,
    VIRTUAL_ROOT,
    InvalidIdentifierError,
    PathEscapeError,
    PathLayout,
    ThreadPaths,
    VirtualPathMapper,
    resolve_base,
    validate_id,
)

# -- validate_id --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["alice", "thread-42", "a.b_c@d-e", "A" * 128, "...", "x", "user@example.com"]
)
def test_validate_id_accepts_safe_ids(value: str) -> None:
    assert validate_id("user id", value) == value


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "empty"),
        (".", "'.' and '..'"),
        ("..", "'.' and '..'"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("/etc", "absolute path"),
        ("\\\\server\\share", "absolute path"),
        ("a\x00b", "control character"),
        ("tab\there", "control character"),
        ("line\n", "control character"),
        ("x" * 500, "500 characters long"),
        ("x" * 129, "129 characters long"),
        ("\u0430lice", "outside the allowed set"),  # Cyrillic look-alike of 'a'
        ("\uff41lice", "outside the allowed set"),  # fullwidth 'a'
        ("e\u0301", "outside the allowed set"),  # combining accent
        ("alice\u202e", "outside the allowed set"),  # right-to-left override
        ("al ice", "outside the allowed set"),
        ("C:evil", "outside the allowed set"),
        ("~root", "outside the allowed set"),
    ],
)
def test_validate_id_rejects_hostile_ids(value: str, rule: str) -> None:
    with pytest.raises(InvalidIdentifierError) as caught:
        validate_id("thread id", value)
    message = str(caught.value)
    assert "thread id" in message
    assert rule in message
    # The message tells how to fix it, not only what is wrong.
    assert "letters" in message and "thread-42" in message


def test_validate_id_error_is_a_value_error_and_truncates_long_values() -> None:
    with pytest.raises(ValueError) as caught:
        validate_id("user id", "y" * 500)
    message = str(caught.value)
    assert "user id" in message
    assert "y" * 100 not in message  # the offending value is shown truncated
    assert "(500 chars)" in message


def test_validate_id_rejects_non_strings() -> None:
    with pytest.raises(InvalidIdentifierError, match="must be a string, not int"):
        not_a_string: Any = 42
        validate_id("user id", not_a_string)


@given(st.text(min_size=1, max_size=40))
def test_accepted_ids_never_leave_their_directory(value: str) -> None:
    """Whatever an id is, if it is accepted it is exactly one plain path component."""
    try:
        validate_id("thread id", value)
    except InvalidIdentifierError:
        return
    parts = Path(value).parts
    assert parts == (value,)
    assert value not in {".", ".."}
    assert value.isascii() and value.isprintable()


# -- layout -------------------------------------------------------------------------------


def test_layout_computes_thread_paths_without_touching_disk(tmp_path: Path) -> None:
    base = tmp_path / "home"
    paths = PathLayout(base).thread("alice", "t1")

    user_data = base / "users" / "alice" / "threads" / "t1" / "user-data"
    assert paths.user_data == user_data
    assert paths.workspace == user_data / "workspace"
    assert paths.uploads == user_data / "uploads"
    assert paths.outputs == user_data / "outputs"
    assert (paths.base, paths.user_id, paths.thread_id) == (base, "alice", "t1")
    assert not base.exists()  # a pure chat turn must not write anything


def test_layout_validates_both_ids(tmp_path: Path) -> None:
    layout = PathLayout(tmp_path)
    with pytest.raises(InvalidIdentifierError, match="user id"):
        layout.thread("..", "t1")
    with pytest.raises(InvalidIdentifierError, match="thread id"):
        layout.thread("alice", "a/b")
    with pytest.raises(InvalidIdentifierError, match="thread id"):
        ThreadPaths(base=tmp_path, user_id="alice", thread_id="/etc")


def test_thread_paths_are_immutable_values(tmp_path: Path) -> None:
    first = PathLayout(tmp_path).thread("alice", "t1")
    assert first == PathLayout(tmp_path).thread("alice", "t1")
    assert first != PathLayout(tmp_path).thread("alice", "t2")
    field_name = "thread_id"
    with pytest.raises(FrozenInstanceError):
        setattr(first, field_name, "t2")


def test_ensure_directories_creates_all_three_once(tmp_path: Path) -> None:
    paths = PathLayout(tmp_path).thread("alice", "t1")

    assert paths.ensure_directories() is True
    assert all(d.is_dir() for d in (paths.workspace, paths.uploads, paths.outputs))
    marker = paths.workspace / "keep.txt"
    marker.write_text("data")

    assert paths.ensure_directories() is False  # nothing to do the second time
    assert marker.read_text() == "data"

    paths.outputs.rmdir()
    assert paths.ensure_directories() is True  # a removed directory comes back
    assert paths.outputs.is_dir()


def test_as_state_is_json_safe(tmp_path: Path) -> None:
    paths = PathLayout(tmp_path).thread("alice", "t1")
    state = paths.as_state()
    assert json.loads(json.dumps(state)) == {
        "workspace_path": str(paths.workspace),
        "uploads_path": str(paths.uploads),
        "outputs_path": str(paths.outputs),
    }


def test_resolve_base_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ANTLER_HOME_ENV, raising=False)
    assert resolve_base(None) == tmp_path / ".antler"

    monkeypatch.setenv(ANTLER_HOME_ENV, str(tmp_path / "from-env"))
    assert resolve_base(None) == tmp_path / "from-env"

    assert resolve_base(tmp_path / "explicit") == tmp_path / "explicit"
    assert resolve_base("relative") == tmp_path / "relative"  # made absolute
    assert not (tmp_path / ".antler").exists()


# -- virtual path mapping -----------------------------------------------------------------


@pytest.fixture
def paths(tmp_path: Path) -> ThreadPaths:
    thread = PathLayout(tmp_path / "home").thread("alice", "t1")
    thread.ensure_directories()
    return thread


def test_to_host_maps_virtual_and_relative_paths(paths: ThreadPaths) -> None:
    mapper = VirtualPathMapper(paths)
    assert mapper.to_host(f"{VIRTUAL_ROOT}/workspace/a/b.txt") == paths.workspace / "a/b.txt"
    assert mapper.to_host(f"{VIRTUAL_ROOT}/uploads/in.pdf") == paths.uploads / "in.pdf"
    assert mapper.to_host(f"{VIRTUAL_ROOT}/outputs") == paths.outputs
    assert mapper.to_host(VIRTUAL_ROOT) == paths.user_data
    assert mapper.to_host("notes.md") == paths.workspace / "notes.md"
    assert mapper.to_host("./sub/../notes.md") == paths.workspace / "notes.md"
    # Leaving the workspace for a sibling directory stays inside the thread.
    assert mapper.to_host("../outputs/report.md") == paths.outputs / "report.md"
    # A host path inside the thread is accepted as is.
    assert mapper.to_host(paths.uploads / "x") == paths.uploads / "x"


@pytest.mark.parametrize(
    "hostile",
    [
        "../../../../etc/passwd",
        f"{VIRTUAL_ROOT}/../../etc/passwd",
        f"{VIRTUAL_ROOT}/workspace/../../..",
        "/etc/passwd",
        "/mnt/user-data-evil/x",
        "/mnt/other",
        "",
        "a\x00b",
    ],
)
def test_to_host_refuses_escapes(paths: ThreadPaths, hostile: str) -> None:
    with pytest.raises(PathEscapeError) as caught:
        VirtualPathMapper(paths).to_host(hostile)
    assert isinstance(caught.value, PermissionError)
    message = str(caught.value)
    assert "Refusing" in message
    assert str(paths.base) not in message  # the refusal does not reveal host paths


def test_to_host_refuses_another_threads_host_path(tmp_path: Path, paths: ThreadPaths) -> None:
    other = PathLayout(paths.base).thread("alice", "t2")
    with pytest.raises(PathEscapeError, match="outside this thread"):
        paths.mapper.to_host(other.workspace / "secret.txt")


def test_to_host_refuses_symlink_pointing_outside(tmp_path: Path, paths: ThreadPaths) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (paths.workspace / "link").symlink_to(outside, target_is_directory=True)
    (paths.workspace / "filelink").symlink_to(outside / "secret.txt")

    mapper = paths.mapper
    for path in ("link/secret.txt", f"{VIRTUAL_ROOT}/workspace/link", "filelink", "link/new.txt"):
        with pytest.raises(PathEscapeError, match="symlink"):
            mapper.to_host(path)


def test_to_host_allows_symlink_that_stays_inside(paths: ThreadPaths) -> None:
    (paths.outputs / "report.md").write_text("ok")
    (paths.workspace / "out").symlink_to(paths.outputs, target_is_directory=True)
    assert paths.mapper.to_host("out/report.md") == paths.workspace / "out" / "report.md"


def test_to_virtual_reverses_to_host(paths: ThreadPaths) -> None:
    mapper = paths.mapper
    for virtual in (
        f"{VIRTUAL_ROOT}/workspace/a/b.txt",
        f"{VIRTUAL_ROOT}/uploads",
        f"{VIRTUAL_ROOT}/outputs/x.csv",
        VIRTUAL_ROOT,
    ):
        assert mapper.to_virtual(mapper.to_host(virtual)) == virtual


def test_to_virtual_is_idempotent_on_virtual_paths(paths: ThreadPaths) -> None:
    mapper = paths.mapper
    assert (
        mapper.to_virtual(f"{VIRTUAL_ROOT}/outputs/./a/../b.txt") == f"{VIRTUAL_ROOT}/outputs/b.txt"
    )
    assert mapper.to_virtual(VIRTUAL_ROOT) == VIRTUAL_ROOT
    with pytest.raises(PathEscapeError):
        mapper.to_virtual(f"{VIRTUAL_ROOT}/../etc")


def test_to_virtual_refuses_paths_outside(tmp_path: Path, paths: ThreadPaths) -> None:
    with pytest.raises(PathEscapeError, match="no virtual name"):
        paths.mapper.to_virtual(tmp_path / "elsewhere")


def test_to_virtual_accepts_resolved_host_paths(tmp_path: Path) -> None:
    """A base behind a symlink (like /tmp on macOS) still maps back to virtual paths."""
    real = tmp_path / "real"
    real.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(real, target_is_directory=True)
    paths = PathLayout(alias).thread("alice", "t1")
    paths.ensure_directories()
    resolved_file = Path(os.path.realpath(paths.outputs)) / "x.txt"
    assert paths.mapper.to_virtual(resolved_file) == f"{VIRTUAL_ROOT}/outputs/x.txt"
    assert paths.mapper.to_host("../outputs/x.txt") == paths.outputs / "x.txt"


def test_virtualize_text_hides_host_paths(paths: ThreadPaths) -> None:
    text = f"wrote {paths.outputs}/r.md and {paths.workspace}\nroot={paths.user_data}"
    result = paths.mapper.virtualize_text(text)
    assert result == (
        f"wrote {VIRTUAL_ROOT}/outputs/r.md and {VIRTUAL_ROOT}/workspace\nroot={VIRTUAL_ROOT}"
    )
    assert str(paths.base) not in result


def test_hostify_text_rewrites_only_standalone_virtual_paths(paths: ThreadPaths) -> None:
    command = (
        f"cat {VIRTUAL_ROOT}/uploads/a.txt > '{VIRTUAL_ROOT}/outputs/b.txt'; "
        f"ls {VIRTUAL_ROOT}; echo /x{VIRTUAL_ROOT}/y {VIRTUAL_ROOT}-old"
    )
    result = paths.mapper.hostify_text(command)
    assert result == (
        f"cat {paths.uploads}/a.txt > '{paths.outputs}/b.txt'; "
        f"ls {paths.user_data}; echo /x{VIRTUAL_ROOT}/y {VIRTUAL_ROOT}-old"
    )


@given(st.lists(st.sampled_from(["ROOT", "ROOT-old", "ROOT/x", "/", "a", ".", " ", "ROOTROOT"]),
                max_size=8))
def test_replacing_the_host_root_matches_the_pattern_it_stands_for(pieces: list[str]) -> None:
    import re

    from antler.plugin_api.paths import _PATH_CHAR, _replace_root

    root = "/base/t/user-data"
    text = "".join(pieces).replace("ROOT", root)
    pattern = re.compile(rf"{re.escape(root)}(?!{_PATH_CHAR})")
    assert _replace_root(text, root, "/mnt/user-data") == pattern.sub("/mnt/user-data", text)


# A tree whose paths go through absolute and relative links, chains, a loop and a dangling
# link: the kernel's answer for a directory must be `os.path.realpath`'s, and any path
# that is not a reachable directory must get `os.path.realpath`'s answer as well.
_TREE_LINKS = {"up": "..", "abs": "{root}/d1", "rel": "d1/d2", "chain": "rel", "loop": "loop",
               "dangling": "missing/dir", "file_link": "d1/f", "out": "/tmp"}


@given(st.lists(st.sampled_from(["d1", "d2", "up", "abs", "rel", "chain", "loop", "dangling",
                                 "file_link", "out", "..", ".", "f", "missing"]),
                min_size=0, max_size=6))
def test_a_directory_resolved_by_the_kernel_is_its_realpath(tmp_path_factory: Any,
                                                            parts: list[str]) -> None:
    from antler.plugin_api import paths as paths_module

    root = tmp_path_factory.getbasetemp() / "resolve-tree"
    if not root.exists():
        (root / "d1" / "d2").mkdir(parents=True)
        (root / "d1" / "f").write_text("x")
        for name, target in _TREE_LINKS.items():
            os.symlink(target.format(root=root), root / "d1" / "d2" / name
                       if name == "up" else root / name)
    path = Path(os.path.join(root, *parts))
    assert paths_module._resolved_directory(path) == Path(os.path.realpath(path))
