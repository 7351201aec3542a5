"""bashlex in a worker process, bounded in time and memory.

bashlex is a third-party parser written in Python. On some short malformed
commands (backquotes, `~` and an unterminated `${`, for instance) it loops
without end and allocates about 50 MB per CPU-second; a loop in a parser never
yields, so no in-process timeout can stop it. Every bashlex call therefore runs
in a worker process:

* the worker caps its own address space (`RLIMIT_AS`, `MEMORY_LIMIT`) before it
  imports bashlex, so a blow-up ends in `MemoryError` (or the worker's death),
  never in the host's memory;
* the caller waits at most `TIMEOUT` seconds for an answer. A late worker is
  killed and replaced in the background, and the caller gets `Unsupported`:
  the classifier then reads the command with the linear tokenizer, as it does
  for every command bashlex cannot parse;
* workers are reused: a call costs one round trip through a pipe (the parsed
  `Script` comes back pickled), not a process start. `python -m
  benchmarks.bench_sandbox_audit` measures it against bashlex in process.

The worker maps bashlex's tree onto `script.Script` itself (`bashlex_walker`),
so only plain data crosses the pipe. Several threads may parse at once: each
call takes an idle worker or starts one. Where no worker can be started, every
command goes to the tokenizer: bashlex never runs unbounded in the caller.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time

from .bashlex_walker import Unsupported
from .script import Script

__all__ = ["MEMORY_LIMIT", "STARTUP_TIMEOUT", "TIMEOUT", "WARM", "failures", "parse", "shutdown",
           "warm"]

TIMEOUT = 0.25
"""Seconds one parse may take at most (bashlex takes ~0.1 s for 2,000 characters)."""

TIMEOUT_BASE = 0.05
TIMEOUT_PER_CHAR = 100e-6
"""Each parse gets `TIMEOUT_BASE + TIMEOUT_PER_CHAR * len(text)` seconds (at most
`TIMEOUT`): twice what bashlex needs per character, so a short command that sends it
into a loop costs tens of milliseconds, not the full `TIMEOUT`."""

STARTUP_TIMEOUT = 10.0
"""Seconds a new worker may take to start (importing Python and bashlex)."""

MEMORY_LIMIT = 256 * 1024 * 1024
"""The worker's address-space cap in bytes."""

MAX_REPLY = 16 * 1024 * 1024
"""A reply larger than this is not read (the worker is replaced)."""

MAX_IDLE = 2
"""Idle workers kept for reuse."""

WARM = 1
"""Workers `warm` starts ahead: one for the first command. Each start costs a Python
process and bashlex's parser tables (about 140 ms of CPU), so a second one (for a
parallel call, or to succeed a worker killed over a loop) starts when first needed:
a one-shot `antler run` that parses one command starts one worker, not two."""

WALL_FACTOR = 8.0
"""On a busy machine a parse may wait this many times its limit for a core."""

_HEADER = struct.Struct("!I")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_READY = b"R"

# The worker imports this module without running the package `__init__`s above it
# (they load the plugin platform, which bashlex does not need): each enclosing
# package is registered empty with its real path, so the modules keep their names
# and the `Script` they pickle is the caller's class.
_BOOTSTRAP = """
import importlib, json, sys, types
name, paths, limit = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
for package, path in paths:
    module = types.ModuleType(package)
    module.__path__ = path
    sys.modules[package] = module
importlib.import_module(name)._serve(limit)
"""


def _package_paths() -> list[tuple[str, list[str]]]:
    parts = __name__.split(".")[:-1]
    names = [".".join(parts[:index]) for index in range(1, len(parts) + 1)]
    return [(name, list(getattr(sys.modules[name], "__path__", []))) for name in names]


def time_limit(text: str) -> float:
    """Seconds the worker may take to parse `text`."""
    return min(TIMEOUT, TIMEOUT_BASE + TIMEOUT_PER_CHAR * len(text))


class _Worker:
    """One worker process and its pipes."""

    __slots__ = ("proc", "ready")

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, __name__, json.dumps(_package_paths()),
             str(MEMORY_LIMIT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            bufsize=0, close_fds=True)
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=1.0)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def cpu_seconds(self) -> float | None:
        """CPU time the worker has used so far, where the platform tells (Linux)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS

    def _read(self, count: int, limit: float, cpu_start: float | None = None) -> bytes:
        """`count` bytes from the worker within `limit` seconds.

        With `cpu_start` the limit is on the worker's CPU time: a worker that
        is only waiting for a loaded machine's cores gets more wall time, up to
        `WALL_FACTOR` times the limit; one that spends it computing does not.
        """
        stdout = self.proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        start = time.monotonic()
        deadline = start + limit
        chunks: list[bytes] = []
        while count > 0:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                used = self.cpu_seconds() if cpu_start is not None else None
                if used is None or cpu_start is None:
                    raise TimeoutError
                spent = used - cpu_start
                if spent >= limit or time.monotonic() - start >= limit * WALL_FACTOR:
                    raise TimeoutError
                deadline = time.monotonic() + max(limit - spent, 0.01)
                continue
            chunk = os.read(fd, min(count, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def parse(self, text: str) -> Script:
        """Raises `Unsupported`, `TimeoutError`, `EOFError` or `OSError`."""
        if not self.ready:
            if self._read(1, STARTUP_TIMEOUT) != _READY:
                raise EOFError
            self.ready = True
        stdin = self.proc.stdin
        assert stdin is not None
        data = text.encode("utf-8", "surrogatepass")
        message = memoryview(_HEADER.pack(len(data)) + data)
        cpu_start = self.cpu_seconds()
        while message:
            message = message[stdin.write(message) or 0:]
        limit = time_limit(text)
        (size,) = _HEADER.unpack(self._read(_HEADER.size, limit, cpu_start))
        if size > MAX_REPLY:
            raise EOFError
        status, value = pickle.loads(self._read(size, limit, cpu_start))
        if status != "ok" or not isinstance(value, Script):
            raise Unsupported(str(value))
        return value


class _Pool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []
        self.broken = False      # no worker could be started: bashlex is off

    def take(self) -> _Worker | None:
        with self.lock:
            while self.idle:
                worker = self.idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
            if self.broken:
                return None
        try:
            worker = _Worker()
        except OSError:
            self.broken = True
            return None
        self.replace(None)    # and a spare, so a worker killed later has a successor ready
        return worker

    def give_back(self, worker: _Worker) -> None:
        with self.lock:
            if len(self.idle) < MAX_IDLE and worker.alive():
                self.idle.append(worker)
                return
        worker.kill()

    def replace(self, worker: _Worker | None) -> None:
        """Kill a worker that failed, and start its successor while the caller moves on.

        The successor goes to the back of the idle list: a worker already running
        (one another call gave back) takes the next command without waiting.
        """
        if worker is not None:
            worker.kill()
        with self.lock:
            if self.broken or len(self.idle) >= MAX_IDLE:
                return
        with contextlib.suppress(OSError):
            successor = _Worker()
            with self.lock:
                self.idle.insert(0, successor)

    def shutdown(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for worker in idle:
            worker.kill()


_POOL = _Pool()

_failures = 0
_failures_lock = threading.Lock()


def failures() -> int:
    """How many parses so far got no answer from bashlex for want of a working worker.

    Such a parse (none could start, it ran out of time, the worker died) is
    read by the tokenizer instead, an outcome that depends on the machine, not
    only on the command; bashlex refusing a command is not counted. A caller
    that sees this number unchanged across a classification knows its verdict
    is the one the command always gets.
    """
    return _failures


def _failed() -> None:
    global _failures
    with _failures_lock:
        _failures += 1


def parse(text: str) -> Script:
    """`text` parsed by bashlex in a worker; `Unsupported` when it cannot, or not in time."""
    worker = _POOL.take()
    if worker is None:
        _failed()
        raise Unsupported("no parser worker could be started")
    try:
        script = worker.parse(text)
    except Unsupported:
        _POOL.give_back(worker)
        raise
    except TimeoutError:
        _failed()
        _POOL.replace(worker)
        raise Unsupported(f"bashlex took longer than {time_limit(text):.2f} s") from None
    except (EOFError, OSError, pickle.UnpicklingError, ValueError, struct.error):
        _failed()
        _POOL.replace(worker)
        raise Unsupported("the parser worker failed (memory cap or crash)") from None
    _POOL.give_back(worker)
    return script


def warm() -> None:
    """Start workers ahead of the first command, so that command does not wait for one."""
    with _POOL.lock:
        missing = 0 if _POOL.broken else WARM - len(_POOL.idle)
    for _ in range(missing):
        with contextlib.suppress(OSError):
            _POOL.give_back(_Worker())


def shutdown() -> None:
    """Stop the idle workers (they also stop by themselves when their caller exits)."""
    _POOL.shutdown()


atexit.register(shutdown)


# -- the worker side ---------------------------------------------------------------------------

def _read_exactly(stream: object, count: int) -> bytes | None:
    read = stream.read  # type: ignore[attr-defined]
    chunks: list[bytes] = []
    while count > 0:
        chunk = read(count)
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _serve(memory_limit: int) -> None:
    try:
        import resource
    except ImportError:  # no rlimits on this platform: the timeout still holds
        pass
    else:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    sys.setrecursionlimit(4000)
    from .bashlex_walker import parse as parse_here

    parse_here("true")    # imports bashlex and builds its tables before the first command
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sink.write(_READY)
    sink.flush()
    while True:
        header = _read_exactly(source, _HEADER.size)
        if header is None:
            return
        (size,) = _HEADER.unpack(header)
        data = _read_exactly(source, size)
        if data is None:
            return
        fatal = False
        try:
            reply: tuple[str, object] = ("ok", parse_here(data.decode("utf-8", "surrogatepass")))
        except Unsupported as exc:
            reply = ("unsupported", str(exc))
        except MemoryError:
            reply, fatal = ("unsupported", "memory cap reached"), True
        except BaseException as exc:  # the worker answers every request it reads
            reply = ("unsupported", f"{type(exc).__name__}: {exc}")
        try:
            payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except (RecursionError, MemoryError):
            payload = pickle.dumps(("unsupported", "result too deep"))
        sink.write(_HEADER.pack(len(payload)) + payload)
        sink.flush()
        if fatal:
            return
