"""Threads, memory and sandbox commands across real processes (issue 10, defects 2, 3, 5, 6).

Each `antler run` here is its own process, started as an operator would; the
timeouts only stop a hung test, they assert nothing about speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from antler.contracts.runcontext import DEFAULT_USER
from antler.plugin_api.paths import PathLayout
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.sandbox import reaper
from antler.runtime.sandbox.local import LocalSandboxProvider
from tests.memory_writers import memory_of, write_fifty_facts, writers
from tests.processes import read_stderr_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="process tracking uses /proc")
HANG_GUARD = 120


def antler(*args: object, home: Path, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "antler", *map(str, args), "--home", str(home)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def script(path: Path, turns: list[Any]) -> str:
    path.write_text(yaml.safe_dump(turns), encoding="utf-8")
    return f"scripted:{path}"


def bash_turn(command: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": "bash", "args": {"command": command}}]}




def running(marker: str) -> list[int]:
    """Pids of processes whose command line (arguments joined by spaces) holds `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read().replace(b"\0", b" "):
                        found.append(int(name))
            except OSError:
                continue
    return found


def appears(marker: str) -> bool:
    """Whether a process with `marker` shows up (the command starts after its call is shown)."""
    for _ in range(400):
        if running(marker):
            return True
        time.sleep(0.05)
    return False


def gone(marker: str) -> bool:
    """Whether no process with `marker` is left (the killed ones may take a moment)."""
    for _ in range(100):
        if not running(marker):
            return True
        time.sleep(0.05)
    return False


def state_of(home: Path, thread: str) -> dict[str, Any]:
    with create_agent(model=ScriptedChatModel([]), base_dir=home) as agent:
        return agent.state(thread)


# -- defect 2: two processes on one thread ----------------------------------------------------

# Three `antler run` processes (about seven CPU-seconds): in the long checks. `make test`
# shows the refusal and the wait across processes with one each (tests/cli/test_cli_polish.py,
# against a run of this process) and the lock itself in-process (tests/runtime/storage/).
@pytest.mark.slow
def test_a_second_process_on_a_busy_thread_is_refused_or_waits(tmp_path):
    home = tmp_path / "home"
    # The command waits for `go` in its workspace: a host path outside it is not what the
    # sandboxed command sees, and the wait would run into the command's timeout instead.
    # It lists the folder rather than looking the name up: under bubblewrap the workspace
    # is an overlay, which keeps a name it looked up and did not find as missing when
    # another program creates it on the host (README, sandbox), but lists the folder as
    # it is.
    go = PathLayout(home).thread(DEFAULT_USER, "t1").workspace / "go"
    long = script(tmp_path / "long.yaml", [
        bash_turn("until ls | grep -qx go; do sleep 0.05; done; echo released"), "first done",
        "A title"])
    first = antler("run", "one", "--model", long, "--thread", "t1", home=home)
    waiter = None
    try:
        read_stderr_until(first, "-> bash")
        busy = subprocess.run(
            [sys.executable, "-m", "antler", "run", "two", "--home", str(home), "--model",
             script(tmp_path / "b.yaml", ["never"]), "--thread", "t1"],
            capture_output=True, text=True, timeout=HANG_GUARD)
        assert busy.returncode == 1
        assert "thread 't1' is busy" in busy.stderr and "Traceback" not in busy.stderr
        waiter = antler("run", "three", "--model", script(tmp_path / "w.yaml", ["third done"]),
                        "--thread", "t1", "--wait", home=home)
        read_stderr_until(waiter, "thread: t1")
    finally:
        go.touch()
        first_err = first.communicate(timeout=HANG_GUARD)[1]
        if waiter is not None:
            waiter.communicate(timeout=HANG_GUARD)
    assert first.returncode == 0 and waiter is not None and waiter.returncode == 0
    assert "released" in first_err and "timed out" not in first_err, first_err  # let go
    contents = [m.content for m in state_of(home, "t1")["messages"]
                if m.type in ("human", "ai") and m.content]
    assert contents == ["one", "first done", "three", "third done"]  # no turn lost


# -- defect 3: memory writers in several processes --------------------------------------------

@pytest.mark.parametrize("kind", ["store", "json"])
def test_four_processes_writing_fifty_facts_each_keep_all_two_hundred(tmp_path, kind):
    context = writers()
    workers = [context.Process(target=write_fifty_facts, args=(kind, str(tmp_path), w))
               for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(HANG_GUARD)
        assert worker.exitcode == 0
    memory, close = memory_of(kind, str(tmp_path))
    facts = {f.content for f in memory.facts("u")}
    if close is not None:
        close()
    assert facts == {f"fact {w}-{n}" for w in range(4) for n in range(50)}


# -- defects 5 and 6: stopping a run stops its commands ----------------------------------------

# SIGTERM stops a run as Ctrl-C does, with another exit code: in the long checks; `make test`
# stops a run with Ctrl-C here and shows SIGTERM's exit code at the prompt (test_cli_polish).
@pytest.mark.parametrize(
    "how", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
    ids=["ctrl-c", "sigterm"])
def test_stopping_antler_run_kills_the_command_and_leaves_the_thread_resumable(tmp_path, how):
    home = tmp_path / "home"
    marker = f"{400 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 1000}"
    model = script(tmp_path / "s.yaml", [bash_turn(f"echo started; sleep {marker}; echo no"),
                                         "never"])
    run = antler("run", "go", "--model", model, "--thread", "t1", home=home)
    read_stderr_until(run, "-> bash")
    assert appears(f"sleep {marker}")
    run.send_signal(how)
    _out, err = run.communicate(timeout=HANG_GUARD)
    assert run.returncode == 128 + how
    assert "stopped: thread 't1' keeps what it saved" in err and "Traceback" not in err, err
    assert gone(f"sleep {marker}")
    resumed = subprocess.run(
        [sys.executable, "-m", "antler", "run", "and now?", "--home", str(home), "--model",
         script(tmp_path / "r.yaml", ["back", "A title"]), "--thread", "t1"],
        capture_output=True, text=True, timeout=HANG_GUARD)
    assert resumed.returncode == 0, resumed.stderr
    assert f"[interrupted] bash({{'command': 'echo started; sleep {marker}" in resumed.stderr
    assert resumed.stdout.strip() == "back"


def test_kill_9_leaves_no_command_running_and_resume_keeps_the_saved_result(tmp_path):
    home = tmp_path / "home"
    marker = f"{400 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 1000}"
    model = script(tmp_path / "s.yaml", [
        {"content": "", "tool_calls": [
            {"name": "bash", "args": {"command": "echo quick"}, "id": "q"},
            {"name": "bash", "args": {"command": f"sleep {marker}; (sleep {marker} &)"},
             "id": "slow"}]},
        "never"])
    run = antler("run", "go", "--model", model, "--thread", "t1", home=home)
    read_stderr_until(run, "<- bash: quick")
    assert appears(f"sleep {marker}")
    run.kill()
    run.communicate(timeout=HANG_GUARD)
    assert gone(f"sleep {marker}")  # the parent-death signal and the watchdog
    resumed = subprocess.run(
        [sys.executable, "-m", "antler", "run", "and now?", "--home", str(home), "--model",
         script(tmp_path / "r.yaml", ["back", "A title"]), "--thread", "t1"],
        capture_output=True, text=True, timeout=HANG_GUARD)
    assert resumed.returncode == 0, resumed.stderr
    assert "[interrupted] bash(" in resumed.stderr and "sleep" in resumed.stderr
    results = {m.tool_call_id: m.content for m in state_of(home, "t1")["messages"]
               if m.type == "tool"}
    assert results == {"q": "quick"}  # shown before the crash, kept, not run again


def test_the_end_of_a_run_kills_setsid_descendants(tmp_path):
    marker = f"{400 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 1000}"
    provider = LocalSandboxProvider(default_timeout=30)
    paths = PathLayout(tmp_path).thread("u", "t1")
    sandbox_id = provider.acquire(paths)
    sandbox = provider.get(sandbox_id)
    result = sandbox.execute_command(
        f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & "
        f"(sleep {marker}1 >/dev/null 2>&1 &); echo started")
    try:
        assert result.stdout.strip() == "started"
        assert appears(f"sleep {marker}1") and appears(f"sleep {marker} ")  # both outlived it
        provider.release(sandbox_id)  # the run is over
        assert gone(f"sleep {marker}")
    finally:
        provider.shutdown()


# -- the end-of-run sweep reads only processes started since the run's first command -----------

def _token_process(marker: str, token: str) -> subprocess.Popen[bytes]:
    """A process carrying a sandbox's token that no command of it started."""
    process = subprocess.Popen(["sleep", marker], env={"PATH": os.environ["PATH"],
                                                       reaper.TOKEN_VARIABLE: token},
                               start_new_session=True)
    # `Popen` returns while the kernel may still be setting up the new program's
    # environment; a sweep looks for processes that are past that.
    for _ in range(400):
        with open(f"/proc/{process.pid}/environ", "rb") as handle:
            if token.encode() in handle.read():
                return process
        time.sleep(0.005)
    raise AssertionError(f"pid {process.pid} never showed its environment")


def test_the_sweep_reads_only_processes_started_since_the_mark():
    token = reaper.new_token()
    older = _token_process(f"{400 + uuid.uuid4().int % 500}.1", token)
    try:
        counters = reaper.pid_counters()
        assert counters is not None
        newer = _token_process(f"{400 + uuid.uuid4().int % 500}.2", token)
        mark = reaper.PidMark.after(counters, newer.pid)
        # The older process carries the token too, but was not started by a command
        # of this run: with the mark it is not even read; without one, it is found.
        assert reaper.sweep(token, since=mark) == [newer.pid]
        assert newer.wait(timeout=HANG_GUARD) == -signal.SIGKILL
        assert older.poll() is None
        assert reaper.sweep(token) == [older.pid]
    finally:
        older.kill()
        older.wait()


def test_the_sweep_reads_every_process_when_the_pid_counter_may_have_gone_round(monkeypatch):
    token = reaper.new_token()
    counters = reaper.pid_counters()
    assert counters is not None
    stray = _token_process(f"{400 + uuid.uuid4().int % 500}.3", token)
    # Claimed to start after `stray`, but so many forks ago that pids may have been reused.
    mark = reaper.PidMark(stray.pid + 1,
                          counters._replace(forks=counters.forks - counters.pid_max))
    assert reaper.sweep(token, since=mark) == [stray.pid]
    stray.wait(timeout=HANG_GUARD)
    # The counters cannot be read (no Linux /proc of this kind): every process is read.
    stray = _token_process(f"{400 + uuid.uuid4().int % 500}.4", token)
    monkeypatch.setattr(reaper, "pid_counters", lambda: None)
    assert reaper.sweep(token, since=reaper.PidMark(stray.pid + 1, counters)) == [stray.pid]
    stray.wait(timeout=HANG_GUARD)


def test_after_a_wrap_the_sweep_reads_the_pids_on_both_sides(monkeypatch):
    counters = reaper.pid_counters()
    assert counters is not None
    pid_max = counters.pid_max
    listed = [299, 400, 500, 501, pid_max - 101, pid_max - 100, pid_max - 1]
    read: list[int] = []
    monkeypatch.setattr(reaper.os, "listdir", lambda path: [*map(str, listed), "self"])
    monkeypatch.setattr(reaper, "_environment_has", lambda pid, needle: read.append(int(pid)))
    # The sweep skips its own process's thread ids, which after a real pid wrap can be
    # any of the listed pids: this process has none of them here.
    monkeypatch.setattr(reaper, "threading", SimpleNamespace(enumerate=lambda: []))
    # The run's first command got a pid near the top; the last pid handed out since is 500.
    monkeypatch.setattr(reaper, "pid_counters", lambda: counters._replace(last_pid=500))
    reaper.sweep("t", since=reaper.PidMark(pid_max - 100, counters))
    assert read == [299, 400, 500, pid_max - 100, pid_max - 1]
    # Without a wrap and with few pids handed out, /proc is not listed: each is looked up.
    monkeypatch.setattr(reaper, "pid_counters", lambda: counters._replace(last_pid=1005))
    read.clear()
    reaper.sweep("t", since=reaper.PidMark(1000, counters))
    assert read == [1000, 1001, 1002, 1003, 1004, 1005]


def test_commands_of_one_run_share_the_mark_of_the_first(tmp_path):
    marker = f"{400 + uuid.uuid4().int % 500}.{uuid.uuid4().int % 1000}"
    provider = LocalSandboxProvider(default_timeout=30)
    sandbox_id = provider.acquire(PathLayout(tmp_path).thread("u", "t1"))
    sandbox = provider.get(sandbox_id)
    try:
        # Each command leaves a process in a session of its own; both go when the run ends.
        for n in (1, 2):
            sandbox.execute_command(f"setsid sleep {marker}{n} >/dev/null 2>&1 < /dev/null &")
            assert appears(f"sleep {marker}{n}")
        assert sandbox._pid_mark is not None
        provider.release(sandbox_id)
        assert gone(f"sleep {marker}")
        assert sandbox._pid_mark is None  # the next run's first command takes a new one
    finally:
        provider.shutdown()


def test_a_process_caught_inside_exec_is_read_again(monkeypatch):
    # Inside `execve` a process's environment reads as empty for a moment; the sweep
    # takes the read again rather than passing the process by.
    token = reaper.new_token()
    stray = _token_process(f"{400 + uuid.uuid4().int % 500}.5", token)
    real_read = reaper._read
    empty_once = {f"/proc/{stray.pid}/environ"}

    def mid_exec(path: str) -> bytes | None:
        if path in empty_once:
            empty_once.discard(path)
            return b""
        return real_read(path)

    monkeypatch.setattr(reaper, "_read", mid_exec)
    try:
        assert reaper.sweep(token) == [stray.pid]
        assert not empty_once  # the empty read was the first one
        assert stray.wait(timeout=HANG_GUARD) == -signal.SIGKILL
    finally:
        stray.kill()
        stray.wait()


def test_a_kernel_thread_is_not_read_again():
    # kthreadd (pid 2) and its children always read as having no environment.
    assert reaper._kernel_thread("2")
    assert not reaper._kernel_thread(str(os.getpid()))


def test_the_counters_read_through_kept_descriptors_are_fresh(monkeypatch):
    # The counters' files stay open and are read again from their start: each reading
    # must be what opening the files afresh says at that moment, never an old copy.
    def fresh() -> reaper.PidCounters | None:
        with monkeypatch.context() as patched:
            patched.setattr(reaper, "_read_again", reaper._read)
            return reaper.pid_counters()

    before = fresh()
    kept = reaper.pid_counters()
    subprocess.run(["true"], check=True)
    again = reaper.pid_counters()
    after = fresh()
    assert before is not None and kept is not None and again is not None and after is not None
    assert before.forks <= kept.forks < again.forks <= after.forks  # the fork is seen
    assert again.pid_max == after.pid_max
    assert reaper._kept_pid == os.getpid() and len(reaper._kept) == 3
    # A forked child must not share its parent's descriptors' bookkeeping: it opens its own.
    monkeypatch.setattr(reaper, "_kept", {"/proc/stat": -1})
    monkeypatch.setattr(reaper, "_kept_pid", -1)
    assert reaper.pid_counters() is not None
    assert reaper._kept_pid == os.getpid() and reaper._kept["/proc/stat"] != -1
    for descriptor in reaper._kept.values():
        os.close(descriptor)


def test_a_gone_pid_is_not_read(monkeypatch):
    reaped = subprocess.Popen(["true"])
    reaped.wait()
    read: list[str] = []
    monkeypatch.setattr(reaper, "_read", lambda path: read.append(path))
    assert not reaper._environment_has(str(reaped.pid), b"x")
    assert read == []  # gone: its /proc files are not even opened
    assert not reaper._environment_has(str(os.getpid()), b"x")
    assert read == [f"/proc/{os.getpid()}/environ"]  # alive: read


def test_the_sweep_does_not_read_the_harness_threads(monkeypatch):
    import threading

    started, done = threading.Event(), threading.Event()
    ids: list[int] = []

    def worker() -> None:
        ids.append(threading.get_native_id())
        started.set()
        done.wait(HANG_GUARD)

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(HANG_GUARD)
    stray = subprocess.Popen(["true"])
    stray.wait()
    read: list[int] = []
    monkeypatch.setattr(reaper, "_candidates", lambda since: [os.getpid(), ids[0], stray.pid])
    monkeypatch.setattr(reaper, "_environment_has", lambda pid, needle: read.append(int(pid)))
    try:
        reaper.sweep("t")
    finally:
        done.set()
        thread.join()
    assert read == [stray.pid]  # a thread of this process is not another process


def test_a_runs_first_command_marks_with_a_reading_of_the_last_second(tmp_path, monkeypatch):
    # Any reading taken before the command started proves the sweep's window; one of the
    # last second is reused, an older one is not (it would count too many forks).
    reads: list[reaper.PidCounters | None] = []
    real = reaper.pid_counters

    def counted() -> reaper.PidCounters | None:
        reads.append(real())
        return reads[-1]

    monkeypatch.setattr(reaper, "pid_counters", counted)
    provider = LocalSandboxProvider(default_timeout=30)
    sandbox_id = provider.acquire(PathLayout(tmp_path).thread("u", "t1"))
    sandbox = provider.get(sandbox_id)
    clock = [time.monotonic()]
    monkeypatch.setattr(reaper.time, "monotonic", lambda: clock[0])
    try:
        reaper.pid_counters()
        sandbox.execute_command("true")
        assert len(reads) == 1 and sandbox._pid_mark is not None
        assert sandbox._pid_mark.before is reads[0]  # reused
        provider.release(sandbox_id)  # the sweep reads the counters again
        assert len(reads) == 2
        clock[0] += 2 * reaper._RECENT_SECONDS
        sandbox.execute_command("true")
        assert len(reads) == 3 and sandbox._pid_mark.before is reads[2]  # too old: read
    finally:
        provider.shutdown()
