"""Opening files beneath a root directory through descriptors, with no window between check and use.

A thread's files can be changed while a tool works on them: the model's own
``bash`` (or a parallel tool call of the same turn) can swap a name for a
symlink at any moment. Checking a path string and then opening it again by
name leaves a window in which the name can come to point anywhere on the host.
This module never opens by a checked name. It resolves a path *relative to a
descriptor of the root*, one component at a time, and every step is taken on
the descriptor the previous step returned:

* intermediate components are opened with ``O_PATH | O_NOFOLLOW`` relative to
  their parent's descriptor; the final one with ``O_NOFOLLOW`` and the access
  the caller asked for (``O_NONBLOCK`` too, so a FIFO cannot block a reader);
* a symlink met on the way is *interpreted here*, never by the kernel: its
  target is read from the symlink's own descriptor, a relative target
  continues from the directory holding it, ``..`` pops a descriptor off the
  stack and may never pop the root, an absolute target counts only when it
  names the root itself (by one of its `Root.aliases`, such as
  ``/mnt/user-data`` or the root's host path) and continues from the root;
  anything else is refused with `PathEscapeError`; at most `MAX_SYMLINKS`
  expansions per path (a loop fails with ``ELOOP``);
* missing directories are created with ``mkdirat`` on the parent's descriptor
  (`Root.open` with ``make_parents``), so a directory created for a write is
  the one the write lands in.

Where the kernel has ``openat2`` (Linux 5.6+), a path is first opened in one
call with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``:
the kernel refuses to leave the root or follow any symlink, so the common
case (no symlink along the path) costs one system call. Any failure there
(a symlink on the way, a missing parent to create, an error to explain) falls
back to the component walk above, which gives the same answer on every
kernel.

So the user-visible rule is the one the path mapper states (symlinks that stay
inside the root are followed, ones that leave it are refused), and it holds
however the tree changes while a call runs: each descriptor names the object
that was there when it was opened, and nothing is ever looked up twice.

While a thread's bubblewrap namespace lives, its ``user-data`` may be mounted
there as an overlay (`antler.runtime.sandbox.bwrap`), which caches what it looked
up: a file created beside it, in the host directory, could stay unseen by the
thread's commands, and one removed there stay seen. So the sandbox registers a
descriptor of that overlay's root (`register_mount`) for as long as the namespace
lives, and a root at that host path is then opened beneath the descriptor instead
of by its path: every writer that goes through this module (the file tools,
uploads, the saved tool results) writes through the overlay, which the
commands see at once.

The directory walks used by ``ls``, ``glob`` and ``grep`` (`walk`) open each
subdirectory with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's
descriptor and never descend into a symlink.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from antler.plugin_api.paths import (
    SKILLS_VIRTUAL_ROOT,
    VIRTUAL_ROOT,
    PathEscapeError,
    VirtualPathMapper,
)

__all__ = ["MAX_NESTING", "MAX_SYMLINKS", "Entry", "Place", "Root", "place", "register_mount",
           "unregister_mount", "walk"]

MAX_SYMLINKS = 40
"""Symlink expansions allowed while resolving one path (the kernel's own limit)."""
MAX_NESTING = 256
"""Directories deep a walked path may go (each holds a descriptor while the path resolves)."""

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)
_STEP = _O_PATH | os.O_NOFOLLOW | _CLOEXEC
# Final opens never follow a symlink, never block on a FIFO and never make a
# terminal the harness's controlling one.
_FINAL = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | _CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | _FINAL

# openat2(2): `struct open_how` and the resolve flags (linux/openat2.h).
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class _Openat2:
    """``openat2`` through ``syscall(2)``, or nothing where the kernel or libc lacks it."""

    def __init__(self) -> None:
        self.usable = False
        self._syscall = None
        if _SYS_OPENAT2 is None or platform.system() != "Linux":
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._syscall = libc.syscall
        except (OSError, AttributeError):
            return
        self._syscall.restype = ctypes.c_long
        self.usable = True

    def __call__(self, dir_fd: int, path: str, flags: int, mode: int) -> int:
        """A descriptor of ``path`` beneath ``dir_fd`` with no symlink followed; OSError else."""
        how = _OpenHow(flags | _CLOEXEC, mode if flags & os.O_CREAT else 0,
                       _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        assert self._syscall is not None and _SYS_OPENAT2 is not None
        result = int(self._syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd),
                                   os.fsencode(path), ctypes.byref(how),
                                   ctypes.c_size_t(ctypes.sizeof(how))))
        if result < 0:
            code = ctypes.get_errno()
            if code in (errno.ENOSYS, errno.EPERM, errno.E2BIG):
                # No openat2 here (old kernel, or a seccomp filter): walk from now on.
                self.usable = False
            raise OSError(code, os.strerror(code))
        return result


_openat2 = _Openat2()

# Host path of a root -> a descriptor of the same directory as a mount shows it (see the
# module docstring); read on every open, changed when a namespace starts or ends.
_mounts: dict[str, int] = {}
_mounts_lock = threading.Lock()


def register_mount(host: str, descriptor: int) -> None:
    """Open every `Root` at the host path `host` beneath `descriptor` (a directory: the
    root of a mount of `host`, such as a sandbox's overlay of it) until `unregister_mount`;
    this module owns `descriptor` from now on."""
    with _mounts_lock:
        _mounts[host] = descriptor


def unregister_mount(host: str, descriptor: int) -> None:
    """Close `descriptor` (from `register_mount`); roots at `host` are opened by their path
    again, unless another descriptor was registered for it since."""
    with _mounts_lock:
        if _mounts.get(host) == descriptor:
            del _mounts[host]
        os.close(descriptor)


@dataclass(frozen=True)
class Root:
    """A directory whose contents are reached only beneath it.

    Attributes:
        path: the root's host path. It is opened by name, so it must not be
            changeable by whoever the confinement is against (the harness owns
            every component of a thread's ``user-data`` path and of a skill root).
        shown: how the root is named in messages (``/mnt/user-data``).
        aliases: absolute paths that name the root in a symlink's target (its
            virtual name, its host path); a target under none of them leaves
            the root and is refused.
    """

    path: str
    shown: str
    aliases: tuple[str, ...] = ()

    def descriptor(self) -> int:
        """A fresh ``O_PATH`` descriptor of the root directory (the caller closes it):
        through the mount registered for its path (`register_mount`), if there is one."""
        if _mounts:
            with _mounts_lock:
                mounted = _mounts.get(self.path)
                if mounted is not None:
                    return os.dup(mounted)
        return os.open(self.path, _O_PATH | os.O_DIRECTORY | _CLOEXEC)

    def open(self, parts: Sequence[str], flags: int, mode: int = 0o644, *,
             make_parents: bool = False, directory: bool = False) -> int:
        """A descriptor of the object at ``parts`` beneath the root, opened with ``flags``.

        ``parts`` are the path's components below the root (already free of
        ``..``; a symlink's target may still contain some). With ``directory``
        the object must be a directory (``O_RDONLY | O_DIRECTORY``); otherwise
        it must be a regular file. ``make_parents`` creates missing directories
        on the way (for writes).

        Raises:
            PathEscapeError: a symlink on the way leads outside the root.
            OSError: as ``open(2)`` would, naming the path below the root
                (``filename`` is the shown name), never a host path.
        """
        want = _DIRECTORY if directory else flags | _FINAL
        root_fd = self.descriptor()
        try:
            if _openat2.usable:
                try:
                    fd = _openat2(root_fd, "/".join(parts) or ".", want, mode)
                except OSError:
                    pass  # a symlink, a missing parent or an error to explain: walk
                else:
                    return _checked(fd, directory, self.shown, parts)
            return self._walk(root_fd, list(parts), want, mode, make_parents, directory)
        finally:
            os.close(root_fd)

    def _walk(self, root_fd: int, parts: list[str], want: int, mode: int,
              make_parents: bool, directory: bool) -> int:
        """`open` one component at a time, interpreting symlinks (see the module doc)."""
        # The descriptors from the root down to the current directory, and their names.
        stack: list[int] = [root_fd]
        names: list[str] = []
        pending = [part for part in reversed(parts)]  # popped from the end
        expansions = 0
        link = ""  # the shown name of the last symlink expanded, for messages
        try:
            while True:
                while pending and pending[-1] in ("", "."):
                    pending.pop()
                if not pending:
                    # The path names the directory on top of the stack itself.
                    fd = os.open(".", want, mode, dir_fd=stack[-1])
                    return _checked(fd, directory, self.shown, names)
                name = pending.pop()
                if name == "..":
                    if len(stack) == 1:
                        raise PathEscapeError(
                            f"Refusing path {link or self.shown}: a symlink along it climbs "
                            f"above {self.shown}. Only targets under {self.shown}/ can be "
                            "reached.")
                    os.close(stack.pop())
                    names.pop()
                    continue
                parent = stack[-1]
                last = not any(part not in ("", ".") for part in pending)
                if last:
                    try:
                        fd = os.open(name, want, mode, dir_fd=parent)
                    except OSError as error:
                        if error.errno == errno.EISDIR:
                            raise IsADirectoryError(f"{_shown(self.shown, [*names, name])} is "
                                                    "a directory, not a file.") from None
                        if error.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
                            raise _named(error, self.shown, [*names, name]) from None
                        # ELOOP/ENOTDIR: perhaps a symlink (O_NOFOLLOW); ENXIO: a socket.
                        target = _symlink_target(parent, name)
                        if target is None:
                            raise _named(error, self.shown, [*names, name]) from None
                    else:
                        return _checked(fd, directory, self.shown, [*names, name])
                else:
                    try:
                        fd = os.open(name, _STEP, dir_fd=parent)
                    except FileNotFoundError as error:
                        if not make_parents:
                            raise _named(error, self.shown, [*names, name]) from None
                        try:
                            os.mkdir(name, 0o755, dir_fd=parent)
                        except FileExistsError:
                            pass  # made meanwhile; look again
                        except OSError as mkdir_error:
                            raise _named(mkdir_error, self.shown, [*names, name]) from None
                        pending.append(name)
                        continue
                    except OSError as error:
                        raise _named(error, self.shown, [*names, name]) from None
                    kind = stat.S_IFMT(os.fstat(fd).st_mode)
                    if kind == stat.S_IFDIR:
                        if len(stack) > MAX_NESTING:
                            os.close(fd)
                            raise OSError(errno.ENAMETOOLONG, "Directories nested too deeply "
                                          f"(more than {MAX_NESTING})", self.shown)
                        stack.append(fd)
                        names.append(name)
                        continue
                    target = os.readlink("", dir_fd=fd) if kind == stat.S_IFLNK else None
                    os.close(fd)
                    if target is None:
                        # No errno: the message is the whole explanation.
                        raise NotADirectoryError(
                            f"{_shown(self.shown, [*names, name])} is a file, so it cannot "
                            f"contain {_shown(self.shown, [*names, name, *reversed(pending)])}.")
                expansions += 1
                if expansions > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "Too many levels of symbolic links",
                                  _shown(self.shown, [*names, name]))
                if target is True:  # the name changed while it was looked at: again
                    pending.append(name)
                    continue
                assert isinstance(target, str)
                link = _shown(self.shown, [*names, name])
                if target.startswith("/"):
                    rest = self._below_alias(target)
                    if rest is None:
                        raise PathEscapeError(
                            f"Refusing path {_shown(self.shown, [*names, name])}: it is a "
                            f"symlink that points outside {self.shown}. Only targets under "
                            f"{self.shown}/ can be reached.")
                    while len(stack) > 1:
                        os.close(stack.pop())
                    names.clear()
                    pending.extend(reversed(rest))
                else:
                    pending.extend(reversed(target.split("/")))
        finally:
            for fd in stack[1:]:
                os.close(fd)

    def _below_alias(self, target: str) -> list[str] | None:
        """The components of an absolute symlink target below the root, or None if it leaves."""
        normalized = os.path.normpath(target)
        for alias in self.aliases:
            if normalized == alias:
                return []
            if normalized.startswith(alias.rstrip("/") + "/"):
                return normalized[len(alias.rstrip("/")) + 1:].split("/")
        return None


def _symlink_target(parent: int, name: str) -> str | bool | None:
    """The target of the symlink ``name`` in ``parent``; True if it changed; None if no symlink."""
    try:
        fd = os.open(name, _STEP, dir_fd=parent)
    except FileNotFoundError:
        return True  # gone meanwhile: look again
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            return os.readlink("", dir_fd=fd)
        return None
    finally:
        os.close(fd)


def _checked(fd: int, directory: bool, shown: str, parts: Sequence[str]) -> int:
    """``fd`` when it is a directory (``directory``) or a regular file; else closed, OSError."""
    mode = os.fstat(fd).st_mode
    if directory or stat.S_ISREG(mode):
        return fd
    os.close(fd)
    # No errno: the message is the whole explanation.
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{_shown(shown, parts)} is a directory, not a file.")
    raise OSError(f"{_shown(shown, parts)} is not a regular file (a device, FIFO or socket).")


def _shown(shown: str, parts: Sequence[str]) -> str:
    clean = [part for part in parts if part not in ("", ".")]
    return "/".join([shown, *clean]) if clean else shown


def _named(error: OSError, shown: str, parts: Sequence[str]) -> OSError:
    """``error`` again, naming the path by its shown name rather than anything on the host."""
    return OSError(error.errno, error.strerror, _shown(shown, parts))


@dataclass(frozen=True)
class Entry:
    """One entry met by `walk`: its path below the walked directory and what it is."""

    relative: str
    """Components joined with ``/``, relative to the directory the walk started in."""
    kind: str
    """``"dir"``, ``"file"`` (a regular file), ``"symlink"`` or ``"other"``."""
    parent_fd: int
    """Descriptor of the directory holding the entry; valid only until the walk moves on."""
    name: str


def walk(dir_fd: int, max_depth: int, *, skip_names: Sequence[str] = ()) -> Iterator[Entry]:
    """Every entry below the directory ``dir_fd`` (an ``O_RDONLY`` descriptor), depth first.

    Depth 1 is the directory's own entries. Subdirectories are opened with
    ``O_NOFOLLOW | O_DIRECTORY`` relative to their parent's descriptor, so a
    symlink is reported as one and never descended into, however the tree
    changes meanwhile; one that vanishes or turns into something else is
    reported as it was seen and not entered. Entries come sorted by name per
    directory. Directories named in ``skip_names`` are listed but not entered.
    """
    yield from _walk_below(dir_fd, "", max_depth, frozenset(skip_names))


def _walk_below(dir_fd: int, prefix: str, depth_left: int,
                skip: frozenset[str]) -> Iterator[Entry]:
    try:
        with os.scandir(dir_fd) as scan:
            listed = sorted((entry.name, _kind(entry)) for entry in scan)
    except OSError:
        return
    for name, kind in listed:
        relative = f"{prefix}{name}"
        yield Entry(relative, kind, dir_fd, name)
        if kind != "dir" or depth_left <= 1 or name in skip:
            continue
        try:
            child = os.open(name, _DIRECTORY, dir_fd=dir_fd)
        except OSError:
            continue  # replaced by a symlink or removed meanwhile: not entered
        try:
            yield from _walk_below(child, relative + "/", depth_left - 1, skip)
        finally:
            os.close(child)


def _kind(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return "symlink"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"


@dataclass(frozen=True)
class Place:
    """Where a virtual path lives: the root(s) that may hold it and its components below.

    Skills may have several roots (the first holding the path wins, as the
    mapper says); a thread's files have one.
    """

    roots: tuple[Root, ...]
    parts: tuple[str, ...]
    virtual: str
    """The path's canonical virtual name (for messages)."""
    read_only: bool

    def open(self, flags: int, mode: int = 0o644, *, make_parents: bool = False,
             directory: bool = False) -> int:
        """`Root.open` in the first root that holds the path (the last root's error else)."""
        if self.read_only and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
                                       | os.O_APPEND):
            raise PermissionError(
                f"{self.virtual} is read-only: skills cannot be changed from the sandbox. "
                "Write under /mnt/user-data/outputs instead.")
        for index, root in enumerate(self.roots):
            try:
                return root.open(self.parts, flags, mode, make_parents=make_parents,
                                 directory=directory)
            except FileNotFoundError:
                if index == len(self.roots) - 1:
                    raise
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.virtual)


def place(mapper: VirtualPathMapper, path: str | os.PathLike[str]) -> Place:
    """Where ``path`` (virtual, relative to the workspace, or a host path inside) lives.

    Lexical only (`VirtualPathMapper.components`); opening through the result
    resolves symlinks beneath the root.

    Raises:
        PathEscapeError: the path climbs out of the thread's files or the skills.
    """
    skills, parts = mapper.components(path)
    if skills:
        roots = tuple(_skill_root(str(root)) for root in mapper.skill_roots)
        return Place(roots, parts, "/".join([SKILLS_VIRTUAL_ROOT, *parts]), True)
    root = _user_data_root(str(mapper.paths.user_data), str(mapper.resolved_root))
    return Place((root,), parts, "/".join([VIRTUAL_ROOT, *parts]), False)


@functools.lru_cache(maxsize=256)
def _user_data_root(host: str, resolved: str) -> Root:
    """A thread's ``user-data`` as a `Root` (made once: every file tool call needs it)."""
    return Root(host, VIRTUAL_ROOT, (VIRTUAL_ROOT, host, resolved))


@functools.lru_cache(maxsize=64)
def _skill_root(host: str) -> Root:
    """A skill root as a `Root`; ``/mnt/skills/...`` targets are taken within this root."""
    return Root(host, SKILLS_VIRTUAL_ROOT, (SKILLS_VIRTUAL_ROOT, host, os.path.realpath(host)))
