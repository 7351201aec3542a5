"""The command line as an operator meets it (issue 33, "CLI and report polish").

Every test here goes through the real entry point: `python -m antler` in a
subprocess (a pseudo-terminal where a terminal matters), so what is checked is
what a person sees, signals and exit codes included. Timeouts only stop a hung
test; they assert nothing about speed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.processes import read_stderr_until

HANG_GUARD = 120


def antler(*args: object, env: dict[str, str] | None = None,
           **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "antler", *map(str, args)],
                          capture_output=True, text=True, timeout=HANG_GUARD,
                          env={**os.environ, **(env or {})}, **kwargs)


def started(*args: object, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "antler", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def script(path: Path, turns: list[Any]) -> str:
    path.write_text(yaml.safe_dump(turns), encoding="utf-8")
    return f"scripted:{path}"




# -- antler --help: every exit code ------------------------------------------------------------


def test_help_lists_every_exit_code():
    result = antler("--help")
    assert result.returncode == 0
    codes = dict(re.findall(r"^\s+(\d+)\s+(\S.*)$", result.stdout, re.MULTILINE))
    assert set(codes) == {"0", "1", "2", "3", "130", "143"}, result.stdout
    assert "paused" in codes["3"] and "Ctrl-C" in codes["130"] and "SIGTERM" in codes["143"]


# -- memory show ----------------------------------------------------------------------------


def test_memory_show_styles_the_provenance_and_prints_brackets_as_they_are(tmp_path):
    from antler.plugins._lib.memory import MemoryFile

    home = tmp_path / "home"
    MemoryFile(home).add_facts("u1", ["Prefers [metric] units"], source_thread="t-7")
    assert antler("memory", "import", "auto", "--home", home).returncode == 0
    plain = antler("memory", "show", "--user", "u1", "--home", home)
    assert plain.returncode == 0, plain.stderr
    line = plain.stdout.strip()
    assert line.startswith("- Prefers [metric] units  (t-7, ") and "[dim]" not in line, line
    coloured = antler("memory", "show", "--user", "u1", "--home", home,
                      env={"FORCE_COLOR": "1", "TERM": "xterm"})
    assert "\x1b[2m(t-7, " in coloured.stdout and "[/dim]" not in coloured.stdout


# -- antler run: streamed text and tool lines -----------------------------------------------


def test_streamed_text_ends_its_line_before_the_tool_line(tmp_path):
    model = script(tmp_path / "s.yaml", [
        {"content": "Let me count.", "tool_calls": [{"name": "bash",
                                                     "args": {"command": "echo 42"}}]},
        "There are 42.", "Counting"])
    # one pipe for both streams, as a terminal shows them
    result = subprocess.run([sys.executable, "-m", "antler", "run", "count", "--model", model,
                             "--home", tmp_path / "home"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=HANG_GUARD)
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert "Let me count." in lines and "-> bash({'command': 'echo 42'})" in lines, lines
    assert lines.index("-> bash({'command': 'echo 42'})") == lines.index("Let me count.") + 1
    assert "<- bash: 42" in lines and "There are 42." in lines


# -- plugins list at 80 columns -------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 100, 50])
def test_plugins_list_breaks_lines_between_words_only(width):
    rows = json.loads(antler("plugins", "list", "--json").stdout)
    result = antler("plugins", "list", env={"COLUMNS": str(width)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    words = {word for line in lines for word in re.split(r"[\s,;·]+", line) if word}
    for row in rows:
        assert row["name"] in words, (row["name"], result.stdout)
        if row["entry_point"] and row["entry_point"] != row["name"]:
            assert row["entry_point"] in words, (row["entry_point"], result.stdout)
        assert all(chain in words for chain in row["chains"])


# -- --wait says that it waits; signals while waiting -----------------------------------------


@contextlib.contextmanager
def _busy_thread(tmp_path: Path) -> Iterator[threading.Event]:
    """A run of thread t1 in this process, holding the thread in a tool call until the
    event it yields is set or the block ends (as a run in a long shell command does).

    In this process, which has Antler imported already: another `antler run` would
    spend two CPU-seconds importing it. The run holds the thread's lock as any run does.
    """
    from langchain_core.tools import tool

    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    holding, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    @tool
    def hold() -> str:
        """Keep the thread busy until the test lets go."""
        holding.set()
        release.wait(HANG_GUARD)
        return "let go"

    model = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "hold", "args": {}, "id": "h"}]}, "done",
        "A title"])

    def run() -> None:
        try:
            with create_agent(model=model, tools=[hold], base_dir=tmp_path / "home") as agent:
                agent.invoke("go", thread_id="t1")
        except BaseException as exc:
            failures.append(exc)
        finally:
            holding.set()

    runner = threading.Thread(target=run, name="busy-run")
    runner.start()
    try:
        assert holding.wait(HANG_GUARD) and not failures, failures
        yield release
    finally:
        release.set()
        runner.join(HANG_GUARD)
    assert not runner.is_alive() and not failures, failures


def test_without_wait_a_run_of_a_busy_thread_is_refused(tmp_path):
    with _busy_thread(tmp_path):
        refused = antler("run", "next", "--thread", "t1", "--home", tmp_path / "home",
                         "--model", script(tmp_path / "r.yaml", ["never"]))
    assert refused.returncode == 1, refused.stderr
    assert "thread 't1' is busy" in refused.stderr and "Traceback" not in refused.stderr
    assert "never" not in refused.stdout


def test_wait_says_it_waits_and_then_runs(tmp_path):
    with _busy_thread(tmp_path) as release:
        waiting = started("run", "next", "--wait", "--thread", "t1", "--home",
                          tmp_path / "home",
                          "--model", script(tmp_path / "w.yaml", ["after the wait", "Title"]))
        try:
            seen = read_stderr_until(waiting, "[waiting] thread 't1' is busy")
            assert "Ctrl-C stops waiting" in seen
            time.sleep(1)
            assert waiting.poll() is None  # still waiting: the other run holds the thread
        finally:
            release.set()  # the other run finishes
        out, err = waiting.communicate(timeout=HANG_GUARD)
    assert waiting.returncode == 0, err
    assert "[waited " in err and "the other run finished" in err
    assert out.strip() == "after the wait"


# SIGTERM's exit code is shown at the prompt below too: the wait's SIGTERM (an `antler run`,
# two CPU-seconds) is in the long checks.
@pytest.mark.parametrize(
    "how", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
    ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_wait_with_its_exit_code(tmp_path, how):
    with _busy_thread(tmp_path):
        waiting = started("run", "next", "--wait", "--thread", "t1", "--home",
                          tmp_path / "home", "--model", script(tmp_path / "w.yaml", ["x"]))
        read_stderr_until(waiting, "[waiting]")
        waiting.send_signal(how)
        _out, err = waiting.communicate(timeout=HANG_GUARD)
    assert waiting.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[how], err
    assert "stopped" in err and "Traceback" not in err


# -- threads delete asks first --------------------------------------------------------------


def _one_thread(tmp_path: Path) -> Path:
    """A home with thread t1 after one turn, run in this process (Antler is imported
    here already; an `antler run` would spend two CPU-seconds importing it)."""
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel

    home = tmp_path / "home"
    with create_agent(model=ScriptedChatModel(["hello", "Greeting"]), base_dir=home) as agent:
        agent.invoke("hi", thread_id="t1")
    return home


def _listed(home: Path) -> list[str]:
    listing = antler("threads", "list", "--home", home, "--json")
    return [row["thread"] for row in json.loads(listing.stdout)]


def _as_a_shell_starts_it() -> None:
    """Signals as a terminal's shell leaves them: a suite started in the background by a
    non-interactive shell ignores SIGINT, a thread that once blocked signals passes its
    mask on, and both are inherited across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


class Terminal:
    """`antler ...` on a pseudo-terminal, so it can ask; what it printed so far."""

    def __init__(self, *args: object) -> None:
        self.fd, child = pty.openpty()
        self.process = subprocess.Popen([sys.executable, "-m", "antler", *map(str, args)],
                                        stdin=child, stdout=child, stderr=child, close_fds=True,
                                        preexec_fn=_as_a_shell_starts_it)
        os.close(child)
        self.seen = b""

    def expect(self, text: str) -> str:
        deadline = time.monotonic() + HANG_GUARD
        while text.encode() not in self.seen and time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if ready:
                try:
                    self.seen += os.read(self.fd, 4096)
                except OSError:
                    break
        assert text.encode() in self.seen, self.seen.decode(errors="replace")
        return self.seen.decode(errors="replace")

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def finish(self) -> int:
        try:
            code = self.process.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
            self.process.kill()
            raise AssertionError(
                "the command did not stop; its signal state:\n" + "\n".join(
                    line for line in status.splitlines() if line.startswith("Sig"))
                + "\nwhat it printed:\n" + self.seen.decode(errors="replace")) from None
        with_output = self.seen
        try:
            while select.select([self.fd], [], [], 0.2)[0]:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    break
                with_output += chunk
        except OSError:
            pass
        self.seen = with_output
        os.close(self.fd)
        return code


def test_threads_delete_needs_yes_without_a_terminal(tmp_path):
    home = _one_thread(tmp_path)
    refused = antler("threads", "delete", "t1", "--home", home, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2
    assert "pass --yes" in refused.stderr and "Traceback" not in refused.stderr
    assert _listed(home) == ["t1"]
    deleted = antler("threads", "delete", "t1", "--home", home, "--yes",
                     stdin=subprocess.DEVNULL)
    assert deleted.returncode == 0, deleted.stderr
    assert _listed(home) == []


def test_threads_delete_asks_on_a_terminal(tmp_path):
    home = _one_thread(tmp_path)
    declined = Terminal("threads", "delete", "t1", "--home", home)
    shown = declined.expect("[y/N]")
    assert "Delete thread 't1' (owner default, " in shown and "cannot be undone" in shown
    declined.type("n\n")
    assert declined.finish() == 1
    assert "nothing was deleted" in declined.seen.decode()
    assert _listed(home) == ["t1"]
    accepted = Terminal("threads", "delete", "t1", "--home", home)
    accepted.expect("[y/N]")
    accepted.type("y\n")
    assert accepted.finish() == 0
    assert _listed(home) == []


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_at_the_prompt_stops_with_its_exit_code(tmp_path, how):
    home = _one_thread(tmp_path)
    asking = Terminal("threads", "delete", "t1", "--home", home)
    asking.expect("[y/N]")
    # At once: the signal lands before the answer is read as often as during the wait
    # (a blocking read would then wait for the next key; the prompt polls instead).
    asking.process.send_signal(how)
    assert asking.finish() == {signal.SIGINT: 130, signal.SIGTERM: 143}[how]
    text = asking.seen.decode(errors="replace")
    assert "stopped" in text and "Traceback" not in text and "Aborted" not in text
    assert _listed(home) == ["t1"]


# -- the demo: no leftovers, a legend for the timeline; make's progress ---------------------


def _demo_env(tmp_path: Path) -> dict[str, str]:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch)}
    env.pop("ANTLER_HOME", None)
    return env


def test_the_demo_removes_its_temporary_directory_and_explains_its_timeline(tmp_path):
    result = subprocess.run([sys.executable, "-m", "antler", "demo"], capture_output=True,
                            text=True, timeout=HANG_GUARD, env=_demo_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # nothing left behind
    assert "`antler demo --keep` or `--home DIR` keeps them" in result.stdout
    out = result.stdout
    assert "How to read a timeline" in out and out.index("How to read") < out.index("=== Turn 1")
    wraps = [line for line in out.splitlines() if ".wrap_model_call " in line]
    nodes = [line for line in out.splitlines() if ".before_agent " in line]
    assert wraps and all(line.endswith("ms incl. inner)") for line in wraps)
    assert nodes and not any("incl. inner" in line for line in nodes)


def test_the_demo_keeps_its_directory_when_asked(tmp_path):
    result = subprocess.run([sys.executable, "-m", "antler", "demo", "--keep"],
                            capture_output=True, text=True, timeout=HANG_GUARD,
                            env=_demo_env(tmp_path))
    assert result.returncode == 0, result.stderr
    [kept] = list((tmp_path / "tmp").iterdir())
    assert kept.name.startswith("antler-demo-")
    assert f"Checkpoint:    {kept / 'checkpoints.sqlite'}" in result.stdout
    assert (kept / "checkpoints.sqlite").is_file()


def test_run_trace_prints_the_legend(tmp_path):
    model = script(tmp_path / "s.yaml", ["hi there", "Greeting"])
    result = antler("run", "hi", "--trace", "--model", model, "--home", tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert "How to read a timeline" in result.stderr and "incl. inner)" in result.stderr


def test_make_says_what_it_installs_before_the_long_step(tmp_path):
    root = Path(__file__).resolve().parents[2]
    dry = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=root,
                         capture_output=True, text=True, timeout=HANG_GUARD)
    if dry.returncode != 0 and "No such file" in dry.stderr:
        pytest.skip("no make on this machine")
    lines = dry.stdout.splitlines()
    install = next(i for i, line in enumerate(lines) if '-e ".[dev]"' in line)
    assert any("Setting up" in line for line in lines[:install])
    assert "--quiet" not in lines[install]  # pip names each package as it installs it
    assert any("is ready" in line for line in lines[install:])
