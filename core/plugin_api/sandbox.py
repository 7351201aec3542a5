"""The sandbox service: where a thread's tools run commands and touch files.

A :class:`SandboxProvider` hands out one :class:`Sandbox` per thread. The
harness acquires it lazily, on the first tool call of a thread, reuses it on
later turns, and shuts the provider down with the process. Providers are
plugins: they are found by name in the ``antler.sandbox_providers`` entry point
group, so a container- or VM-backed provider can replace the local one without
any change to the middleware that uses it.

Every path a sandbox accepts or returns is a *virtual* path
(``/mnt/user-data/...``); host paths are an implementation detail of the
provider and must never reach the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from stevedore.exception import NoMatches

from antler.errors import AntlerError
from antler.plugin_api.paths import PathLayout, ThreadPaths

from .entrypoints import ListedDriverManager, listed_entry_points, registered_names, unknown_name

__all__ = [
    "CUT_NOTE",
    "DEFAULT_GLOB_RESULTS",
    "DEFAULT_GREP_RESULTS",
    "SANDBOX_PROVIDER_GROUP",
    "CommandInterrupted",
    "CommandResult",
    "GlobResult",
    "GrepResult",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "SandboxNotFoundError",
    "SandboxProvider",
    "SandboxProviderLoadError",
    "SearchPatternError",
    "UnknownSandboxProviderError",
    "available_sandbox_providers",
    "load_sandbox_provider",
]

DEFAULT_GLOB_RESULTS = 200
"""How many matches `Sandbox.glob` returns unless asked for fewer or more."""
DEFAULT_GREP_RESULTS = 100
"""How many matching lines `Sandbox.grep` returns unless asked for fewer or more."""
CUT_NOTE = "[output truncated: "
"""How a note on a cut search result begins."""


class SearchPatternError(ValueError):
    """A glob or regex pattern cannot be used; the message says why and how to fix it."""


@dataclass
class GlobResult:
    """What `glob` found: virtual paths (directories end with ``/``) and notes on any cut."""

    matches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        """Whether matches may be missing (a bound stopped the search)."""
        return any(note.startswith(CUT_NOTE) for note in self.notes)


@dataclass
class GrepResult:
    """What `grep` found: ``path:line: text`` lines, and notes on any cut or skip."""

    matches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files_searched: int = 0
    binary_skipped: int = 0

    @property
    def truncated(self) -> bool:
        """Whether matches may be missing (a bound stopped the search)."""
        return any(note.startswith(CUT_NOTE) for note in self.notes)


SANDBOX_PROVIDER_GROUP = "antler.sandbox_providers"
"""Entry point group in which sandbox providers register themselves by name."""


class SandboxError(AntlerError):
    """Base class of the errors raised by sandboxes and their providers."""


class SandboxNotFoundError(SandboxError, LookupError):
    """A sandbox id was never handed out by this provider, or it has been shut down."""


class SandboxClosedError(SandboxError, RuntimeError):
    """The sandbox or its provider has been shut down and can no longer be used."""


class CommandInterrupted(BaseException):
    """A command was killed because its run is being stopped (Ctrl-C, SIGTERM).

    A `BaseException`, like `KeyboardInterrupt`: the tools turn ordinary
    errors into results, but a stopped command has no result, so its call is
    left unanswered and the next run reports it as interrupted.
    """


class UnknownSandboxProviderError(SandboxError, LookupError):
    """No sandbox provider is registered under the requested name."""


class SandboxProviderLoadError(SandboxError, RuntimeError):
    """A sandbox provider is registered but could not be imported or constructed."""


@dataclass(frozen=True)
class CommandResult:
    """What one shell command produced. Output is already in the virtual path view."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Whether the command finished in time with exit code 0."""
        return self.exit_code == 0 and not self.timed_out


class Sandbox(ABC):
    """One thread's execution environment: a shell and a file tree under ``/mnt/user-data``.

    All paths are virtual. Relative paths are relative to
    ``/mnt/user-data/workspace``. Paths that would leave the thread's files raise
    :class:`antler.plugin_api.PathEscapeError`.

    The file operations must hold that however the files change while they
    run (the thread's own commands can swap a name for a symlink at any
    moment): a sandbox whose files live on the harness's host opens each path
    beneath a descriptor of its root (`antler.plugin_api.confined`) and never
    opens a checked path again by name.
    """

    @property
    @abstractmethod
    def sandbox_id(self) -> str:
        """The id under which the provider handed this sandbox out."""

    @abstractmethod
    def execute_command(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run ``command`` in a shell whose working directory is the workspace.

        ``timeout`` is in seconds; ``None`` means the provider's default. A command
        that runs past it is killed and reported with ``timed_out=True``.
        """

    @abstractmethod
    def read_file(self, virtual_path: str) -> str:
        """Return the text of a file (UTF-8; undecodable bytes are replaced)."""

    @abstractmethod
    def read_bytes(self, virtual_path: str) -> bytes:
        """Return the raw bytes of a file."""

    @abstractmethod
    def write_file(self, virtual_path: str, content: str, append: bool = False) -> None:
        """Write (or with ``append``, add to) a text file, creating parent directories."""

    @abstractmethod
    def list_dir(self, virtual_path: str, max_depth: int = 2) -> list[str]:
        """List entries below a directory as sorted virtual paths, up to ``max_depth`` levels.

        Directories end with ``/``. Depth 1 lists only the immediate children.
        """


    @abstractmethod
    def glob(self, pattern: str, virtual_path: str, *, include_dirs: bool = False,
             max_results: int = DEFAULT_GLOB_RESULTS) -> GlobResult:
        """Paths below the directory ``virtual_path`` that match the glob ``pattern``.

        ``pattern`` is relative to the directory (``**`` spans directories).
        Symlinks are never followed; results are bounded and say so when cut.

        Raises:
            SearchPatternError: the pattern is empty, absolute or invalid.
        """

    @abstractmethod
    def grep(self, pattern: str, virtual_path: str, *, glob: str | None = None,
             literal: bool = False, case_sensitive: bool = False,
             max_results: int = DEFAULT_GREP_RESULTS) -> GrepResult:
        """Lines matching the regex ``pattern`` in the text files below ``virtual_path``.

        ``glob`` filters the files (a name pattern matches at any depth);
        binary files are skipped; results, bytes read and time are bounded.

        Raises:
            SearchPatternError: the regex is invalid or can backtrack exponentially.
        """


class SandboxProvider(ABC):
    """Hands out sandboxes per thread and owns their lifecycle."""

    @abstractmethod
    def acquire(self, thread_paths: ThreadPaths) -> str:
        """Return the id of the sandbox for this thread, creating it on first use.

        Calling it again for the same thread returns the same id, so a thread
        keeps its sandbox (and whatever state it holds) across turns.
        """

    def existing_sandbox_id(self, thread_paths: ThreadPaths) -> str | None:
        """The id of the sandbox handed out for this thread, or None when it has none.

        What a caller checks an id it was given against (an id recorded in
        state, which the thread's owner can write). The default acquires, so it
        creates the sandbox when there is none; a provider that can look the id
        up without side effects overrides it.
        """
        return self.acquire(thread_paths)

    @abstractmethod
    def get(self, sandbox_id: str) -> Sandbox:
        """Return the sandbox handed out under ``sandbox_id``.

        Raises:
            SandboxNotFoundError: if the id is unknown or was torn down.
        """

    @abstractmethod
    def release(self, sandbox_id: str) -> None:
        """Tell the provider the current run is done with the sandbox.

        Called once at the end of each run that used it; a run may have called
        `acquire` many times (once per tool call). Runs of one thread can overlap:
        one run's release must not take the sandbox from another run still using
        it (the built-in providers count the runs that hold it, and also let go of
        a run that ended without its last hook: failed, cancelled or closed early).
        Providers may keep the sandbox for reuse by the next run; releasing does
        not invalidate the id.
        """

    @abstractmethod
    def shutdown(self) -> None:
        """Tear down every sandbox. The provider cannot be used afterwards."""

    def warm(self, layout: PathLayout) -> None:  # noqa: B027 - optional, a no-op by default
        """A run of a thread under `layout` has started: get ready for its first tool call.

        Called in the run's thread: it must return within milliseconds (wait in the
        background), and create none of the thread's files."""

    def interrupt(self) -> None:  # noqa: B027 - optional for providers, a no-op by default
        """Stop every running command now (the run is being stopped).

        Each command's call raises `CommandInterrupted` instead of returning a
        result. Called from a signal handler: it must not block.
        """


def available_sandbox_providers() -> list[str]:
    """Names registered in the ``antler.sandbox_providers`` entry point group, sorted."""
    return registered_names(SANDBOX_PROVIDER_GROUP)


def load_sandbox_provider(name: str, **kwargs: Any) -> SandboxProvider:
    """Load the sandbox provider registered as ``name`` and construct it with ``kwargs``.

    Raises:
        UnknownSandboxProviderError: if no provider has that name; the message
            lists the registered names and suggests the closest one.
        SandboxProviderLoadError: if the provider cannot be imported or built,
            or what it builds is not a :class:`SandboxProvider`.
    """
    listed = listed_entry_points(SANDBOX_PROVIDER_GROUP)
    available = sorted({ep.name for ep in listed})
    if name not in available:
        raise _unknown_provider(name, available)

    def on_load_failure(_manager: object, entry_point: Any, error: BaseException) -> None:
        raise SandboxProviderLoadError(
            f"Sandbox provider {name!r} ({entry_point.value}) failed to load: "
            f"{type(error).__name__}: {error}"
        ) from error

    try:
        # stevedore loads the entry point from this listing (it would list the group again)
        manager = ListedDriverManager(
            SANDBOX_PROVIDER_GROUP, listed,
            name=name,
            invoke_on_load=True,
            invoke_kwds=kwargs,
            on_load_failure_callback=on_load_failure,
        )
    except NoMatches as error:
        # The entry point vanished between listing and loading (e.g. uninstalled).
        raise _unknown_provider(name, available_sandbox_providers()) from error

    provider = manager.driver
    if not isinstance(provider, SandboxProvider):
        raise SandboxProviderLoadError(
            f"Sandbox provider {name!r} built a {type(provider).__name__}, which is not a "
            "SandboxProvider; its entry point must name a SandboxProvider subclass."
        )
    return provider


def _unknown_provider(name: str, available: list[str]) -> UnknownSandboxProviderError:
    """Build the error for an unregistered provider name, with a did-you-mean hint."""
    return UnknownSandboxProviderError(
        unknown_name("sandbox", name, SANDBOX_PROVIDER_GROUP, available))
