"""antler.plugin_api.confined: opening beneath a root, with openat2 and with the descriptor walk.

Every case runs twice: with the kernel's ``openat2`` fast path (where it
exists) and with it switched off, so the component walk that interprets
symlinks is tested on every kernel and both give the same answers.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from antler.plugin_api import confined
from antler.plugin_api.paths import PathEscapeError, PathLayout, ThreadPaths


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2":
        if not confined._openat2.usable:
            pytest.skip("openat2 is not available on this kernel")
    else:
        monkeypatch.setattr(confined._openat2, "usable", False)
    return str(request.param)


@pytest.fixture
def thread(tmp_path: Path) -> ThreadPaths:
    skills = tmp_path / "skills"
    (skills / "public" / "demo").mkdir(parents=True)
    (skills / "public" / "demo" / "SKILL.md").write_text("skill text\n")
    paths = PathLayout(tmp_path / "home", skill_roots=(skills,)).thread("u", "t")
    paths.ensure_directories()
    (paths.workspace / "a.txt").write_text("inside\n")
    (paths.outputs / "o.txt").write_text("output\n")
    return paths


def read(paths: ThreadPaths, path: str) -> str:
    fd = confined.place(paths.mapper, path).open(os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        return handle.read().decode()


def write(paths: ThreadPaths, path: str, text: str) -> None:
    fd = confined.place(paths.mapper, path).open(os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                                 make_parents=True)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def test_symlinks_that_stay_inside_are_followed(thread, resolution):
    ws = thread.workspace
    os.symlink("a.txt", ws / "relative")
    os.symlink("../outputs/o.txt", ws / "sibling")
    os.symlink("/mnt/user-data/workspace/a.txt", ws / "virtual")
    os.symlink(str(ws / "a.txt"), ws / "host")
    os.symlink("../outputs", ws / "outdir")
    os.symlink("outdir", ws / "chain")
    assert read(thread, "relative") == "inside\n"
    assert read(thread, "sibling") == "output\n"
    assert read(thread, "virtual") == "inside\n"
    assert read(thread, "host") == "inside\n"
    assert read(thread, "chain/o.txt") == "output\n"
    write(thread, "chain/new/deep.txt", "made")
    assert (thread.outputs / "new" / "deep.txt").read_text() == "made"


def test_symlinks_that_leave_are_refused(thread, resolution, tmp_path):
    ws = thread.workspace
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink("/etc/passwd", ws / "passwd")
    os.symlink(str(tmp_path / "secret.txt"), ws / "absolute")
    os.symlink("../../../../../../../../etc/passwd", ws / "climb")
    os.symlink("../..", ws / "parent")
    os.symlink(str(tmp_path), ws / "dir")
    os.symlink(str(tmp_path / "new.txt"), ws / "dangling-out")
    for name in ("passwd", "absolute", "climb", "parent/t/x", "dir/secret.txt"):
        with pytest.raises(PathEscapeError):
            read(thread, name)
    for name in ("dangling-out", "dir/made.txt", "parent/x.txt"):
        with pytest.raises(PathEscapeError):
            write(thread, name, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "secret.txt", "skills"]


def test_loops_fifos_and_directories_are_clear_errors(thread, resolution):
    ws = thread.workspace
    os.symlink("loop-b", ws / "loop-a")
    os.symlink("loop-a", ws / "loop-b")
    os.mkfifo(ws / "fifo")
    with pytest.raises(OSError) as loop:
        read(thread, "loop-a")
    assert loop.value.errno == errno.ELOOP and loop.value.filename.startswith("/mnt/user-data")
    with pytest.raises(OSError, match="not a regular file"):
        read(thread, "fifo")  # and never blocks waiting for a writer
    with pytest.raises(IsADirectoryError, match="is a directory"):
        read(thread, "/mnt/user-data/outputs")
    with pytest.raises(NotADirectoryError, match=r"a\.txt is a file, so it cannot contain"):
        write(thread, "a.txt/inner.txt", "x")
    with pytest.raises(FileNotFoundError) as missing:
        read(thread, "nope/none.txt")
    assert missing.value.filename == "/mnt/user-data/workspace/nope"


def test_a_dangling_symlink_inside_creates_its_target_inside(thread, resolution):
    os.symlink("later.txt", thread.workspace / "pointer")
    write(thread, "pointer", "via link")
    assert (thread.workspace / "later.txt").read_text() == "via link"
    assert os.path.islink(thread.workspace / "pointer")


def test_skills_are_read_beneath_their_root_and_never_written(thread, resolution, tmp_path):
    skill = tmp_path / "skills" / "public" / "demo"
    os.symlink(str(tmp_path / "home"), skill / "escape")
    assert read(thread, "/mnt/skills/public/demo/SKILL.md") == "skill text\n"
    with pytest.raises(PathEscapeError):
        read(thread, "/mnt/skills/public/demo/escape/users/u/threads/t/user-data/workspace/a.txt")
    with pytest.raises(PermissionError, match="read-only"):
        write(thread, "/mnt/skills/public/demo/SKILL.md", "changed")
    assert (skill / "SKILL.md").read_text() == "skill text\n"


def test_the_walk_lists_symlinks_without_entering_them(thread, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "hidden.txt").write_text("x")
    os.symlink(str(outside), thread.workspace / "out")
    (thread.workspace / "sub").mkdir()
    (thread.workspace / "sub" / "b.txt").write_text("b")
    root = confined.place(thread.mapper, "/mnt/user-data/workspace")
    fd = root.open(os.O_RDONLY, directory=True)
    try:
        entries = {e.relative: e.kind for e in confined.walk(fd, 5)}
    finally:
        os.close(fd)
    assert entries == {"a.txt": "file", "out": "symlink", "sub": "dir", "sub/b.txt": "file"}


def test_openat2_is_used_where_the_kernel_has_it():
    # Linux 5.6+ on x86_64 and aarch64 has it; elsewhere the walk is the only path.
    release = tuple(int(part) for part in os.uname().release.split(".")[:2] if part.isdigit())
    if os.uname().sysname != "Linux" or release < (5, 6) or confined._SYS_OPENAT2 is None:
        pytest.skip("no openat2 here")
    assert confined._openat2.usable
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as refused:
            confined._openat2(fd, "proc/self/root/etc/passwd", os.O_RDONLY, 0)
        assert refused.value.errno in (errno.ELOOP, errno.EXDEV)
        opened = confined._openat2(fd, "etc", os.O_RDONLY | os.O_DIRECTORY, 0)
        assert stat.S_ISDIR(os.fstat(opened).st_mode)
        os.close(opened)
    finally:
        os.close(fd)


def test_hostile_sizes_are_bounded(thread, resolution):
    """A path nested past MAX_NESTING and a huge sparse file fail clearly, holding nothing."""
    from antler.runtime.sandbox.local import LocalSandboxProvider

    deep = thread.workspace
    for _ in range(confined.MAX_NESTING + 2):
        deep = deep / "d"
    deep.mkdir(parents=True)
    os.symlink("d", thread.workspace / "via")  # a symlink on the way forces the walk
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError) as nested:
        read(thread, "via/" + "d/" * (confined.MAX_NESTING + 1) + "x")
    assert nested.value.errno == errno.ENAMETOOLONG
    assert len(os.listdir("/proc/self/fd")) == before  # every descriptor closed again
    with open(thread.workspace / "sparse.bin", "wb") as handle:
        handle.truncate(8 << 30)
    provider = LocalSandboxProvider()
    try:
        sandbox = provider.get(provider.acquire(thread))
        with pytest.raises(Exception, match="more than the 64 MiB the file tools read"):
            sandbox.read_bytes("sparse.bin")
    finally:
        provider.shutdown()
