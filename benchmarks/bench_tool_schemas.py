"""Benchmark: built-in plugin tools' declared schemas against ``Annotated`` hints, per call.

    python -m benchmarks.bench_tool_schemas [--calls N] [--rounds N]

The sandbox tools and ``view_image`` declare their arguments as pydantic models
of plain types. Before, each schema was inferred from the function's
``Annotated`` hints (and a ``ToolRuntime[Any, Any]`` runtime), which LangChain
reads back and rebuilds on every call (`get_all_basemodel_annotations`). This
builds, for each sandbox tool, a copy as the hints defined it (its function's
code with the hints as annotations, and the schema they gave, inferred as the
old code inferred it: from the hints without the runtime, then the runtime added
with ``Field(exclude=True)``) beside the declared one, and times one call of
each interleaved in one process (thread CPU time):

* ``quiet``: the call as a plugin tool nothing observes makes it
  (`antler.runtime.quiettools.quiet_call`);
* ``invoke``: LangChain's own tool run (an observed call, or any other caller).

Each call runs the tool for real over a local sandbox (``ls``, ``read_file`` of
a small file, ``glob``, ``grep``, ...), so the figures are whole calls; the
difference is what the schema costs. Reported per tool and path: the median
microseconds per call of each schema and the median paired difference.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import os
import tempfile
import time
import types
from pathlib import Path
from typing import Annotated, Any

from benchmarks.interval import paired_medians

CALLS: dict[str, dict[str, Any]] = {
    "ls": {},
    "read_file": {"path": "notes.txt", "end_line": 2},
    "write_file": {"path": "out.txt", "content": "hello"},
    "str_replace": {"path": "edit.txt", "old": "a", "new": "a"},
    "glob": {"pattern": "*.txt", "path": "/mnt/user-data/workspace"},
    "grep": {"pattern": "line", "path": "/mnt/user-data/workspace"},
}


def hinted_copy(tool: Any) -> Any:
    """A copy of `tool` as the hints defined it: the schema they gave, and a copy of its
    function (same code, defaults and closure) whose annotations are the hints."""
    from langchain.tools import ToolRuntime

    func = tool.func
    hinted_func = types.FunctionType(func.__code__, func.__globals__, func.__name__,
                                     func.__defaults__, func.__closure__)
    hints: dict[str, Any] = {}
    for name, field in tool.args_schema.model_fields.items():
        hints[name] = ToolRuntime[Any, Any] if name == "runtime" else \
            Annotated[field.annotation, field.description]  # type: ignore[name-defined]
    hints["return"] = func.__annotations__.get("return")
    hinted_func.__annotations__ = hints
    hinted_func.__signature__ = inspect.signature(hinted_func)  # type: ignore[attr-defined]
    hinted = copy.copy(tool)
    hinted.func = hinted_func
    hinted.args_schema = hinted_schema(tool)
    return hinted


def hinted_schema(tool: Any) -> Any:
    """The argument schema `tool`'s function gave when its parameters were ``Annotated``
    hints (as the old code inferred it)."""
    from langchain.tools import ToolRuntime
    from langchain_core.tools.base import create_schema_from_function
    from pydantic import Field, create_model

    declared = tool.args_schema
    parameters = []
    hints: dict[str, Any] = {}
    for name, field in declared.model_fields.items():
        if name == "runtime":
            continue
        hints[name] = Annotated[field.annotation, field.description]  # type: ignore[name-defined]
        default = inspect.Parameter.empty if field.is_required() else field.default
        parameters.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            default=default, annotation=hints[name]))
    parameters.sort(key=lambda p: p.default is not inspect.Parameter.empty)

    def hinted(**_kwargs: Any) -> Any:
        raise NotImplementedError

    hinted.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    hinted.__annotations__ = hints
    hinted.__name__ = hinted.__qualname__ = tool.name
    schema: Any = create_schema_from_function(tool.name, hinted)
    return create_model(schema.__name__, __base__=schema, __doc__=schema.__doc__,
                        runtime=(ToolRuntime[Any, Any], Field(exclude=True)))


def measure(calls: int, rounds: int) -> dict[tuple[str, str], dict[str, float]]:
    """Median microseconds per call of each (tool, path), declared against hinted."""
    from langchain.tools import ToolRuntime

    from antler.contracts.runcontext import RunContext
    from antler.plugin_api.paths import PathLayout
    from antler.plugin_api.toolargs import with_resolved_signatures
    from antler.plugins.sandbox.config import SandboxConfig
    from antler.plugins.sandbox.tools import build_tools
    from antler.runtime.quiettools import quiet_call
    from antler.runtime.sandbox.local import LocalSandboxProvider

    samples: dict[tuple[str, str], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="antler-bench-schemas-") as scratch:
        layout = PathLayout(Path(scratch))
        provider = LocalSandboxProvider()
        tools = with_resolved_signatures(build_tools(provider, layout, SandboxConfig()))
        context = RunContext(thread_id="bench", user_id="bench")
        paths = layout.thread(context.user_id, "bench")
        paths.ensure_directories()
        for name in ("notes.txt", "edit.txt"):
            (paths.workspace / name).write_text("a line\nanother line\n", encoding="utf-8")
        state: dict[str, Any] = {"messages": [], "thread_data": paths.as_state(),
                                 "sandbox": None}
        runtime = ToolRuntime(state=state, context=context, config={}, stream_writer=None,
                              tool_call_id="call_1", store=None)
        tools[0].invoke({"name": tools[0].name, "args": {"command": "true", "runtime": runtime},
                         "id": "call_1", "type": "tool_call"})  # acquire the sandbox
        state["sandbox"] = {"sandbox_id": provider.acquire(paths)}
        pairs = []
        for tool in tools:
            if tool.name not in CALLS:
                continue
            pairs.append((tool.name, {"declared": tool, "hinted": hinted_copy(tool)}))

        def call(tool: Any, path: str) -> None:
            tool_call = {"name": tool.name, "args": {**CALLS[tool.name], "runtime": runtime},
                         "id": "call_1", "type": "tool_call"}
            if path == "quiet":
                quiet_call(tool, tool_call, None, {})
            else:
                tool.invoke(tool_call)

        for rnd in range(rounds + 1):
            for name, variants in pairs:
                for path in ("quiet", "invoke"):
                    order = ("declared", "hinted") if rnd % 2 else ("hinted", "declared")
                    for which in order:
                        tool = variants[which]
                        started = time.thread_time()
                        for _ in range(calls):
                            call(tool, path)
                        spent = (time.thread_time() - started) / calls * 1e6
                        if rnd:  # round 0 warms up
                            samples.setdefault((name, path), {}).setdefault(
                                which, []).append(spent)
    return paired_medians(samples, "hinted", "declared")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per sample")
    parser.add_argument("--rounds", type=int, default=15, help="samples per variant")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    results = measure(args.calls, args.rounds)
    print(f"us per call (thread CPU), medians of {args.rounds} samples of {args.calls} calls; "
          f"load {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"{'tool':<12} {'path':<7} {'hints':>8} {'declared':>9} {'saved':>7}")
    for (name, path), figures in results.items():
        print(f"{name:<12} {path:<7} {figures['hinted']:>8.1f} {figures['declared']:>9.1f} "
              f"{figures['difference']:>7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

