"""Benchmark: the demo's ``bash`` call through the real sandbox tool, against a bare tool.

    python -m benchmarks.bench_sandbox_tool [--runs N] [--command TEXT] [--provider NAME]

`bench_sandbox` times `execute_command` alone; this one times what a run pays
around it, interleaved so that load on the machine affects every variant alike:

* ``bare tool``: a LangChain ``@tool`` that runs ``subprocess.run(["bash", "-c",
  command], capture_output=True)``, the bare agent's stand-in in `bench_fusion`
  (the baseline);
* ``first``: the sandbox plugin's ``bash`` tool on a fresh thread (its directories
  and an upload already there, as after `stage_upload`): acquires the thread's
  sandbox, rewrites the virtual paths, runs the command, records the sandbox;
* ``later``: a second call of the same thread and run;
* ``release``: the sandbox middleware's ``after_agent`` that ends the run (the
  end-of-run sweep of what the commands left behind).

The sandbox provider is ``local`` unless ``--provider`` names another (``bwrap``:
each round's thread then adopts the spare namespace, which is replaced, untimed,
before the next round, as it is while a model is called; each round's namespace is
closed, untimed, after it).

Reported per variant: the median CPU time of the calling thread (`time.thread_time`,
which other processes' load moves little; the commands' own CPU is the child's and
not counted) and the median wall time, each with the difference to the bare tool.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_fusion import bare_bash

DEMO_COMMAND = "wc -l /mnt/user-data/uploads/sales.csv"
VARIANTS = ("bare tool", "first", "later", "release")


class Scenario:
    """The bare tool and the sandbox tool and middleware over one local provider."""

    def __init__(self, base: Path, command: str, provider: str = "local") -> None:
        from antler.plugin_api.paths import PathLayout
        from antler.plugin_api.sandbox import load_sandbox_provider
        from antler.plugin_api.toolargs import with_resolved_signatures
        from antler.plugins.sandbox.config import SandboxConfig
        from antler.plugins.sandbox.middleware import SandboxMiddleware
        from antler.plugins.sandbox.tools import build_tools

        self.command = command
        self.layout = PathLayout(base / "antler")
        self.provider = load_sandbox_provider(provider, max_output_bytes=8 * 1024 * 1024)
        # As the agent builds them: hints and signatures worked out once.
        tools = with_resolved_signatures(build_tools(self.provider, self.layout, SandboxConfig()))
        self.tool = next(t for t in tools if t.name == "bash")
        self.middleware = SandboxMiddleware(self.provider, self.layout)
        self.bare = bare_bash(base / "bare")  # as LangChain's bare agent gets it
        self.count = 0
        self._paths: Any = None

    def settle(self) -> None:
        """Untimed, between rounds: close the last round's sandbox, and wait until the
        provider's spare namespace (if it keeps one) has been replaced."""
        if self._paths is not None:
            sandbox_id = self.provider.existing_sandbox_id(self._paths)
            if sandbox_id is not None and self.provider.name != "local":
                self.provider.get(sandbox_id).close()
        self.provider.warm(self.layout)  # as the next run's start does
        settings = getattr(self.provider, "_settings", None)
        spares = getattr(settings, "spares", None)
        for _ in range(1000):
            if spares is None or spares.ready((self.layout.base / "users",
                                               self.layout.skill_roots)):
                return
            time.sleep(0.005)

    def thread(self) -> tuple[Any, Any, dict[str, Any]]:
        """A fresh thread with its directories and an upload: (tool runtime, run runtime, state)."""
        from langchain.tools import ToolRuntime
        from langgraph.runtime import Runtime

        from antler.contracts.runcontext import RunContext

        self.count += 1
        context = RunContext(thread_id=f"bench-{self.count}", user_id="bench")
        paths = self._paths = self.layout.thread(context.user_id, f"bench-{self.count}")
        paths.ensure_directories()
        (paths.uploads / "sales.csv").write_text("month,revenue\n2026-01,1200\n",
                                                 encoding="utf-8")
        state: dict[str, Any] = {"messages": [], "thread_data": paths.as_state()}
        tool_runtime = ToolRuntime(state=state, context=context, config={}, stream_writer=None,
                                   tool_call_id="call_bash", store=None)
        return tool_runtime, Runtime(context=context), state

    def call(self, tool: Any, args: dict[str, Any]) -> Any:
        return tool.invoke({"name": tool.name, "args": args, "id": "call_bash",
                            "type": "tool_call"})

    def steps(self) -> list[tuple[str, Callable[[], object]]]:
        """One round: each variant once, in order (the sandbox's steps build on each other)."""
        tool_runtime, runtime, state = self.thread()
        args = {"command": self.command, "runtime": tool_runtime}

        def first() -> None:
            result = self.call(self.tool, args)
            state.update(result.update)  # the sandbox is recorded, as the graph would do

        return [("bare tool", lambda: self.call(self.bare, {"command": self.command})),
                ("first", first),
                ("later", lambda: self.call(self.tool, args)),
                ("release", lambda: self.middleware.after_agent(state, runtime))]


def measure(runs: int, command: str, provider: str = "local") -> dict[str, tuple[float, float]]:
    """Median (thread CPU, wall) microseconds of each variant over `runs` interleaved rounds."""
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    wall: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="antler-bench-tool-") as scratch:
        scenario = Scenario(Path(scratch), command, provider)
        try:
            for step in scenario.steps():  # warm up: imports, caches, the watchdog
                step[1]()
            for _ in range(runs):
                scenario.settle()
                for name, step in scenario.steps():
                    started_cpu, started = time.thread_time(), time.perf_counter()
                    step()
                    wall[name].append((time.perf_counter() - started) * 1e6)
                    cpu[name].append((time.thread_time() - started_cpu) * 1e6)
        finally:
            scenario.provider.shutdown()
    return {name: (statistics.median(cpu[name]), statistics.median(wall[name]))
            for name in VARIANTS}


def report(medians: dict[str, tuple[float, float]], command: str, runs: int,
           provider: str = "local") -> str:
    bare_cpu, bare_wall = medians["bare tool"]
    lines = [f"the bash tool ({command!r}, {provider} provider), median of {runs} interleaved "
             f"rounds (load average {os.getloadavg()[0]:.1f}), microseconds:",
             f"{'variant':<10} {'cpu':>8} {'- bare':>8} {'wall':>8} {'- bare':>8}"]
    for name, (cpu, wall) in medians.items():
        if name == "release":  # no counterpart in the bare agent
            lines.append(f"{name:<10} {cpu:>8.0f} {'':>8} {wall:>8.0f}")
            continue
        lines.append(f"{name:<10} {cpu:>8.0f} {cpu - bare_cpu:>+8.0f} {wall:>8.0f} "
                     f"{wall - bare_wall:>+8.0f}")
    first, later, release = (medians[name][0] for name in ("first", "later", "release"))
    lines.append(f"a run's sandbox bash (first + release) costs {first + release - bare_cpu:+.0f} "
                 f"us of CPU over the bare tool; a later call {later - bare_cpu:+.0f} us")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--command", default=DEMO_COMMAND)
    parser.add_argument("--provider", default="local", help="the sandbox provider (local, bwrap)")
    args = parser.parse_args(argv)
    print(report(measure(args.runs, args.command, args.provider), args.command, args.runs,
                 args.provider))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
