"""The worker process that resumes stopped runs, as after a crash and a restart.

It never ran the first half of any run it resumes: everything a plugin keeps
in memory is gone. One JSON job per line goes in (the conformance class, the
home and the thread), one marked JSON result per line comes out.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from typing import Any

__all__ = ["serve", "worker"]

_WORKER_MARK = "@@antler-conformance@@ "


class _Worker:
    """A Python process, started once per session, that resumes stopped runs.

    It never ran the first half of any run it resumes: everything a plugin
    keeps in memory is gone, as after a crash and a restart.
    """

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from antler.testing.conformance.worker import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env)
        self.lock = threading.Lock()

    def resume(self, owner: type, home: str, thread: str) -> dict[str, Any]:
        job = {"class": f"{owner.__module__}:{owner.__qualname__}", "home": home,
               "thread": thread, "sys_path": list(sys.path)}
        process = self.process
        assert process.stdin is not None and process.stdout is not None
        with self.lock:
            process.stdin.write(json.dumps(job) + "\n")
            process.stdin.flush()
            for line in process.stdout:
                if line.startswith(_WORKER_MARK):
                    return dict(json.loads(line[len(_WORKER_MARK):]))
        return {"error": f"the worker process ended (exit code {process.wait()})"}

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


@functools.cache
def worker() -> _Worker:
    """The session's worker process (started on first use, stopped at exit)."""
    import atexit

    worker = _Worker()
    atexit.register(worker.close)
    return worker


def serve() -> None:
    """The worker's loop: one JSON job per line in, one marked JSON result per line out."""
    import importlib
    import traceback

    out = sys.stdout
    sys.stdout = sys.stderr  # what plugins print must not mix with the results
    for line in sys.stdin:
        try:
            job = json.loads(line)
            for entry in reversed(job["sys_path"]):
                if entry not in sys.path:
                    sys.path.insert(0, entry)
            module, _, qualname = job["class"].partition(":")
            owner: Any = importlib.import_module(module)
            for part in qualname.split("."):
                owner = getattr(owner, part)
            result = owner.battery().resume_here(job["home"], job["thread"])
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            if "<locals>" in line:
                detail += "; define the conformance class at module level so it can be imported"
            result = {"error": detail}
        out.write(_WORKER_MARK + json.dumps(result, default=str) + "\n")
        out.flush()
