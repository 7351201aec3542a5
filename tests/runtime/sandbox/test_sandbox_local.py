"""The local sandbox provider: lifecycle, commands, file operations and the path boundary."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from antler.plugin_api.paths import VIRTUAL_ROOT, PathEscapeError, PathLayout, ThreadPaths
from antler.plugin_api.sandbox import (
    CommandResult,
    Sandbox,
    SandboxClosedError,
    SandboxNotFoundError,
    SandboxProvider,
    SandboxProviderLoadError,
    UnknownSandboxProviderError,
    available_sandbox_providers,
    load_sandbox_provider,
)
from antler.runtime.sandbox.local import LocalSandbox, LocalSandboxProvider


@pytest.fixture
def layout(tmp_path: Path) -> PathLayout:
    return PathLayout(tmp_path / "home")


@pytest.fixture
def paths(layout: PathLayout) -> ThreadPaths:
    return layout.thread("alice", "t1")


@pytest.fixture
def provider() -> LocalSandboxProvider:
    provider = LocalSandboxProvider(default_timeout=10)
    yield provider
    provider.shutdown()


@pytest.fixture
def sandbox(provider: LocalSandboxProvider, paths: ThreadPaths) -> Sandbox:
    return provider.get(provider.acquire(paths))


# -- lifecycle ----------------------------------------------------------------------------


def test_acquire_is_lazy_idempotent_and_creates_directories(
    provider: LocalSandboxProvider, layout: PathLayout
) -> None:
    paths = layout.thread("alice", "t1")
    assert not layout.base.exists()  # nothing exists before the first tool use

    first = provider.acquire(paths)
    assert all(d.is_dir() for d in (paths.workspace, paths.uploads, paths.outputs))
    # A later turn builds a fresh ThreadPaths for the same thread and gets the same sandbox.
    assert provider.acquire(layout.thread("alice", "t1")) == first
    assert provider.get(first) is provider.get(provider.acquire(paths))

    other = provider.acquire(layout.thread("alice", "t2"))
    assert other != first
    assert provider.get(other) is not provider.get(first)


def test_same_ids_under_two_bases_get_distinct_sandboxes(
    provider: LocalSandboxProvider, tmp_path: Path
) -> None:
    one = provider.acquire(PathLayout(tmp_path / "a").thread("alice", "t1"))
    two = provider.acquire(PathLayout(tmp_path / "b").thread("alice", "t1"))
    assert one != two


def test_release_keeps_the_id_for_the_threads_next_run(
    provider: LocalSandboxProvider, paths: ThreadPaths
) -> None:
    sandbox_id = provider.acquire(paths)
    sandbox = provider.get(sandbox_id)
    sandbox.write_file("state.txt", "from turn 1")
    provider.release(sandbox_id)

    # Idle, it is dropped (tests/runtime/sandbox/test_sandbox_retention.py); the id stays
    # the thread's, and the next run's sandbox, made again, has the thread's files.
    assert sandbox.in_use is False
    assert provider.acquire(paths) == sandbox_id
    assert provider.get(sandbox_id).in_use is True
    assert provider.get(sandbox_id).read_file("state.txt") == "from turn 1"


def test_existing_sandbox_id_looks_up_without_creating(
    provider: LocalSandboxProvider, layout: PathLayout
) -> None:
    paths = layout.thread("alice", "t1")
    assert provider.existing_sandbox_id(paths) is None
    assert not layout.base.exists()  # looking up created nothing
    sandbox_id = provider.acquire(paths)
    assert provider.existing_sandbox_id(layout.thread("alice", "t1")) == sandbox_id
    assert provider.existing_sandbox_id(layout.thread("bob", "t1")) is None


def test_the_default_existing_sandbox_id_acquires(
    provider: LocalSandboxProvider, layout: PathLayout
) -> None:
    # A provider that does not override it answers by acquiring (the base class's way).
    paths = layout.thread("alice", "t1")
    assert SandboxProvider.existing_sandbox_id(provider, paths) == provider.acquire(paths)


def test_unknown_sandbox_id_is_reported(provider: LocalSandboxProvider) -> None:
    with pytest.raises(SandboxNotFoundError, match="no such sandbox: 'nope'"):
        provider.get("nope")
    with pytest.raises(SandboxNotFoundError):
        provider.release("nope")


def test_shutdown_tears_everything_down(provider: LocalSandboxProvider, paths: ThreadPaths) -> None:
    sandbox_id = provider.acquire(paths)
    sandbox = provider.get(sandbox_id)
    provider.shutdown()

    with pytest.raises(SandboxNotFoundError, match="shut down"):
        provider.get(sandbox_id)
    with pytest.raises(SandboxClosedError):
        provider.acquire(paths)
    with pytest.raises(SandboxClosedError):
        sandbox.execute_command("true")
    with pytest.raises(SandboxClosedError):
        sandbox.read_file("x")


def test_shutdown_kills_running_commands(provider: LocalSandboxProvider, sandbox: Sandbox) -> None:
    results: list[CommandResult] = []
    worker = threading.Thread(target=lambda: results.append(sandbox.execute_command("sleep 30")))
    assert isinstance(sandbox, LocalSandbox)
    worker.start()
    deadline = time.monotonic() + 30
    while not sandbox._running:  # the command runs: shutdown must kill it
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    provider.shutdown()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert time.monotonic() - started < 5
    assert results and results[0].exit_code != 0


def test_concurrent_acquire_hands_out_one_sandbox(
    provider: LocalSandboxProvider, layout: PathLayout
) -> None:
    ids: list[str] = []
    threads = [
        threading.Thread(target=lambda: ids.append(provider.acquire(layout.thread("bob", "t"))))
        for _ in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 16 and len(set(ids)) == 1


def test_provider_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="default_timeout"):
        LocalSandboxProvider(default_timeout=0)
    with pytest.raises(ValueError, match="max_output_bytes"):
        LocalSandboxProvider(max_output_bytes=0)


# -- loading by name ----------------------------------------------------------------------


def test_load_local_provider_by_name() -> None:
    assert "local" in available_sandbox_providers()
    provider = load_sandbox_provider("local", default_timeout=7)
    assert isinstance(provider, LocalSandboxProvider)
    assert isinstance(provider, SandboxProvider)
    assert provider.default_timeout == 7


def test_unknown_provider_name_suggests_the_closest() -> None:
    with pytest.raises(UnknownSandboxProviderError) as caught:
        load_sandbox_provider("locl")
    message = str(caught.value)
    assert "'locl'" in message
    assert "Did you mean 'local'?" in message
    assert "Available providers: 'bwrap', 'local'" in message
    assert "antler.sandbox_providers" in message


def test_unknown_provider_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(UnknownSandboxProviderError) as caught:
        load_sandbox_provider("kubernetes-cluster")
    assert "Did you mean" not in str(caught.value)


def test_provider_construction_failure_is_explained() -> None:
    with pytest.raises(SandboxProviderLoadError, match=r"'local'.*failed to load.*bogus"):
        load_sandbox_provider("local", bogus=1)


# -- commands -----------------------------------------------------------------------------


def test_command_runs_in_workspace_with_virtual_paths(sandbox: Sandbox, paths: ThreadPaths) -> None:
    (paths.uploads / "in.txt").write_text("hello\n")
    result = sandbox.execute_command(
        f"pwd; echo $HOME; cat {VIRTUAL_ROOT}/uploads/in.txt > {VIRTUAL_ROOT}/outputs/out.txt; "
        f"ls {VIRTUAL_ROOT}/outputs; readlink -f out 2>/dev/null; echo '{paths.outputs}'"
    )
    assert result.ok, result
    assert result.stdout.splitlines() == [
        f"{VIRTUAL_ROOT}/workspace",
        f"{VIRTUAL_ROOT}/workspace",
        "out.txt",
        f"{VIRTUAL_ROOT}/workspace/out",
        f"{VIRTUAL_ROOT}/outputs",
    ]
    assert (paths.outputs / "out.txt").read_text() == "hello\n"
    assert str(paths.base) not in result.stdout


def test_command_reports_exit_code_and_stderr(sandbox: Sandbox, paths: ThreadPaths) -> None:
    result = sandbox.execute_command("echo oops >&2; ls missing-file; exit 3")
    assert result.exit_code == 3
    assert not result.ok and not result.timed_out
    assert "oops" in result.stderr
    assert "missing-file" in result.stderr
    assert str(paths.base) not in result.stderr


def test_command_environment_is_minimal(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    result = sandbox.execute_command("env")
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    assert "sk-should-not-leak" not in result.stdout
    assert {"PATH", "HOME", "LANG"} <= names
    assert "OPENAI_API_KEY" not in names
    assert f"HOME={VIRTUAL_ROOT}/workspace" in result.stdout


def test_command_timeout_kills_process_group(sandbox: Sandbox, paths: ThreadPaths) -> None:
    started = time.monotonic()
    result = sandbox.execute_command("sleep 30 & sleep 30; echo never", timeout=0.3)
    assert time.monotonic() - started < 15  # a hang guard, not a speed check
    assert result.timed_out
    assert not result.ok
    assert "never" not in result.stdout
    assert "timed out after 0.3s" in result.stderr


def test_a_command_that_closes_its_output_still_times_out(sandbox: Sandbox) -> None:
    started = time.monotonic()
    # Time enough for the shell to say "before" on a loaded machine.
    result = sandbox.execute_command("echo before; exec >&- 2>&-; sleep 30", timeout=2)
    assert time.monotonic() - started < 15  # a hang guard, not a speed check
    assert result.timed_out and result.stdout == "before\n"


def test_background_process_cannot_hang_the_call(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = sandbox.execute_command("sleep 30 & echo started")
    assert time.monotonic() - started < 15  # a hang guard, not a speed check
    assert result.stdout == "started\n"
    assert result.exit_code == 0 and not result.timed_out


def test_default_timeout_applies(provider: LocalSandboxProvider, tmp_path: Path) -> None:
    quick = LocalSandboxProvider(default_timeout=0.2)
    try:
        sandbox = quick.get(quick.acquire(PathLayout(tmp_path).thread("a", "b")))
        assert sandbox.execute_command("sleep 5").timed_out
        with pytest.raises(ValueError, match="positive"):
            sandbox.execute_command("true", timeout=0)
    finally:
        quick.shutdown()


def test_output_is_capped_without_leaking_host_paths(tmp_path: Path) -> None:
    capped = LocalSandboxProvider(max_output_bytes=50)
    try:
        paths = PathLayout(tmp_path / "home").thread("alice", "t1")
        sandbox = capped.get(capped.acquire(paths))
        big = sandbox.execute_command("head -c 100000 /dev/zero | tr '\\0' y")
        assert big.stdout.startswith("y" * 50)
        assert "[output truncated: 99950 more bytes not shown]" in big.stdout
        assert len(big.stdout) < 120

        # The cut never splits a multi-byte character.
        # 1 + 100 * 2 bytes; 49 fit, as the 50th byte would split an "e-acute".
        accented = sandbox.execute_command("printf 'a'; printf '\\303\\251%.0s' $(seq 100)")
        shown, note = accented.stdout.split("\n", 1)
        assert shown == "a" + "\u00e9" * 24
        assert note == "[output truncated: 152 more bytes not shown]"

        # A host path straddling the cap is rewritten before the cut, so what is
        # shown is a prefix of the virtual output, never a fragment of a host path.
        for pad in range(1, 50, 6):
            result = sandbox.execute_command(f"printf '%{pad}s'; pwd; pwd")
            shown, note, _ = result.stdout.partition("\n[output truncated")
            assert note
            assert len(shown) == 50
            assert (" " * pad + f"{VIRTUAL_ROOT}/workspace\n" * 2).startswith(shown)
    finally:
        capped.shutdown()


def test_command_recreates_deleted_directories(sandbox: Sandbox, paths: ThreadPaths) -> None:
    import shutil

    shutil.rmtree(paths.user_data)
    result = sandbox.execute_command("pwd")
    assert result.ok
    assert paths.workspace.is_dir()


# -- file operations ----------------------------------------------------------------------


def test_write_read_append_and_list(sandbox: Sandbox, paths: ThreadPaths) -> None:
    sandbox.write_file(f"{VIRTUAL_ROOT}/workspace/src/app.py", "print('hi')\n")
    sandbox.write_file("src/app.py", "print('bye')\n", append=True)
    sandbox.write_file(f"{VIRTUAL_ROOT}/outputs/deep/er/report.md", "# Report")

    assert (paths.workspace / "src" / "app.py").read_text() == "print('hi')\nprint('bye')\n"
    assert sandbox.read_file("src/app.py") == "print('hi')\nprint('bye')\n"
    assert sandbox.read_bytes(f"{VIRTUAL_ROOT}/outputs/deep/er/report.md") == b"# Report"

    sandbox.write_file("src/app.py", "replaced")
    assert sandbox.read_file("src/app.py") == "replaced"

    assert sandbox.list_dir(VIRTUAL_ROOT, max_depth=1) == [
        f"{VIRTUAL_ROOT}/outputs/",
        f"{VIRTUAL_ROOT}/uploads/",
        f"{VIRTUAL_ROOT}/workspace/",
    ]
    assert sandbox.list_dir(f"{VIRTUAL_ROOT}/outputs") == [
        f"{VIRTUAL_ROOT}/outputs/deep/",
        f"{VIRTUAL_ROOT}/outputs/deep/er/",
    ]
    assert sandbox.list_dir(f"{VIRTUAL_ROOT}/outputs", max_depth=3)[-1] == (
        f"{VIRTUAL_ROOT}/outputs/deep/er/report.md"
    )


def test_read_file_replaces_undecodable_bytes(sandbox: Sandbox, paths: ThreadPaths) -> None:
    (paths.workspace / "bin.dat").write_bytes(b"ok\xff\xfe")
    assert sandbox.read_bytes("bin.dat") == b"ok\xff\xfe"
    assert sandbox.read_file("bin.dat") == "ok\ufffd\ufffd"


def test_file_errors_name_virtual_paths_only(sandbox: Sandbox, paths: ThreadPaths) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        sandbox.read_file("nope.txt")
    assert f"{VIRTUAL_ROOT}/workspace/nope.txt" in str(missing.value)
    assert str(paths.base) not in str(missing.value)

    sandbox.write_file("plain.txt", "a file, not a directory")
    errors = []
    for operation in (
        lambda: sandbox.read_file(f"{VIRTUAL_ROOT}/outputs"),
        lambda: sandbox.write_file(f"{VIRTUAL_ROOT}/outputs", "x"),
        lambda: sandbox.write_file("plain.txt/deeper/inner.txt", "x"),
    ):
        with pytest.raises(OSError) as caught:
            operation()
        errors.append(caught.value)
    assert [type(e) for e in errors] == [IsADirectoryError, IsADirectoryError, NotADirectoryError]
    assert f"{VIRTUAL_ROOT}/outputs" in str(errors[0])
    assert f"{VIRTUAL_ROOT}/workspace/plain.txt is a file" in str(errors[2])
    assert not any(str(paths.base) in str(e) for e in errors)

    with pytest.raises(NotADirectoryError, match="does not exist"):
        sandbox.list_dir("missing-dir")
    with pytest.raises(ValueError, match="max_depth"):
        sandbox.list_dir(VIRTUAL_ROOT, max_depth=0)


@pytest.mark.parametrize(
    "hostile",
    ["../../../../etc/passwd", f"{VIRTUAL_ROOT}/../../x", "/etc/passwd", "/tmp/x"],
)
def test_file_operations_refuse_escapes(sandbox: Sandbox, hostile: str) -> None:
    with pytest.raises(PathEscapeError):
        sandbox.read_file(hostile)
    with pytest.raises(PathEscapeError):
        sandbox.read_bytes(hostile)
    with pytest.raises(PathEscapeError):
        sandbox.write_file(hostile, "pwned")
    with pytest.raises(PathEscapeError):
        sandbox.list_dir(hostile)


def test_symlink_planted_in_workspace_cannot_reach_outside(
    sandbox: Sandbox, paths: ThreadPaths, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("top secret")
    # The model could plant these itself with `ln -s` through execute_command.
    assert sandbox.execute_command(f"ln -s '{outside}' escape && ln -s '{secret}' s.txt").ok

    with pytest.raises(PathEscapeError):
        sandbox.read_file("escape/secret.txt")
    with pytest.raises(PathEscapeError):
        sandbox.read_file("s.txt")
    with pytest.raises(PathEscapeError):
        sandbox.write_file("s.txt", "overwritten")
    with pytest.raises(PathEscapeError):
        sandbox.write_file("escape/new/dir/file.txt", "planted")
    with pytest.raises(PathEscapeError):
        sandbox.list_dir("escape")
    assert secret.read_text() == "top secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]

    # Listing the workspace shows the links but does not descend into them.
    listing = sandbox.list_dir(f"{VIRTUAL_ROOT}/workspace", max_depth=3)
    assert listing == [f"{VIRTUAL_ROOT}/workspace/escape", f"{VIRTUAL_ROOT}/workspace/s.txt"]


def test_other_threads_files_are_out_of_reach(
    provider: LocalSandboxProvider, layout: PathLayout
) -> None:
    mine = provider.get(provider.acquire(layout.thread("alice", "t1")))
    theirs_paths = layout.thread("mallory", "t9")
    theirs = provider.get(provider.acquire(theirs_paths))
    theirs.write_file("diary.txt", "private")

    with pytest.raises(PathEscapeError):
        mine.read_file(str(theirs_paths.workspace / "diary.txt"))
    with pytest.raises(PathEscapeError):
        mine.read_file("../../../../mallory/threads/t9/user-data/workspace/diary.txt")
