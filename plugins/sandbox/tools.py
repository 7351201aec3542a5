"""The sandbox tools: bash, ls, read_file, glob, grep, write_file and str_replace.

Each tool runs inside the thread's sandbox and speaks only virtual paths
(``/mnt/user-data/{workspace,uploads,outputs}/...``; relative paths are taken
from the workspace). On the first use in a thread a tool creates the thread's
three directories together and acquires the sandbox, and records
``{"sandbox_id": ...}`` in state ``sandbox`` by returning a `Command`. Every call
takes the sandbox the provider hands out for the thread's own paths (acquiring
again gives the same one); the id in state is only a record, never used to find
a sandbox, since a thread's owner can write its state.

Failures are answers, not crashes: a path that leaves the thread's files, a
missing file or an ambiguous edit comes back to the model as a readable error
`ToolMessage` (``status="error"``), never a traceback. Every result passes
through the thread's path mapper on its way out, so host paths never reach the
model, whatever the provider printed.

Long output: ``read_file`` returns at most ``max_output_bytes`` characters per
call (pages through ``start_line``/``end_line``). ``bash`` hands everything
the sandbox captured (``command_capture_bytes`` per stream) to a tool-output
budget when the build has one, which saves it whole and shows the model a
synopsis; without one it cuts at ``max_output_bytes`` too; ``glob`` and ``grep``
results (bounded by the sandbox, see `antler.runtime.sandbox.search`) are handed
over the same way. ``ls``, ``glob`` and ``grep`` do not show saved tool results
(``outputs/.tool-results``) unless asked for that folder.

Confinement: the sandbox opens every path beneath a descriptor of the thread's
root (`antler.plugin_api.confined`), so a parallel call or the model's own
``bash`` swapping a name for a symlink cannot lead a file tool outside.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field

from antler.plugin_api import (
    SKILLS_VIRTUAL_ROOT,
    VIRTUAL_ROOT,
    AntlerError,
    PathLayout,
    Sandbox,
    SandboxProvider,
    ThreadPaths,
    is_tool_result_path,
)

from .config import SandboxConfig
from .middleware import SandboxThreadError, recorded_sandbox_id, thread_paths

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["TOOL_METADATA", "SandboxThreadError", "SandboxTools", "ToolFailure", "build_tools"]

logger = logging.getLogger(__name__)

TOOL_METADATA: dict[str, Any] = {"antler": {"sandbox": True, "remote_content": False}}
"""Metadata on every sandbox tool: runs in the sandbox; its output is local, not fetched."""

DEFAULT_LS_PATH = VIRTUAL_ROOT
WORKSPACE = f"{VIRTUAL_ROOT}/workspace"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


class ToolFailure(AntlerError):
    """A tool cannot do what was asked; the message is shown to the model as is."""


@dataclass
class _Session:
    """The thread's paths and sandbox for one tool call."""

    paths: ThreadPaths
    sandbox: Sandbox
    acquired: str | None  # the id to record in state, when this call acquired it

    def shown(self, path: str) -> str:
        """How to name ``path`` to the model: its canonical virtual form when it has one."""
        try:
            return self.paths.mapper.virtual_name(path)
        except AntlerError:
            return repr(path)


def _describe(exc: BaseException, session: _Session | None) -> str:
    """A one-line, model-facing description of a failure, naming files by virtual path."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        # The OS names the host file: show its virtual name, or none at all.
        shown = None
        if session is not None:
            try:
                shown = session.paths.mapper.to_virtual(exc.filename)
            except AntlerError:
                shown = None
        return f"{exc.strerror}: {shown}" if shown else f"{exc.strerror}."
    if isinstance(exc, (AntlerError, OSError, ValueError, UnicodeError)):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


class SandboxTools:
    """Builds the sandbox tools over one provider, path layout and config."""

    def __init__(self, provider: SandboxProvider, layout: PathLayout,
                 config: SandboxConfig, budgeted: Callable[[], bool] = lambda: False) -> None:
        self.provider = provider
        self.layout = layout
        self.config = config
        self.budgeted = budgeted
        """Whether a tool-output budget saves long output (then bash hands over all it kept)."""

    # -- the per-call session ------------------------------------------------------------

    def open(self, runtime: ToolRuntime) -> _Session:
        """The thread's paths and sandbox, acquiring the sandbox when state has none."""
        paths = thread_paths(self.layout, runtime)
        state = runtime.state or {}
        recorded = state.get("thread_data")
        if recorded and recorded != paths.as_state():
            raise ToolFailure(
                "The thread's file locations in state do not match this run's thread; "
                "refusing to touch files."
            )
        # The thread's sandbox is the one the provider hands out for the thread's own
        # paths (from the run's identity). The id in state only says whether that is
        # recorded yet: state is the thread owner's to write (`update_state`), and an
        # id it names is never used as such, or any owner could work in another
        # thread's sandbox. Acquiring is idempotent: the same thread gets the same id.
        sandbox_id = self.provider.acquire(paths)
        recorded = recorded_sandbox_id(state)
        if recorded is not None and recorded != sandbox_id:
            logger.warning("state names sandbox %r, not this thread's %r: using the thread's",
                           recorded, sandbox_id)
        return _Session(paths, self.provider.get(sandbox_id),
                        None if recorded == sandbox_id else sandbox_id)

    def run(self, runtime: ToolRuntime, name: str,
            action: Callable[[_Session], str]) -> ToolMessage | Command[Any]:
        """Run ``action`` in the thread's sandbox; turn every outcome into a message."""
        session: _Session | None = None
        status = "success"
        try:
            session = self.open(runtime)
            text = action(session)
        except Exception as exc:
            if not isinstance(exc, (AntlerError, OSError, ValueError, UnicodeError)):
                logger.exception("sandbox tool %s failed unexpectedly", name)
            text, status = f"Error: {_describe(exc, session)}", "error"
        if session is not None:
            text = session.paths.mapper.virtualize_text(text)
        message = ToolMessage(
            content=text, tool_call_id=runtime.tool_call_id or "", name=name, status=status
        )
        if session is not None and session.acquired:
            return Command(update={"sandbox": {"sandbox_id": session.acquired},
                                   "messages": [message]})
        return message

    # -- the actions ---------------------------------------------------------------------

    def bash(self, session: _Session, command: str) -> str:
        if not command.strip():
            raise ToolFailure("The command is empty.")
        result = session.sandbox.execute_command(command, timeout=self.config.command_timeout)
        parts = [result.stdout.rstrip("\n")] if result.stdout else []
        if result.stderr:
            parts.append(f"[stderr]\n{result.stderr.rstrip()}")
        if result.exit_code != 0 and not result.timed_out:
            parts.append(f"[exit code {result.exit_code}]")
        text = "\n".join(parts) if parts else "(no output)"
        return text if self.budgeted() else self._capped(text, "output", "")

    def ls(self, session: _Session, path: str) -> str:
        entries = session.sandbox.list_dir(path or DEFAULT_LS_PATH, max_depth=2)
        if not is_tool_result_path(path or DEFAULT_LS_PATH):
            # Saved tool results are the harness's notes, not the agent's files.
            entries = [entry for entry in entries if not is_tool_result_path(entry)]
        return "\n".join(entries) if entries else f"{session.shown(path)} is empty."

    def read_file(self, session: _Session, path: str, start_line: int | None,
                  end_line: int | None) -> str:
        text = session.sandbox.read_file(path)
        if start_line is not None or end_line is not None:
            lines = text.splitlines(keepends=True)
            first = max(1, start_line or 1)
            last = len(lines) if end_line is None else end_line
            if last < first:
                raise ToolFailure(f"end_line {end_line} is before start_line {first}.")
            text = "".join(lines[first - 1:last])
        if not text:
            return f"({session.shown(path)} is empty)" if start_line is None else "(no lines)"
        return self._capped(text, "file", "; read the rest with start_line/end_line")

    def _capped(self, text: str, what: str, advice: str) -> str:
        """``text`` cut to ``max_output_bytes`` characters, with a note saying so."""
        limit = self.config.max_output_bytes
        if len(text) <= limit:
            return text
        return (f"{text[:limit]}\n[{what} truncated: showing the first {limit} of {len(text)} "
                f"characters{advice}]")

    def write_file(self, session: _Session, path: str, content: str, append: bool) -> str:
        session.sandbox.write_file(path, content, append=append)
        verb = "Appended" if append else "Wrote"
        return f"{verb} {len(content)} characters to {session.shown(path)}."

    def str_replace(self, session: _Session, path: str, old: str, new: str) -> str:
        if not old:
            raise ToolFailure("`old` is empty; give the exact text to replace.")
        try:
            text = session.sandbox.read_bytes(path).decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailure(
                f"{session.shown(path)} is not UTF-8 text; str_replace edits text files only."
            ) from None
        count = text.count(old)
        if count == 0:
            raise ToolFailure(
                f"`old` was not found in {session.shown(path)}; read the file and copy the "
                "exact text, including whitespace."
            )
        if count > 1:
            raise ToolFailure(
                f"`old` occurs {count} times in {session.shown(path)}; it must occur exactly "
                "once. Include more surrounding lines to make it unique."
            )
        session.sandbox.write_file(path, text.replace(old, new, 1))
        return f"Replaced 1 occurrence in {session.shown(path)}."

    def glob(self, session: _Session, pattern: str, path: str, include_dirs: bool,
             max_results: int) -> str:
        where = self._search_root(path)
        found = session.sandbox.glob(pattern, where, include_dirs=include_dirs,
                                     max_results=max_results)
        lines = found.matches or [
            f"Nothing found: no path under {session.shown(where)} matches {pattern!r}."]
        return self._searched("\n".join([*lines, *found.notes]))

    def grep(self, session: _Session, pattern: str, path: str, glob: str | None,
             literal: bool, case_sensitive: bool, max_results: int) -> str:
        where = self._search_root(path)
        found = session.sandbox.grep(pattern, where, glob=glob, literal=literal,
                                     case_sensitive=case_sensitive, max_results=max_results)
        lines = found.matches or [
            f"Nothing found: no line matches {pattern!r} in {found.files_searched} text "
            "file(s) under "
            f"{session.shown(where)}" + (f" matching {glob!r}" if glob else "") + "."]
        return self._searched("\n".join([*lines, *found.notes]))

    @staticmethod
    def _search_root(path: str) -> str:
        """``path`` when it is an absolute virtual path glob and grep can search."""
        if not isinstance(path, str) or not (
                _under(path, VIRTUAL_ROOT) or _under(path, SKILLS_VIRTUAL_ROOT)):
            raise ToolFailure(
                f"Invalid search path {path!r}: `path` must be an absolute virtual path under "
                f"{VIRTUAL_ROOT} (or {SKILLS_VIRTUAL_ROOT}), for example {WORKSPACE!r}.")
        return path

    def _searched(self, text: str) -> str:
        """A glob or grep result: whole for the tool-output budget, else cut like bash's."""
        return text if self.budgeted() else self._capped(text, "output", "; narrow the search")

    # -- LangChain tools -----------------------------------------------------------------

    def tools(self) -> list[BaseTool]:
        """The seven tools, each with a sync and an async form and `TOOL_METADATA`."""
        run = self.run

        def bash(command: str, runtime: ToolRuntime) -> ToolMessage | Command[Any]:
            return run(runtime, "bash", lambda s: self.bash(s, command))

        def ls(runtime: ToolRuntime, path: str = DEFAULT_LS_PATH) -> ToolMessage | Command[Any]:
            return run(runtime, "ls", lambda s: self.ls(s, path))

        def read_file(path: str, runtime: ToolRuntime, start_line: int | None = None,
                      end_line: int | None = None) -> ToolMessage | Command[Any]:
            return run(runtime, "read_file",
                       lambda s: self.read_file(s, path, start_line, end_line))

        def write_file(path: str, content: str, runtime: ToolRuntime,
                       append: bool = False) -> ToolMessage | Command[Any]:
            return run(runtime, "write_file", lambda s: self.write_file(s, path, content, append))

        def str_replace(path: str, old: str, new: str,
                        runtime: ToolRuntime) -> ToolMessage | Command[Any]:
            return run(runtime, "str_replace", lambda s: self.str_replace(s, path, old, new))

        def glob(pattern: str, path: str, runtime: ToolRuntime, include_dirs: bool = False,
                 max_results: int = 200) -> ToolMessage | Command[Any]:
            return run(runtime, "glob",
                       lambda s: self.glob(s, pattern, path, include_dirs, max_results))

        def grep(pattern: str, path: str, runtime: ToolRuntime, glob: str | None = None,
                 literal: bool = False, case_sensitive: bool = False,
                 max_results: int = 100) -> ToolMessage | Command[Any]:
            return run(runtime, "grep", lambda s: self.grep(
                s, pattern, path, glob, literal, case_sensitive, max_results))

        descriptions: dict[Callable[..., Any], str] = {
            bash: "Run a bash command in the thread's sandbox. The working directory is "
                  f"{WORKSPACE}; files live under {VIRTUAL_ROOT} (workspace, uploads, outputs). "
                  "Returns stdout, stderr and a non-zero exit code.",
            ls: f"List a directory of the thread's files, two levels deep (default "
                f"{DEFAULT_LS_PATH}). Directories end with '/'.",
            glob: "Find files (and with include_dirs, directories) whose path below `path` "
                  "matches a glob pattern. Returns virtual paths; symlinks are not followed.",
            grep: "Search the text files below `path` for lines matching a regular expression "
                  "(case-insensitive unless case_sensitive). Returns 'path:line: text' lines; "
                  "binary files are skipped.",
            read_file: "Read a text file, optionally only lines start_line..end_line.",
            write_file: "Write a text file (creating parent directories), or append to it.",
            str_replace: "Replace one exact occurrence of `old` with `new` in a text file. "
                         "Fails when `old` is missing or occurs more than once.",
        }
        return [self._tool(func, description) for func, description in descriptions.items()]

    @staticmethod
    def _tool(func: Callable[..., Any], description: str) -> BaseTool:
        async def coroutine(**kwargs: Any) -> Any:
            # Sandbox calls block (processes, disk, maybe a remote provider).
            return await asyncio.to_thread(func, **kwargs)

        name = func.__name__
        tool = StructuredTool.from_function(
            func=func, coroutine=coroutine, name=name, description=description,
            args_schema=ARGS_SCHEMAS[name],
        )
        tool.metadata = {key: dict(value) for key, value in TOOL_METADATA.items()}
        return tool


class _ToolArgs(BaseModel):
    """A sandbox tool's arguments: what the model writes, then the `ToolRuntime`
    LangGraph's tools node injects (left out of the schema the model sees and of the
    validated input's dump; declared last, so errors list fields as before).

    Each tool's arguments are declared as plain types, not read from its function's
    ``Annotated`` hints: LangChain rebuilds every generic annotation of a tool's schema
    on every call (70-140 us a call for these). The schema the model sees, the
    arguments and the validation errors are the ones the hints gave
    (tests/plugins/test_builtin_tool_schemas.py pins them).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)


class _BashArgs(_ToolArgs):
    model_config = ConfigDict(title="bash")

    command: str = Field(description="The shell command to run.")
    runtime: ToolRuntime = Field(exclude=True)


class _LsArgs(_ToolArgs):
    model_config = ConfigDict(title="ls")

    path: str = Field(DEFAULT_LS_PATH, description="Directory to list (virtual path).")
    runtime: ToolRuntime = Field(exclude=True)


class _ReadFileArgs(_ToolArgs):
    model_config = ConfigDict(title="read_file")

    path: str = Field(description="File to read (virtual path, or relative to the workspace).")
    start_line: int | None = Field(None, description="First line to return (1-based).")
    end_line: int | None = Field(None, description="Last line to return (inclusive).")
    runtime: ToolRuntime = Field(exclude=True)


class _WriteFileArgs(_ToolArgs):
    model_config = ConfigDict(title="write_file")

    path: str = Field(description="File to write (virtual path, or relative to the workspace).")
    content: str = Field(description="The text to write.")
    append: bool = Field(False, description="Add to the end of the file instead of replacing it.")
    runtime: ToolRuntime = Field(exclude=True)


class _StrReplaceArgs(_ToolArgs):
    model_config = ConfigDict(title="str_replace")

    path: str = Field(description="File to edit (virtual path, or relative to the workspace).")
    old: str = Field(description="Exact text to replace; must occur exactly once.")
    new: str = Field(description="Replacement text.")
    runtime: ToolRuntime = Field(exclude=True)


_SEARCH_PATH = (f"Directory to search: an absolute virtual path under {VIRTUAL_ROOT} "
                f"(or {SKILLS_VIRTUAL_ROOT}).")


class _GlobArgs(_ToolArgs):
    model_config = ConfigDict(title="glob")

    pattern: str = Field(description="Glob pattern relative to `path`: '*' and '?' within a "
                                     "name, '**' across directories (e.g. '**/*.py').")
    path: str = Field(description=_SEARCH_PATH)
    include_dirs: bool = Field(False, description="Also list matching directories.")
    max_results: int = Field(200, description="Most paths to return (at most 1000).")
    runtime: ToolRuntime = Field(exclude=True)


class _GrepArgs(_ToolArgs):
    model_config = ConfigDict(title="grep")

    pattern: str = Field(description="Regular expression (Python syntax) to find, or the exact "
                                     "text with literal=true.")
    path: str = Field(description=_SEARCH_PATH)
    glob: str | None = Field(None, description="Only files matching this glob ('*.py' matches "
                                               "at any depth; 'src/**/*.py' from `path`).")
    literal: bool = Field(False, description="Search for the pattern as plain text.")
    case_sensitive: bool = Field(False, description="Match case exactly.")
    max_results: int = Field(100, description="Most matching lines to return (at most 1000).")
    runtime: ToolRuntime = Field(exclude=True)


ARGS_SCHEMAS: dict[str, type[_ToolArgs]] = {
    schema.model_config["title"]: schema  # type: ignore[misc]
    for schema in (_BashArgs, _LsArgs, _ReadFileArgs, _WriteFileArgs, _StrReplaceArgs,
                   _GlobArgs, _GrepArgs)}
"""Each tool's argument schema, by tool name."""

def build_tools(provider: SandboxProvider, layout: PathLayout, config: SandboxConfig,
                budgeted: Callable[[], bool] = lambda: False) -> list[BaseTool]:
    """The sandbox tools over ``provider`` and the thread path ``layout``."""
    return SandboxTools(provider, layout, config, budgeted).tools()

