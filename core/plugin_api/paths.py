"""Per-thread directory layout and the virtual paths the model sees.

Every conversation thread owns a private directory tree on the host::

    {base}/users/{user_id}/threads/{thread_id}/user-data/{workspace,uploads,outputs}

The model and its tools never see those host paths. They see a fixed virtual
tree instead, ``/mnt/user-data/{workspace,uploads,outputs}``, so prompts,
transcripts and checkpoints are identical on every machine and host details
never leak into the conversation. This module owns three things:

* validating the ids that become directory names (:func:`validate_id`),
* computing a thread's host paths without touching the disk
  (:class:`PathLayout`, :class:`ThreadPaths`) and creating them lazily, on
  first tool use (:meth:`ThreadPaths.ensure_directories`),
* translating between the virtual and the host view while refusing paths that
  would leave the thread's ``user-data`` directory (:class:`VirtualPathMapper`).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antler.contracts.runcontext import run_context, thread_id_of
from antler.errors import AntlerError

__all__ = [
    "ANTLER_HOME_ENV",
    "MAX_ID_LENGTH",
    "SKILLS_VIRTUAL_ROOT",
    "VIRTUAL_ROOT",
    "InvalidIdentifierError",
    "MissingThreadIdError",
    "PathEscapeError",
    "PathLayout",
    "ThreadPaths",
    "VirtualPathMapper",
    "resolve_base",
    "validate_id",
]

ANTLER_HOME_ENV = "ANTLER_HOME"
"""Environment variable naming the base directory when none is given explicitly."""

DEFAULT_HOME_DIRNAME = ".antler"
"""Directory under the current working directory used when nothing else is configured."""

VIRTUAL_ROOT = "/mnt/user-data"
"""Root of the virtual tree seen by the model; its children mirror ``user-data/``."""

SKILLS_VIRTUAL_ROOT = "/mnt/skills"
"""Where the installed skill roots appear, read-only (see the `skills` service)."""

USER_DATA_DIRNAME = "user-data"
THREAD_SUBDIRS = ("workspace", "uploads", "outputs")

MAX_ID_LENGTH = 128
_ALLOWED_ID_CHARS = "letters A-Z a-z, digits 0-9, '.', '_', '@' and '-'"
# An explicit ASCII class: `str.isalnum` would accept look-alike letters from
# other scripts (Cyrillic or fullwidth look-alikes), so two ids that render
# identically map to two different directories.
_ID_PATTERN = re.compile(r"[A-Za-z0-9._@-]+")
_PREVIEW_CHARS = 40


class InvalidIdentifierError(AntlerError, ValueError):
    """A user or thread id cannot be used as a directory name."""


class MissingThreadIdError(AntlerError, ValueError):
    """A run has no thread id, so its files have nowhere to live."""


class PathEscapeError(AntlerError, PermissionError):
    """A path would reach outside the thread's ``user-data`` directory."""


def _preview(value: object) -> str:
    """Return a short ``repr`` of ``value`` that is safe to put in an error message."""
    text = repr(value)
    if len(text) > _PREVIEW_CHARS:
        text = f"{text[:_PREVIEW_CHARS]}...' ({len(str(value))} chars)"
    return text


def validate_id(kind: str, value: str) -> str:
    """Check that ``value`` is safe to use as the ``kind`` directory name and return it.

    User and thread ids usually arrive from a request, so they are hostile until
    proven otherwise: an id such as ``..`` or ``a/b`` would otherwise let one
    caller read or write another caller's files. ``kind`` is the human name used
    in the error message, e.g. ``"user id"`` or ``"thread id"``.

    Raises:
        InvalidIdentifierError: naming the id, the offending value, the rule it
            breaks and how to fix it.
    """

    def reject(rule: str) -> InvalidIdentifierError:
        return InvalidIdentifierError(
            f"Invalid {kind} {_preview(value)}: {rule}. Ids become directory names, so "
            f"use 1-{MAX_ID_LENGTH} of {_ALLOWED_ID_CHARS} (for example 'alice' or "
            "'thread-42')."
        )

    if not isinstance(value, str):
        raise reject(f"it must be a string, not {type(value).__name__}")
    if not value:
        raise reject("it is empty")
    if len(value) > MAX_ID_LENGTH:
        raise reject(f"it is {len(value)} characters long, the limit is {MAX_ID_LENGTH}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise reject("it contains a NUL or other control character")
    if value.startswith(("/", "\\")):
        raise reject("it is an absolute path")
    if "/" in value or "\\" in value:
        raise reject("it contains a path separator ('/' or '\\')")
    if value in {".", ".."}:
        raise reject("'.' and '..' refer to existing directories")
    if not _ID_PATTERN.fullmatch(value):
        bad = sorted({ch for ch in value if not _ID_PATTERN.fullmatch(ch)})
        raise reject(f"it contains characters outside the allowed set: {bad!r}")
    return value


def resolve_base(explicit: str | Path | None = None) -> Path:
    """Pick the base directory: ``explicit``, else ``$ANTLER_HOME``, else ``./.antler``.

    The result is absolute (relative inputs are taken from the current working
    directory at call time) so later ``chdir`` calls cannot move a thread's data.
    Nothing is created on disk.
    """
    if explicit is not None and str(explicit) != "":
        chosen = Path(explicit)
    elif os.environ.get(ANTLER_HOME_ENV):
        chosen = Path(os.environ[ANTLER_HOME_ENV])
    else:
        chosen = Path.cwd() / DEFAULT_HOME_DIRNAME
    return chosen.expanduser().absolute()


@dataclass(frozen=True)
class ThreadPaths:
    """The host directories that belong to one user's thread.

    Instances are plain values: building one never touches the disk, so a pure
    chat turn costs no filesystem writes. Call :meth:`ensure_directories` when a
    tool is about to need them.
    """

    base: Path
    user_id: str
    thread_id: str
    skill_roots: tuple[Path, ...] = ()
    """Host roots shown read-only under ``/mnt/skills`` (the first holding a path wins)."""
    user_data: Path = field(init=False)
    workspace: Path = field(init=False)
    uploads: Path = field(init=False)
    outputs: Path = field(init=False)

    def __post_init__(self) -> None:
        validate_id("user id", self.user_id)
        validate_id("thread id", self.thread_id)
        base = Path(self.base).expanduser().absolute()
        user_data = base / "users" / self.user_id / "threads" / self.thread_id / USER_DATA_DIRNAME
        # Frozen dataclass: derived fields are set once here and never change.
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "user_data", user_data)
        object.__setattr__(self, "workspace", user_data / "workspace")
        object.__setattr__(self, "uploads", user_data / "uploads")
        object.__setattr__(self, "outputs", user_data / "outputs")

    @property
    def directories(self) -> tuple[Path, Path, Path]:
        """The three per-thread directories, in a fixed order."""
        return (self.workspace, self.uploads, self.outputs)

    def ensure_directories(self) -> bool:
        """Create workspace, uploads and outputs together; return whether any was missing.

        Idempotent: when all three already exist this costs three ``stat`` calls
        and writes nothing, so it is fine to call before every tool use.
        """
        if all(directory.is_dir() for directory in self.directories):
            return False
        for directory in self.directories:
            directory.mkdir(parents=True, exist_ok=True)
        return True

    def as_state(self) -> dict[str, str]:
        """JSON-safe host paths for agent state (checkpointers cannot store ``Path``)."""
        return {
            "workspace_path": str(self.workspace),
            "uploads_path": str(self.uploads),
            "outputs_path": str(self.outputs),
        }

    @functools.cached_property
    def mapper(self) -> VirtualPathMapper:
        """A :class:`VirtualPathMapper` confined to this thread's ``user-data`` directory.

        Made once per value: the mapper resolves symlinks above ``user-data``
        when it is made, which costs a filesystem call per path component.
        """
        return VirtualPathMapper(self)

    @classmethod
    def for_run(cls, layout: PathLayout, runtime: Any) -> ThreadPaths:
        """The paths of the thread `runtime` runs in, owned by its user.

        The one way a plugin finds a run's files: the user comes from the
        server-owned `RunContext`, the thread id from the run context or, failing
        that, the checkpointer's ``configurable`` (`thread_id_of`).

        Raises:
            MissingThreadIdError: the run has no thread id at all.
            InvalidIdentifierError: the user or thread id cannot be a directory
                name (``..``, separators, control characters, ...).
        """
        thread_id = thread_id_of(runtime)
        if not thread_id:
            raise MissingThreadIdError(
                "This run has no thread id, so the thread's workspace, uploads and outputs "
                "directories cannot be located. Pass one: agent.invoke(..., thread_id='t1'), "
                "RunContext(thread_id=...) as the graph context, or "
                "config={'configurable': {'thread_id': ...}}.")
        return layout.thread(run_context(runtime).user_id, thread_id)


@dataclass(frozen=True)
class PathLayout:
    """Computes :class:`ThreadPaths` under one base directory. Pure; never writes."""

    base: Path
    skill_roots: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", Path(self.base).expanduser().absolute())
        object.__setattr__(self, "skill_roots", tuple(
            Path(root).expanduser().absolute() for root in self.skill_roots))

    def thread(self, user_id: str, thread_id: str) -> ThreadPaths:
        """Return the paths of ``thread_id`` owned by ``user_id`` (ids are validated).

        `ThreadPaths` are immutable values, so a recent thread's are handed out
        again: every hook and tool of a run asks for them, and its mapper (which
        resolves symlinks on the way to ``user-data``) is then made once.
        """
        return _thread_paths(self.base, user_id, thread_id, self.skill_roots)

    def for_run(self, runtime: Any) -> ThreadPaths:
        """The paths of the thread `runtime` runs in (`ThreadPaths.for_run`)."""
        return ThreadPaths.for_run(self, runtime)


def _path_text(path: str | os.PathLike[str]) -> str:
    """``path`` as text, refused when it is empty or holds a NUL character."""
    text = os.fspath(path)
    if "\x00" in text:
        raise PathEscapeError(f"Refusing path {_preview(text)}: it contains a NUL character.")
    if not text:
        raise PathEscapeError("Refusing an empty path: name a file or directory.")
    return text


def _under(text: str, root: str) -> bool:
    return text == root or text.startswith(root + "/")


@functools.lru_cache(maxsize=256)
def _thread_paths(base: Path, user_id: str, thread_id: str,
                  skill_roots: tuple[Path, ...] = ()) -> ThreadPaths:
    return ThreadPaths(base=base, user_id=user_id, thread_id=thread_id, skill_roots=skill_roots)


# `/mnt/user-data` only counts when it stands alone as a path: not as the tail
# of a longer path (`/x/mnt/user-data`) or the head of a longer name
# (`/mnt/user-data-old`).
_PATH_CHAR = r"[A-Za-z0-9._\-]"
_VIRTUAL_IN_TEXT = re.compile(rf"(?<![A-Za-z0-9._\-/]){re.escape(VIRTUAL_ROOT)}(?!{_PATH_CHAR})")
# A `/mnt/skills` path standing alone, with the components that follow it: which
# skill root it lands in depends on the whole path (the first root holding it).
_SKILLS_IN_TEXT = re.compile(
    rf"(?<![A-Za-z0-9._\-/]){re.escape(SKILLS_VIRTUAL_ROOT)}(?:/{_PATH_CHAR}+)*/?(?!{_PATH_CHAR})")


class VirtualPathMapper:
    """Translates between virtual ``/mnt/user-data/...`` paths and one thread's host paths.

    The boundary is the thread's ``user-data`` directory: any path that would
    leave it, lexically (``..``) or through a symlink, raises
    :class:`PathEscapeError`. Relative paths are taken relative to the workspace,
    which is the working directory tools and commands see.
    """

    def __init__(self, paths: ThreadPaths) -> None:
        self.paths = paths
        self._root = paths.user_data
        # Thread paths built elsewhere (a plugin's view of state) may carry no skills.
        self._skill_roots: tuple[Path, ...] = tuple(getattr(paths, "skill_roots", ()))
        # The base directory may itself sit behind a symlink (e.g. /tmp on macOS),
        # so symlink checks compare fully resolved paths on both sides.
        self._resolved_root = _resolved_directory(paths.user_data)

    @property
    def resolved_root(self) -> Path:
        """The thread's ``user-data`` directory with every symlink above it resolved."""
        return self._resolved_root

    def to_host(self, path: str | os.PathLike[str]) -> Path:
        """Map a virtual, relative or in-thread host path to a host path inside ``user-data``.

        Raises:
            PathEscapeError: if the path leaves the thread's ``user-data``
                directory, via ``..``, as an absolute host path elsewhere, or
                through a symlink whose target lies outside.
        """
        text = _path_text(path)

        if _under(text, SKILLS_VIRTUAL_ROOT) and self._skill_roots:
            return self._skill_host(text)
        if text == VIRTUAL_ROOT or text.startswith(VIRTUAL_ROOT + "/"):
            relative = text[len(VIRTUAL_ROOT) :].lstrip("/")
            candidate = os.path.join(self._root, relative) if relative else str(self._root)
        elif os.path.isabs(text):
            candidate = text
        else:
            candidate = os.path.join(self.paths.workspace, text)

        host = Path(os.path.normpath(candidate))
        if not _is_within(host, self._root):
            raise PathEscapeError(
                f"Refusing path {text!r}: it resolves outside this thread's files. Use a "
                f"path under {VIRTUAL_ROOT}/ (workspace, uploads or outputs) or one relative "
                "to the workspace, without '..' that climbs above it."
            )
        resolved = Path(os.path.realpath(host))
        if not _is_within(resolved, self._resolved_root):
            raise PathEscapeError(
                f"Refusing path {text!r}: a symlink along it points outside this thread's "
                f"files. Only targets under {VIRTUAL_ROOT}/ can be reached."
            )
        return host

    def components(self, path: str | os.PathLike[str]) -> tuple[bool, tuple[str, ...]]:
        """Whether ``path`` is under the skills, and its components below that root.

        Purely lexical (nothing on disk is looked at, so nothing can change
        between this and a use): the path is normalized, and ``..`` that would
        climb above the thread's ``user-data`` (or above ``/mnt/skills``) is
        refused. Symlinks are for whoever opens the path to handle (see
        `antler.plugin_api.confined`, which resolves them beneath the root).

        Raises:
            PathEscapeError: as `to_host` does for lexical escapes.
        """
        text = _path_text(path)
        if _under(text, SKILLS_VIRTUAL_ROOT) and self._skill_roots:
            relative = os.path.normpath(text[len(SKILLS_VIRTUAL_ROOT):].lstrip("/") or ".")
            if relative == ".." or relative.startswith("../"):
                raise PathEscapeError(
                    f"Refusing path {text!r}: it climbs above {SKILLS_VIRTUAL_ROOT}.")
            return True, tuple(part for part in relative.split("/") if part not in ("", "."))
        if text == VIRTUAL_ROOT or text.startswith(VIRTUAL_ROOT + "/"):
            candidate = os.path.join(self._root, text[len(VIRTUAL_ROOT):].lstrip("/"))
        elif os.path.isabs(text):
            candidate = text
        else:
            candidate = os.path.join(self.paths.workspace, text)
        host = os.path.normpath(candidate)
        # Plain string work: this runs on every file tool call, and pathlib's is slow.
        for root in (str(self._root), str(self._resolved_root)):
            if host == root:
                return False, ()
            if host.startswith(root + "/"):
                return False, tuple(host[len(root) + 1:].split("/"))
        raise PathEscapeError(
            f"Refusing path {text!r}: it resolves outside this thread's files. Use a "
            f"path under {VIRTUAL_ROOT}/ (workspace, uploads or outputs) or one relative "
            "to the workspace, without '..' that climbs above it."
        )

    def virtual_name(self, path: str | os.PathLike[str]) -> str:
        """The canonical virtual form of ``path`` (lexical; see `components`)."""
        skills, parts = self.components(path)
        return "/".join([SKILLS_VIRTUAL_ROOT if skills else VIRTUAL_ROOT, *parts])

    @property
    def skill_roots(self) -> tuple[Path, ...]:
        """The host roots shown under ``/mnt/skills`` (the first holding a path wins)."""
        return self._skill_roots

    def is_read_only(self, path: str | os.PathLike[str]) -> bool:
        """Whether `path` names something under the read-only ``/mnt/skills`` mount."""
        return bool(self._skill_roots) and _under(os.fspath(path), SKILLS_VIRTUAL_ROOT)

    def _skill_host(self, text: str) -> Path:
        relative = os.path.normpath(text[len(SKILLS_VIRTUAL_ROOT):].lstrip("/") or ".")
        if relative == ".." or relative.startswith("../"):
            raise PathEscapeError(f"Refusing path {text!r}: it climbs above {SKILLS_VIRTUAL_ROOT}.")
        roots = self._skill_roots
        hosts = [Path(os.path.normpath(root / relative)) for root in roots]
        root, host = next(((r, h) for r, h in zip(roots, hosts, strict=True) if h.exists()),
                          (roots[0], hosts[0]))
        if not _is_within(Path(os.path.realpath(host)), Path(os.path.realpath(root))):
            raise PathEscapeError(f"Refusing path {text!r}: a symlink along it points outside "
                                  "the skills.")
        return host

    def to_virtual(self, host: str | os.PathLike[str]) -> str:
        """Map a host path inside ``user-data`` back to its ``/mnt/user-data/...`` form.

        Idempotent: a path that is already virtual (say, the ``filename`` of an
        error a sandbox raised) comes back normalized, so callers need not know
        which view they hold.

        Raises:
            PathEscapeError: if ``host`` is outside the thread's ``user-data``
                directory and so has no virtual name.
        """
        normalized = Path(os.path.normpath(os.fspath(host)))
        for root in (*self._skill_roots, Path(SKILLS_VIRTUAL_ROOT)):
            if self._skill_roots and _is_within(normalized, root):
                relative = normalized.relative_to(root).as_posix()
                return SKILLS_VIRTUAL_ROOT + ("" if relative == "." else f"/{relative}")
        for root in (self._root, self._resolved_root, Path(VIRTUAL_ROOT)):
            if _is_within(normalized, root):
                relative = normalized.relative_to(root).as_posix()
                return VIRTUAL_ROOT if relative == "." else f"{VIRTUAL_ROOT}/{relative}"
        raise PathEscapeError(
            f"Path {os.fspath(host)!r} is outside this thread's files and has no virtual name."
        )

    def virtualize_text(self, text: str) -> str:
        """Replace host ``user-data`` paths by ``/mnt/user-data``, skill roots by ``/mnt/skills``.

        Used on command output and tool results so host paths never reach the
        model. The three subdirectories share their names in both views, so
        rewriting the ``user-data`` prefix is enough.
        """
        # Longest root first, so a resolved root that extends the other one wins.
        for root in sorted({str(self._root), str(self._resolved_root)}, key=len, reverse=True):
            text = _replace_root(text, root, VIRTUAL_ROOT)
        for root in sorted({str(root) for root in self._skill_roots}, key=len, reverse=True):
            text = _replace_root(text, root, SKILLS_VIRTUAL_ROOT)
        return text

    def hostify_text(self, text: str) -> str:
        """Replace every standalone ``/mnt/user-data`` and ``/mnt/skills`` path with the host's.

        This is plain text substitution for shell commands: it cannot know about
        quoting, so a host base path containing spaces or shell metacharacters
        needs quoting by whoever writes the command.
        """
        host_root = str(self._root)
        text = _VIRTUAL_IN_TEXT.sub(lambda _match: host_root, text)
        if self._skill_roots and SKILLS_VIRTUAL_ROOT in text:
            text = _SKILLS_IN_TEXT.sub(self._skill_host_text, text)
        return text

    def _skill_host_text(self, match: re.Match[str]) -> str:
        """The host path of one ``/mnt/skills`` path in a command; left alone if it escapes."""
        try:
            host = str(self._skill_host(match.group()))
        except PathEscapeError:
            return match.group()
        return host + "/" if match.group().endswith("/") and not host.endswith("/") else host


def _resolved_directory(path: Path) -> Path:
    """``os.path.realpath(path)``, asked of the kernel when ``path`` is a directory.

    `os.path.realpath` looks at every component with a system call of its
    own; the path the kernel reached a directory by (its descriptor's name in
    ``/proc/self/fd``, on Linux) is the same answer for one look-up of the
    whole path. Anywhere that is not so (no such directory yet, no ``/proc``,
    another system) the answer is `os.path.realpath`'s.
    """
    if _DIRECTORY_HANDLE is None:
        return Path(os.path.realpath(path))
    try:
        descriptor = os.open(path, _DIRECTORY_HANDLE)
    except OSError:
        return Path(os.path.realpath(path))
    try:
        reached = os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        reached = ""
    finally:
        os.close(descriptor)
    # A directory removed meanwhile reads as "<path> (deleted)": not an answer.
    if not reached.startswith("/") or reached.endswith(" (deleted)"):
        return Path(os.path.realpath(path))
    return Path(reached)


_O_PATH = getattr(os, "O_PATH", None)
_DIRECTORY_HANDLE = None if _O_PATH is None else _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def _replace_root(text: str, root: str, replacement: str) -> str:
    """`text` with every `root` that does not run on into a longer name replaced.

    The same as substituting ``re.escape(root) + "(?!" + _PATH_CHAR + ")"``,
    without compiling a pattern per thread directory.
    """
    if root not in text:
        return text
    parts: list[str] = []
    start = 0
    while (found := text.find(root, start)) != -1:
        end = found + len(root)
        if end < len(text) and _continues_name(text[end]):
            # `/x/user-data-old` is not this root; look again from the next character.
            parts.append(text[start:found + 1])
            start = found + 1
            continue
        parts.append(text[start:found])
        parts.append(replacement)
        start = end
    parts.append(text[start:])
    return "".join(parts)


def _continues_name(char: str) -> bool:
    """Whether `char` can continue a path component (`_PATH_CHAR`)."""
    return char.isascii() and (char.isalnum() or char in "._-")


def _is_within(path: Path, root: Path) -> bool:
    """Whether ``path`` equals ``root`` or lies below it (both already normalized)."""
    return path == root or root in path.parents
