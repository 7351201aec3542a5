"""What the host-backed sandbox providers share: threads' files on the host, commands as processes.

Both the local and the bubblewrap provider keep a thread's files in its host
``user-data`` directory and run each shell command with pipes the harness
reads. They differ only in how a command is started (`HostSandbox._popen`):
the local provider runs the shell on the host as a child process, with virtual
paths rewritten (`HostSandbox._launch`); the bubblewrap provider has the
thread's namespace start it, where the virtual paths are real mounts.
Everything else lives here, once:

* file tools confined to the thread's files (``..``, outside absolute paths and
  escaping symlinks are refused, skills are read-only), each path opened
  beneath a descriptor of its root with no window between check and use
  (`antler.plugin_api.confined`), and ``glob``/``grep`` over those descriptors
  (`search`);
* the command runner: its own session and process group, a minimal
  environment, both output pipes drained in the calling thread with a
  selector, at most ``max_output_bytes`` kept per stream (the rest counted),
  host paths rewritten to virtual ones before the cut, a time limit that kills
  the whole group, and background children that hold the output open killed
  after a short grace;
* stopping commands with their run (`interrupt`), and what finished commands
  left running when the run ends (`end_run`, with `reaper.sweep`);
* keeping a thread's sandbox only while a run holds it or something of it runs,
  and making it again from the id the thread's state keeps (`HostSandboxProvider`);
  a run that ends without releasing it (cancelled, failed) lets go of it too, its
  commands stopped (`antler.compiler.runscope`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from antler.compiler.runscope import RunScope, current_run
from antler.plugin_api import confined
from antler.plugin_api.paths import (
    SKILLS_VIRTUAL_ROOT,
    VIRTUAL_ROOT,
    InvalidIdentifierError,
    PathEscapeError,
    PathLayout,
    ThreadPaths,
)
from antler.plugin_api.sandbox import (
    CommandInterrupted,
    CommandResult,
    Sandbox,
    SandboxClosedError,
    SandboxError,
    SandboxNotFoundError,
    SandboxProvider,
)

from . import reaper, search

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "DEFAULT_TIMEOUT_SECONDS", "OUTSIDE_A_RUN", "HostSandbox",
           "HostSandboxProvider", "Launch", "RunningCommand"]

DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
MAX_FILE_BYTES = 64 * 1024 * 1024
"""The largest file `read_bytes` (so read_file and str_replace) reads whole."""
FALLBACK_PATH = "/usr/local/bin:/usr/bin:/bin"
_READ_CHUNK = 64 * 1024
# After the shell exits, grandchildren it left in the background may still hold
# the output pipes open; wait this long for them before killing the group.
_PIPE_DRAIN_GRACE_SECONDS = 0.5
# Where the shell's exit cannot be watched with a descriptor, look this often.
_EXIT_POLL_SECONDS = 0.02
_Selector = getattr(selectors, "PollSelector", selectors.DefaultSelector)


class _CappedOutput:
    """One pipe's output: at most ``limit`` bytes kept, the rest counted.

    The pipe must keep being drained even past the cap, or a chatty command
    would block on a full pipe and look like a hang.
    """

    __slots__ = ("_chunks", "_kept", "_limit", "dropped")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: list[bytes] = []
        self._kept = 0
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self._limit - self._kept
        if room > 0:
            self._chunks.append(chunk[:room])
            self._kept += min(room, len(chunk))
        self.dropped += max(0, len(chunk) - max(room, 0))

    @property
    def data(self) -> bytes:
        return b"".join(self._chunks)


class RunningCommand(Protocol):
    """A started command as the runner sees it: a `subprocess.Popen`, or what a
    provider's `HostSandbox._popen` returns in its stead."""

    pid: int
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass(frozen=True)
class Launch:
    """How to start one command: the argv, its working directory and its environment."""

    argv: list[str]
    cwd: Path | str
    env: dict[str, str]
    fds: tuple[int, ...] = ()
    """Descriptors the command inherits (as numbered); the harness closes its own copies
    once the command has started."""


class HostSandbox(Sandbox):
    """One thread's sandbox whose files live on the host and whose commands are child processes.

    Subclasses say how a command is launched as a host process (`_launch`), or
    start it their own way (`_popen`, `_kill`, `_exit_descriptor`), and may
    rewrite the command text first (`_command_text`); everything else is shared.
    """

    leaves_strays = True
    """Whether a finished command can leave processes behind, for `end_run` to find."""

    output_ends_with_exit = False
    """Whether a command's reported exit means nothing can write its output any more
    (whatever it left is killed first), so the pipes are read up to that point only."""

    def __init__(
        self,
        sandbox_id: str,
        thread_paths: ThreadPaths,
        *,
        default_timeout: float,
        max_output_bytes: int,
        shell: str,
    ) -> None:
        self._id = sandbox_id
        self.thread_paths = thread_paths
        self.mapper = thread_paths.mapper
        self.default_timeout = default_timeout
        self.max_output_bytes = max_output_bytes
        self._keep = self._raw_bytes_to_keep()
        self._shell = shell
        self._lock = threading.RLock()  # re-entered by a signal handler (interrupt)
        self._running: set[RunningCommand] = set()
        self._interrupted: set[RunningCommand] = set()
        # Sessions of the commands started since the last `end_run`: what they left
        # in the background is stopped when the run ends.
        self._sessions: set[int] = set()
        # Pid allocation when the first of those commands started: the end-of-run
        # sweep reads only processes started since (see `reaper`).
        self._pid_mark: reaper.PidMark | None = None
        self._token = reaper.new_token()
        self._closed = False
        # Who holds it: the runs that acquired it and have not let it go (`RunScope`s), and
        # `OUTSIDE_A_RUN` for callers outside any run (one holder for all of them).
        self._holders: set[object] = set()
        # The run each of its running commands was started in, when one was: a run that
        # ends without releasing (cancelled, failed) has its commands stopped.
        self._runs_of: dict[RunningCommand, RunScope] = {}
        self._provider: HostSandboxProvider | None = None
        # Dropped from its provider's tables while idle (`HostSandboxProvider`): its files
        # still work; a command goes to the thread's sandbox in the tables (`_live`).
        self._dropped = False

    @property
    def sandbox_id(self) -> str:
        return self._id

    @property
    def in_use(self) -> bool:
        """Whether a run (or a caller outside any run) holds it."""
        return bool(self._holders)

    # -- commands -----------------------------------------------------------------

    def execute_command(self, command: str, timeout: float | None = None) -> CommandResult:
        self._check_open()
        limit = self.default_timeout if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        run = current_run()
        with self._lock:  # so `interrupt` and `close` see every command that started
            if run is not None and run.ended:
                # A tool of a cancelled run, still going in a worker thread: nothing
                # will read the output (checked under the lock `_stop_commands_of` takes).
                raise CommandInterrupted(f"the command's run has ended: {command[:80]!r}")
            if self._dropped:
                process = None
            else:
                # The first command since the last `end_run` marks where its sweep starts.
                first = not self._sessions and self.leaves_strays
                counters = reaper.recent_pid_counters() if first else None
                process = self._spawn(self._command_text(command))
                if first:
                    self._pid_mark = reaper.PidMark.after(counters, process.pid)
                self._running.add(process)
                self._sessions.add(process.pid)
                if run is not None:
                    self._runs_of[process] = run
        if process is None:
            # Held across the end of a run while the provider dropped it: the command runs
            # in the thread's sandbox, this one taken back when the thread has none.
            return self._live().execute_command(command, timeout)
        try:
            stdout, stderr, timed_out, reaped = self._collect(process, limit)
        finally:
            with self._lock:
                self._running.discard(process)
                self._runs_of.pop(process, None)
                interrupted = process in self._interrupted
                self._interrupted.discard(process)
                # The last command of a run that has ended and let the sandbox go
                # (cancelled while the command ran): nothing else will end what it left.
                orphaned = (run is not None and run.ended and not self._holders
                            and not self._running)
            if orphaned:
                self.end_run()
                self._went_idle()
        if interrupted:
            raise CommandInterrupted(f"the command was stopped with its run: {command[:80]!r}")

        notes = [self._present(stderr)] if stderr.data or stderr.dropped else []
        if reaped:
            notes.append("[background processes still holding the output open were killed]")
        if timed_out:
            notes.append(f"[command timed out after {limit:g}s and was killed]")
        return CommandResult(
            stdout=self._present(stdout),
            stderr="\n".join(notes),
            exit_code=process.returncode if process.returncode is not None else -1,
            timed_out=timed_out,
        )

    def _spawn(self, command: str) -> RunningCommand:
        """Start ``command`` with the shell, in the thread's workspace.

        Filesystem calls are kept off the common path: while the agent's other
        tool calls run Python code in parallel, each one gives up the
        interpreter lock and must win it back, which costs far more than the
        call itself. So the shell is looked up on ``PATH`` once, and the
        thread's directories (which may have been removed between turns) are
        only recreated when starting the command finds them missing.
        """
        try:
            return self._popen(command)
        except FileNotFoundError:
            # The shell moved, or the directories were removed between turns:
            # look the shell up again, recreate the directories and try once more.
            _find_on_path.cache_clear()
            self.thread_paths.ensure_directories()
            return self._popen(command)

    def _command_text(self, command: str) -> str:
        """The command as the shell receives it (the local provider rewrites virtual paths)."""
        return command

    def _launch(self, command: str) -> Launch:
        """How to start ``command`` as a host process (for `_popen`); the shell must die
        with the harness (see `reaper`)."""
        raise NotImplementedError

    def _popen(self, command: str) -> RunningCommand:
        """Start ``command`` in its own session and process group, its output on pipes."""
        # What the command starts dies with the harness: the watchdog sweeps its
        # token when the harness is gone.
        reaper.start_watchdog()
        launch = self._launch(command)
        # No `preexec_fn` and no launcher: `subprocess` starts the shell with vfork
        # and one exec, the cheapest start there is.
        try:
            return subprocess.Popen(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # Own session and process group, so a timeout kills the command's
                # children too.
                start_new_session=True,
                pass_fds=launch.fds,
            )
        finally:
            for fd in launch.fds:
                os.close(fd)

    def _resolved_shell(self) -> str:
        found = _find_on_path(self._shell, os.environ.get("PATH"))
        if found is None:
            raise SandboxError(
                f"The sandbox needs the {self._shell!r} shell, which is not on the host's "
                "PATH; install it or configure another shell for the provider."
            )
        return found

    def _present(self, reader: _CappedOutput) -> str:
        """Decode captured output, rewrite host paths to virtual ones, then apply the cap.

        Rewriting happens before the final cut so that the cut can never leave
        half of a host path behind, where it would no longer be recognised.
        """
        text = self.mapper.virtualize_text(reader.data.decode("utf-8", errors="replace"))
        encoded = text.encode("utf-8")
        dropped = reader.dropped
        if len(encoded) > self.max_output_bytes:
            # Cut on a character boundary: a split multi-byte character is dropped.
            text = encoded[: self.max_output_bytes].decode("utf-8", errors="ignore")
            dropped += len(encoded) - len(text.encode("utf-8"))
        if dropped:
            text += f"\n[output truncated: {dropped} more bytes not shown]"
        return text

    def _raw_bytes_to_keep(self) -> int:
        """How many raw bytes per stream can matter for ``max_output_bytes`` shown bytes
        (the same for every command: worked out once, when the sandbox is made).

        Output is cut *after* host paths are rewritten, so the raw capture must
        hold everything that can shrink into the shown bytes: a shown byte stands
        for one raw byte, or for up to ``host/virtual`` raw bytes when it is part
        of a rewritten path; plus one whole host path that straddles the cut, so
        that it is never cut in half and leaked.
        """
        user_data = self.thread_paths.user_data
        host_root = max(len(os.fsencode(user_data)), len(os.fsencode(self.mapper.resolved_root)))
        expansion = max(1, math.ceil(host_root / len(VIRTUAL_ROOT)))
        return self.max_output_bytes * expansion + host_root

    def _collect(
        self, process: RunningCommand, limit: float
    ) -> tuple[_CappedOutput, _CappedOutput, bool, bool]:
        """Wait for ``process`` and its output, killing its group past ``limit`` seconds.

        Returns both outputs, whether the command timed out, and whether
        background children had to be killed after the shell exited.

        Both pipes are drained in the calling thread with a selector (no reader
        threads): with the agent's other tool calls running Python code in
        parallel, every extra thread that must win the interpreter lock to hand
        over a chunk of output adds latency to the command.
        """
        assert process.stdout is not None and process.stderr is not None
        stdout, stderr = _CappedOutput(self._keep), _CappedOutput(self._keep)
        now = time.monotonic()
        deadline = now + limit  # the command's own time limit
        exited_at: float | None = None  # when the shell itself exited
        killed_at: float | None = None  # when the group was killed (timeout or reaping)
        timed_out = reaped = False
        exit_fd = self._exit_descriptor(process)
        # poll(2), as `subprocess` itself uses: an epoll selector costs a descriptor and a
        # system call per registration, more than the few rounds a command takes.
        selector = _Selector()
        try:
            selector.register(process.stdout, selectors.EVENT_READ, stdout)
            selector.register(process.stderr, selectors.EVENT_READ, stderr)
            if exit_fd is not None:
                selector.register(exit_fd, selectors.EVENT_READ, None)
            # Until both pipes are closed and, when watched, the shell has exited: so the
            # exit is seen through its descriptor rather than by polling.
            while selector.get_map():
                now = time.monotonic()
                if exited_at is None and process.poll() is not None:
                    exited_at = now
                    if exit_fd is not None:
                        selector.unregister(exit_fd)
                        if not selector.get_map():
                            break  # the pipes were closed already
                    if self.output_ends_with_exit:
                        _drain(selector)  # what is in the pipes is all there will be
                        break
                if killed_at is None and now >= deadline:
                    timed_out, killed_at = True, now
                    self._kill(process)
                elif (killed_at is None and exited_at is not None
                        and now - exited_at >= _PIPE_DRAIN_GRACE_SECONDS):
                    # The shell is gone, but children it left in the background
                    # still hold the pipes open: kill them so the call returns.
                    reaped, killed_at = True, now
                    self._kill(process)
                if killed_at is not None and now - killed_at >= _PIPE_DRAIN_GRACE_SECONDS:
                    break  # something outside the group holds the pipes; stop reading
                for key, _events in selector.select(self._wait(
                        now, deadline, exited_at, killed_at, exit_fd is not None)):
                    if key.data is None:
                        continue  # the exit descriptor; handled at the top of the loop
                    chunk = os.read(key.fd, _READ_CHUNK)
                    if chunk:
                        key.data.feed(chunk)
                    else:
                        selector.unregister(key.fileobj)
        finally:
            selector.close()
            if exit_fd is not None:
                os.close(exit_fd)
            _close_quietly(process.stderr)
            _close_quietly(process.stdout)
        # Both pipes are closed, but the shell may still run (it closed its output, and
        # its exit could not be watched): the time limit holds until it exits.
        if not timed_out and process.poll() is None:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                self._kill(process)
        process.wait()
        return stdout, stderr, timed_out, reaped and not timed_out

    @staticmethod
    def _wait(now: float, deadline: float, exited_at: float | None, killed_at: float | None,
              exit_watched: bool) -> float:
        """How long the selector may block before the next deadline needs a look."""
        if killed_at is not None:
            until = killed_at + _PIPE_DRAIN_GRACE_SECONDS
        elif exited_at is not None:
            until = min(deadline, exited_at + _PIPE_DRAIN_GRACE_SECONDS)
        else:
            until = deadline
        wait = max(0.0, until - now)
        # Without an exit descriptor the shell's exit is only seen by polling.
        return wait if exit_watched or exited_at is not None else min(wait, _EXIT_POLL_SECONDS)

    def _kill(self, process: RunningCommand) -> None:
        """Kill the process group started for ``process`` (the command and its children)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)

    def _exit_descriptor(self, process: RunningCommand) -> int | None:
        """A descriptor that becomes readable when ``process`` exits (Linux pidfd), or None."""
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None:
            return None
        try:
            return int(pidfd_open(process.pid))
        except OSError:  # an old kernel, or a seccomp filter that refuses it
            return None

    def _environment(self, path: str, home: str) -> dict[str, str]:
        """A minimal environment: secrets in the harness's env must not reach the model."""
        return {
            "PATH": path,
            "HOME": home,
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            # Inherited by every descendant: how `reaper.sweep` finds the ones that
            # left the command's session.
            reaper.TOKEN_VARIABLE: self._token,
        }

    # -- files --------------------------------------------------------------------
    #
    # Every file operation opens its path beneath a descriptor of the thread's
    # `user-data` (or a skill root) with `antler.plugin_api.confined`, and reads,
    # writes and lists through the descriptor it got: no path string is checked
    # and then opened again, so a name swapped for a symlink meanwhile (by the
    # model's own `bash`, or a parallel call) cannot lead outside.

    def read_file(self, virtual_path: str) -> str:
        return self.read_bytes(virtual_path).decode("utf-8", errors="replace")

    def read_bytes(self, virtual_path: str) -> bytes:
        self._check_open()
        where = confined.place(self.mapper, virtual_path)
        with self._virtual_errors(virtual_path), os.fdopen(where.open(os.O_RDONLY),
                                                           "rb") as handle:
            # Bounded: a sparse or growing file must not fill the harness's memory.
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(MAX_FILE_BYTES + 1) if size <= MAX_FILE_BYTES else b""
            if size > MAX_FILE_BYTES or len(data) > MAX_FILE_BYTES:
                raise SandboxError(
                    f"{where.virtual} is {max(size, len(data))} bytes, more than the "
                    f"{MAX_FILE_BYTES // (1024 * 1024)} MiB the file tools read; look at part "
                    "of it with bash (head, tail, sed -n) or grep.")
            return data

    def write_file(self, virtual_path: str, content: str, append: bool = False) -> None:
        self._check_open()
        if self.mapper.is_read_only(virtual_path):
            raise PermissionError(f"{virtual_path} is read-only: skills cannot be changed from "
                                  "the sandbox. Write under /mnt/user-data/outputs instead.")
        where = confined.place(self.mapper, virtual_path)
        self.thread_paths.ensure_directories()
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        with self._virtual_errors(virtual_path):
            fd = where.open(flags, 0o644, make_parents=True)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(content)

    def list_dir(self, virtual_path: str, max_depth: int = 2) -> list[str]:
        self._check_open()
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {max_depth}")
        with self._directory(virtual_path) as (fd, where):
            # Symlinks are listed but never descended into (see `confined.walk`).
            return sorted(f"{where.virtual}/{entry.relative}"
                          + ("/" if entry.kind == "dir" else "")
                          for entry in confined.walk(fd, max_depth))

    def glob(self, pattern: str, virtual_path: str, *, include_dirs: bool = False,
             max_results: int = search.DEFAULT_GLOB_RESULTS) -> search.GlobResult:
        self._check_open()
        with self._directory(virtual_path) as (fd, where):
            return search.glob(fd, where.virtual, pattern, include_dirs=include_dirs,
                               max_results=max_results)

    def grep(self, pattern: str, virtual_path: str, *, glob: str | None = None,
             literal: bool = False, case_sensitive: bool = False,
             max_results: int = search.DEFAULT_GREP_RESULTS) -> search.GrepResult:
        self._check_open()
        with self._directory(virtual_path) as (fd, where):
            return search.grep(fd, where.virtual, pattern, glob=glob, literal=literal,
                               case_sensitive=case_sensitive, max_results=max_results)

    @contextlib.contextmanager
    def _directory(self, virtual_path: str) -> Iterator[tuple[int, confined.Place]]:
        """A readable descriptor of the directory at `virtual_path` (closed on leaving) and
        its place; a clear NotADirectoryError when there is none, OS errors by virtual path."""
        where = confined.place(self.mapper, virtual_path)  # its errors name the path
        with self._virtual_errors(virtual_path):
            try:
                fd = where.open(os.O_RDONLY, directory=True)
            except FileNotFoundError:
                raise NotADirectoryError(f"{where.virtual} does not exist.") from None
            except NotADirectoryError:
                raise NotADirectoryError(f"{where.virtual} is not a directory.") from None
            try:
                yield fd, where
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def _virtual_errors(self, virtual_path: str) -> Iterator[None]:
        """Re-raise OS errors naming a virtual path: their default text names the host path.

        Errors from `confined` name the path already (by its virtual name, the
        component that failed); others are given the path the call named.
        """
        try:
            yield
        except PathEscapeError:
            raise
        except OSError as error:
            if error.errno is None:
                raise
            if isinstance(error.filename, str) and error.filename.startswith(
                    (VIRTUAL_ROOT, SKILLS_VIRTUAL_ROOT)):
                raise
            # OSError(errno, ...) picks the matching subclass (FileNotFoundError...).
            raise OSError(error.errno, error.strerror, self._shown(virtual_path)) from None

    def _shown(self, virtual_path: str) -> str:
        """How to name a path in an error message without revealing host paths."""
        try:
            return self.mapper.virtual_name(virtual_path)
        except PathEscapeError:
            return repr(virtual_path)

    # -- lifecycle ----------------------------------------------------------------

    def _holds_nothing(self) -> bool:
        """Whether dropping this sandbox would end nothing of the thread (a provider whose
        sandbox keeps more than its commands, such as a namespace, says so here).

        Called with the sandbox's lock held."""
        return True

    def _drop_if_idle(self) -> bool:
        """Mark the sandbox dropped if no run holds it and nothing of it runs; say whether.

        Called by its provider, with the provider's lock held."""
        with self._lock:
            if (self._holders or self._closed or self._running or self._sessions
                    or not self._holds_nothing()):
                return False
            self._dropped = True
            return True

    def _live(self) -> HostSandbox:
        """The sandbox its provider keeps for this thread now, this one put back when the
        thread has none; this one when no provider keeps it."""
        if self._provider is None:
            with self._lock:
                self._dropped = False
            return self
        return self._provider._reinstated(self)

    def _went_idle(self) -> None:
        """What kept the sandbox (its namespace) has ended: its provider may drop it."""
        if self._provider is not None:
            self._provider._idle(self)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError(f"Sandbox {self._id!r} has been shut down.")

    def _stop_commands_of(self, run: RunScope) -> None:
        """Kill the commands `run` started that still run (it has ended: nothing will read
        their output); each of their calls raises `CommandInterrupted`."""
        with self._lock:
            running = [process for process, started_in in self._runs_of.items()
                       if started_in is run]
            self._interrupted.update(running)
        for process in running:
            self._kill(process)

    def interrupt(self) -> None:
        """Kill the running commands now; each of their calls raises `CommandInterrupted`."""
        with self._lock:
            running = list(self._running)
            self._interrupted.update(running)
        for process in running:
            self._kill(process)
        self.end_run()

    def end_run(self) -> None:
        """Stop what finished commands left running: their groups and their `setsid` children.

        Commands still running (a parallel call of the same thread) are spared, and
        none starts until the sweep is done: it would carry the token the sweep kills by.
        """
        with self._lock:
            running = {process.pid for process in self._running}
            finished = self._sessions - running
            self._sessions -= finished
            # Commands still running keep the mark: what they leave is swept later.
            mark = self._pid_mark
            if not self._sessions:
                self._pid_mark = None
            if not finished or not self.leaves_strays:
                return
            for session in finished:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(session, signal.SIGKILL)
            reaper.sweep(self._token, spare_sessions=running, since=mark)

    def close(self) -> None:
        """Kill any running commands and what they started, and refuse further use."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for process in running:
            self._kill(process)
        self.end_run()


@functools.lru_cache(maxsize=16)
def _find_on_path(shell: str, path: str | None) -> str | None:
    """`shutil.which`, remembered per shell and ``PATH`` (cleared when a start fails)."""
    return shutil.which(shell, path=path)


def _drain(selector: selectors.BaseSelector) -> None:
    """Read the registered pipes until nothing more is waiting in them (no blocking)."""
    while events := selector.select(0):
        for key, _events in events:
            if key.data is None:
                continue
            chunk = os.read(key.fd, _READ_CHUNK)
            if chunk:
                key.data.feed(chunk)
            else:
                selector.unregister(key.fileobj)
        if not selector.get_map():
            return


def _close_quietly(stream: IO[bytes]) -> None:
    with contextlib.suppress(OSError):
        stream.close()


class HostSandboxProvider(SandboxProvider):
    """Hands out one `HostSandbox` per thread, and keeps it only while it is of use.

    A thread's sandbox is made when the thread acquires one, and dropped from the
    provider's tables once no run holds it and nothing of it runs (when the sandbox
    keeps something between runs, the bwrap provider's namespace, once that has ended).
    Its id names the thread, ``<name>:<user>/<thread>`` (``#<n>`` after it for the n-th
    base directory the provider serves), so the thread's next `acquire` or `get` makes
    it again from the thread's paths, files and all; `get` of an id no thread's
    directory answers to raises `SandboxNotFoundError`. So the provider holds the
    sandboxes of the threads running now, not of every thread it ever served. A thread
    never has two: each is made, dropped and taken back under the provider's lock, and
    a command sent to a dropped one (held by a caller across the end of a run) runs in
    the one the provider keeps for the thread (`HostSandbox._live`).

    Who holds a sandbox:

    * each run that acquired it (`acquire` inside a run, as the sandbox tools do on
      every call), until that run releases it (`release` inside the same run, the
      sandbox middleware's ``after_agent``) or ends: a run cancelled or failed before
      its last hook lets go of it when it ends, its commands still running stopped
      (`antler.compiler.runscope`). Overlapping runs of one thread each hold it, so the
      first to end never drops it under another; a second release is a no-op;
    * callers outside any run (`acquire` with no run, or in a graph not built by
      `create_agent`), as one holder: any `release` of theirs lets it go.

    A sandbox that only `get` made (or took back: a dropped one whose caller ran a
    command in it) is held by nobody: it is kept until the provider's next sweep after
    nothing of it runs. The provider sweeps at every `release` and whenever a run lets
    go at its end: every sandbox no one holds has what its finished commands left in the
    background stopped, and is dropped once nothing of it runs.

    Subclasses name themselves (`name`, the prefix of their sandbox ids) and
    build the sandbox (`_new_sandbox`).

    Args:
        default_timeout: seconds a command may run when the caller gives none.
        max_output_bytes: bytes shown from each of stdout and stderr (counted after
            host paths are rewritten); the rest is drained and reported as truncated.
        shell: the shell used to run commands (looked up on ``PATH``).
    """

    name = "host"

    def __init__(
        self,
        *,
        default_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        shell: str = "bash",
    ) -> None:
        if default_timeout <= 0:
            raise ValueError(f"default_timeout must be positive, got {default_timeout!r}")
        if max_output_bytes < 1:
            raise ValueError(f"max_output_bytes must be at least 1, got {max_output_bytes!r}")
        self.default_timeout = float(default_timeout)
        self.max_output_bytes = int(max_output_bytes)
        self.shell = shell
        self._lock = threading.RLock()  # re-entered by a signal handler (interrupt)
        self._by_id: dict[str, HostSandbox] = {}
        # The sandboxes the next sweep looks at (`_sweep`): not every one kept, so that a
        # release costs the same with ten threads kept as with ten thousand.
        self._unswept: dict[str, HostSandbox] = {}
        # The base directories served, in the order first seen (the ``#<n>`` of an id).
        self._layouts: list[PathLayout] = []
        self._base_numbers: dict[Path, int] = {}
        self._closed = False

    def acquire(self, thread_paths: ThreadPaths) -> str:
        """The thread's sandbox id, the sandbox held for the caller's run (see the class)."""
        run = current_run()
        with self._lock:
            if self._closed:
                raise SandboxClosedError(f"The {self.name} sandbox provider has been shut down.")
            sandbox_id = self._id_of(thread_paths)
            sandbox = self._by_id.get(sandbox_id)
            if sandbox is None:
                sandbox = self._keep(self._new_sandbox(sandbox_id, thread_paths))
            with sandbox._lock:
                held = (run if run is not None else OUTSIDE_A_RUN) in sandbox._holders
                if not held:
                    sandbox._holders.add(run if run is not None else OUTSIDE_A_RUN)
        if run is not None and not held:
            run.on_end((self, sandbox_id), functools.partial(self._run_ended, sandbox_id, run))
        # Acquisition means a tool is about to run: this is the lazy moment.
        thread_paths.ensure_directories()
        return sandbox_id

    @abstractmethod
    def _new_sandbox(self, sandbox_id: str, thread_paths: ThreadPaths) -> HostSandbox:
        """A new sandbox for ``thread_paths``, with this provider's settings."""

    def _id_of(self, thread_paths: ThreadPaths) -> str:
        """The id of the thread's sandbox (its base directory numbered on first sight)."""
        number = self._base_numbers.get(thread_paths.base)
        if number is None:
            number = self._base_numbers[thread_paths.base] = len(self._layouts)
            self._layouts.append(PathLayout(thread_paths.base, thread_paths.skill_roots))
        # User and thread ids never contain '/' or '#' (`validate_id`): the id reads back.
        suffix = f"#{number + 1}" if number else ""
        return f"{self.name}:{thread_paths.user_id}/{thread_paths.thread_id}{suffix}"

    def _thread_of(self, sandbox_id: str) -> ThreadPaths:
        """The paths of the thread `sandbox_id` names, which must have its directory.

        Raises:
            SandboxNotFoundError: the provider is shut down, the id is not one it makes
                (another provider's, a base directory it does not serve, ids no thread
                can have), or the thread has no files (deleted, or never run).
        """
        if self._closed:
            raise SandboxNotFoundError(self._not_found(sandbox_id))
        prefix = f"{self.name}:"
        found = _SANDBOX_ID.fullmatch(sandbox_id[len(prefix):]) if isinstance(
            sandbox_id, str) and sandbox_id.startswith(prefix) else None
        number = int(found["number"] or 1) - 1 if found is not None else -1
        if found is None or not 0 <= number < len(self._layouts):
            raise SandboxNotFoundError(self._not_found(sandbox_id))
        try:
            paths = self._layouts[number].thread(found["user"], found["thread"])
        except InvalidIdentifierError:
            raise SandboxNotFoundError(self._not_found(sandbox_id)) from None
        if self._id_of(paths) != sandbox_id or not paths.user_data.is_dir():
            raise SandboxNotFoundError(self._not_found(sandbox_id))
        return paths

    def _keep(self, sandbox: HostSandbox) -> HostSandbox:
        """Put `sandbox` in the tables (with the provider's lock held)."""
        sandbox._provider = self
        self._by_id[sandbox.sandbox_id] = sandbox
        self._unswept[sandbox.sandbox_id] = sandbox  # `get` alone may use it: no release
        return sandbox

    def _drop(self, sandbox: HostSandbox) -> bool:
        """Drop `sandbox` from the tables if no run holds it and nothing of it runs; say
        whether it is out of them."""
        with self._lock:
            if self._by_id.get(sandbox.sandbox_id) is not sandbox:
                return True
            if sandbox._drop_if_idle():
                del self._by_id[sandbox.sandbox_id]
                self._unswept.pop(sandbox.sandbox_id, None)
                return True
            return False

    def _idle(self, sandbox: HostSandbox) -> None:
        """What kept `sandbox` (its namespace) has ended: drop it, or leave it to a sweep."""
        if not self._drop(sandbox):
            with self._lock:
                if self._by_id.get(sandbox.sandbox_id) is sandbox:
                    self._unswept[sandbox.sandbox_id] = sandbox

    def _reinstated(self, sandbox: HostSandbox) -> HostSandbox:
        """The sandbox kept for the thread of the dropped `sandbox`: `sandbox` itself, put
        back, when the thread has none."""
        with self._lock:
            if self._closed:
                raise SandboxClosedError(f"The {self.name} sandbox provider has been shut down.")
            live = self._by_id.get(sandbox.sandbox_id)
            if live is None:
                with sandbox._lock:
                    sandbox._dropped = False
                live = self._keep(sandbox)
            return live

    def existing_sandbox_id(self, thread_paths: ThreadPaths) -> str | None:
        """The id of the thread's sandbox when `get` finds it: kept, or dropped and its
        thread's directory there (nothing is made)."""
        with self._lock:
            if thread_paths.base not in self._base_numbers:
                return None
            sandbox_id = self._id_of(thread_paths)
            if sandbox_id in self._by_id or thread_paths.user_data.is_dir():
                return sandbox_id
            return None

    def get(self, sandbox_id: str) -> HostSandbox:
        """The sandbox `sandbox_id` names, made again from its thread's paths if it was
        dropped (`_thread_of` says when there is none). `get` holds nothing: one it made
        is kept until the next sweep after nothing of it runs (see the class)."""
        with self._lock:
            sandbox = self._by_id.get(sandbox_id)
            if sandbox is None:
                paths = self._thread_of(sandbox_id)
                sandbox = self._keep(self._new_sandbox(sandbox_id, paths))
            elif not sandbox._holders:  # a caller no run holds it for: the next sweep's
                self._unswept[sandbox_id] = sandbox
            return sandbox

    def release(self, sandbox_id: str) -> None:
        """The caller's run is done with the sandbox: stop what finished commands left
        running in the background, and sweep (the sandbox is dropped once no run holds
        it and nothing of it runs)."""
        run = current_run()
        with self._lock:
            sandbox = self._by_id.get(sandbox_id)
            if sandbox is None:
                self._thread_of(sandbox_id)  # raises for an id that names no thread
            else:
                with sandbox._lock:
                    sandbox._holders.discard(run if run is not None else OUTSIDE_A_RUN)
        if run is not None:
            run.forget((self, sandbox_id))  # let go of here: nothing to do at its end
        if sandbox is not None:
            sandbox.end_run()
            self._to_sweep(sandbox)
        self._sweep()

    def _run_ended(self, sandbox_id: str, run: RunScope) -> None:
        """`run` ended holding the sandbox (it was cancelled or failed before releasing
        it): stop its commands still running, let go of it, and sweep."""
        with self._lock:
            sandbox = self._by_id.get(sandbox_id)
        if sandbox is None:
            return
        sandbox._stop_commands_of(run)
        with sandbox._lock:
            if run not in sandbox._holders:
                return
            sandbox._holders.discard(run)
        sandbox.end_run()
        self._to_sweep(sandbox)
        self._sweep()

    def _to_sweep(self, sandbox: HostSandbox) -> None:
        with self._lock:
            if self._by_id.get(sandbox.sandbox_id) is sandbox:
                self._unswept[sandbox.sandbox_id] = sandbox

    def _sweep(self) -> None:
        """Drop every sandbox no one holds once nothing of it runs: first stop what its
        finished commands left in the background (commands `get` callers ran, or the
        last ones of a run that ended without releasing).

        It looks at the sandboxes that may have become droppable since the last sweep
        (`_unswept`): each one made or taken back, each one `get` handed out while no run
        held it, each one released or let go of at a run's end, and each one a sweep could
        not drop yet. One held now
        is left to its release; one only its namespace keeps, to the namespace's end
        (`HostSandbox._went_idle`)."""
        with self._lock:
            candidates = list(self._unswept.values())
            self._unswept.clear()
        for sandbox in candidates:
            with sandbox._lock:
                if sandbox._holders:
                    continue
                leftovers = bool(sandbox._sessions) and not sandbox._running
            if leftovers:
                sandbox.end_run()
            if self._drop(sandbox):
                continue
            with sandbox._lock:
                waiting = not sandbox._holders and (sandbox._running or sandbox._sessions)
            if waiting:
                self._to_sweep(sandbox)

    def interrupt(self) -> None:
        with self._lock:
            sandboxes = list(self._by_id.values())
        for sandbox in sandboxes:
            sandbox.interrupt()

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            sandboxes = list(self._by_id.values())
            self._by_id.clear()
            self._unswept.clear()
        for sandbox in sandboxes:
            sandbox.close()

    def _not_found(self, sandbox_id: str) -> str:
        state = "has been shut down" if self._closed else "has no such sandbox"
        return (
            f"The {self.name} sandbox provider {state}: {sandbox_id!r}. Acquire a sandbox for the "
            "thread first and use the id acquire() returned."
        )


OUTSIDE_A_RUN = object()
"""The holder of a sandbox acquired outside any run (`HostSandboxProvider`)."""

_SANDBOX_ID = re.compile(r"(?P<user>[^/#]+)/(?P<thread>[^/#]+)(?:#(?P<number>[2-9]|[1-9][0-9]+))?")
"""What follows a provider's name and ``:`` in the ids it makes (`HostSandboxProvider`)."""
