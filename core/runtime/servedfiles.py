"""Where a served thread's files are, and removing them (`ServedThreadFiles`).

Under LangGraph Server a thread keeps its files under ``users/<user id>/threads/
<thread id>`` of the base directory, the user id being the one its run ran as:
the authenticated user's, or, with ``server: {trust_client_identity: true}``,
the one the client stated in the run's ``context``. So the thread id alone does
not say where the files are, and a request that deletes the thread (which has no
``context``) cannot tell. The served graph therefore notes, before each run, the
user id whose directory the run uses, in ``served-threads/<thread id>`` of the base
directory (one user id a line, under a lock), and removing the thread's files
removes exactly the directories noted there; a thread with no note (its runs
predate the notes, or it never ran) has the authenticated user's directory only.

A run as a stated identity (not the authenticated user) may not adopt a
directory no run of this thread made: when ``users/<stated>/threads/<id>``
exists and is not noted for the thread, the run is refused. Otherwise a client
could create a thread under the id of another user's directory, state that
user, and read the files or, by deleting the thread, remove them.

`takeover` asks the same question without noting anything, so the HTTP layer
can refuse such a run before it starts.

A thread the server removed without a request (its TTL sweep, a row deleted in
its database) is found by its note: `remove_if_gone` removes the noted
directories of a thread whose note exists, only when the server, asked while
the note is locked, no longer has it; a directory without a note is never
touched.

A run that ends after its thread was deleted (the note is gone) removes the
directory it used again, so no run leaves files of a deleted thread behind;
a run without a checkpointer (LangGraph Server's stateless runs, whose thread
it deletes when the run ends) removes its thread's files when it ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from antler.contracts.runcontext import DEFAULT_USER
from antler.errors import InputError
from antler.plugin_api.paths import InvalidIdentifierError, PathLayout

from .sandbox.threaddir import ThreadDirectoryError, remove_thread_directory
from .storage.base import StorageError

__all__ = ["RECORD_DIR", "ServedThreadFiles"]

RECORD_DIR = "served-threads"
"""Under the base directory: one file per served thread, the user ids of its directories."""


class ServedThreadFiles:
    """The directories of served threads' files under `paths.base`, noted per run."""

    def __init__(self, paths: PathLayout) -> None:
        self.paths = paths
        self.records = Path(paths.base) / RECORD_DIR

    def directory(self, user_id: str, thread_id: str) -> Path | None:
        """``users/<user_id>/threads/<thread_id>``; None when either id is not one a
        directory can have (``..``, a path, a control character)."""
        try:
            directory = self.paths.thread(user_id, thread_id).user_data.parent
        except InvalidIdentifierError:
            return None
        if directory.parent.parent.parent != Path(self.paths.base) / "users":
            return None  # validated ids give exactly that layout; anything else is refused
        return directory

    def users(self, thread_id: str) -> list[str] | None:
        """The user ids noted for `thread_id`, None when it has no note."""
        if not self._valid(thread_id):
            return None
        try:
            return _user_ids(self._record(thread_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def claim(self, thread_id: str, user_id: str, authenticated_id: str) -> None:
        """Note that a run of `thread_id` uses `user_id`'s directory.

        Raises:
            InputError: `user_id` is a stated identity (not `authenticated_id`) and
                its directory of the thread exists, made by nothing this thread ran.
            StorageError: the note cannot be written (the base directory is not
                writable, the disk is full); the run does not start.
        """
        directory = self.directory(user_id, thread_id)
        if directory is None:
            return  # no directory can have these ids: the run's own checks refuse them
        try:
            self._claim(thread_id, user_id, authenticated_id, directory)
        except OSError as error:
            raise StorageError(
                f"thread {thread_id}: cannot note whose files its run uses in "
                f"{self._record(thread_id)}: {error.strerror or error}. The served graph "
                f"keeps one note per thread under {self.records}: make that directory "
                f"writable by the server (or free space), then run again",
                path=self.records) from None

    def _claim(self, thread_id: str, user_id: str, authenticated_id: str,
               directory: Path) -> None:
        with self._locked(thread_id, create=True) as fd:
            assert fd is not None  # created when missing
            noted = _user_ids(_read(fd))
            if user_id in noted:
                return
            if user_id != authenticated_id and directory.exists():
                raise InputError(_takeover(thread_id, user_id, authenticated_id))
            os.write(fd, f"{user_id}\n".encode())

    def takeover(self, thread_id: str, user_id: str, authenticated_id: str) -> str | None:
        """Why a run of `thread_id` as `user_id` would be refused by `claim` (None: it
        would not): a stated identity whose directory of the thread exists, made by
        nothing this thread ran. Reads only; `claim` decides again when the run starts."""
        directory = self.directory(user_id, thread_id)
        if user_id == authenticated_id or directory is None or not directory.exists():
            return None
        with self._locked(thread_id, create=False) as fd:
            if user_id in _user_ids(_read(fd)):
                return None
        return _takeover(thread_id, user_id, authenticated_id)

    def remove(self, thread_id: str, authenticated_id: str) -> list[Path]:
        """End the namespaces of `thread_id` and remove every directory noted for it
        (`authenticated_id`'s without a note), then the note; the directories.

        Raises:
            ThreadDirectoryError: some could not be removed (each named, with why);
                the others are gone, and the note is kept for them.
        """
        if not self._valid(thread_id):
            return []
        with self._locked(thread_id, create=False) as fd:
            users = _user_ids(_read(fd)) if fd is not None else [authenticated_id]
            return self._remove_locked(thread_id, users, noted=fd is not None)

    def noted_threads(self) -> list[str]:
        """The thread ids that have a note (a served run of theirs noted its directory)."""
        try:
            names = sorted(entry.name for entry in os.scandir(self.records)
                           if entry.is_file(follow_symlinks=False))
        except FileNotFoundError:
            return []
        return [name for name in names if self._valid(name)]

    def remove_if_gone(self, thread_id: str, gone: Callable[[], bool]) -> list[Path]:
        """Remove what `remove` would for `thread_id`, only when it has a note and
        `gone()`, asked while the note is locked, says the server no longer has the
        thread (a run claiming the thread meanwhile waits, and finds no note after).

        Raises:
            ThreadDirectoryError: as `remove`.
        """
        if not self._valid(thread_id):
            return []
        with self._locked(thread_id, create=False) as fd:
            if fd is None or not gone():
                return []
            return self._remove_locked(thread_id, _user_ids(_read(fd)), noted=True)

    def _remove_locked(self, thread_id: str, users: list[str], *, noted: bool) -> list[Path]:
        directories = [d for d in (self.directory(u, thread_id) for u in users) if d]
        failed: list[str] = []
        for directory in directories:
            try:
                remove_thread_directory(directory)
            except ThreadDirectoryError as error:
                failed.append(f"{directory}: {_reason(error)}")
        if failed:
            raise ThreadDirectoryError("; ".join(failed))
        if noted:
            self._record(thread_id).unlink(missing_ok=True)
        return directories

    def settle(self, thread_id: str, user_id: str, authenticated_id: str, *,
               temporary: bool) -> None:
        """After a run of `thread_id` as `user_id`: a `temporary` run's thread loses its
        files; a run whose thread was deleted meanwhile (its note gone) removes the
        directory it used again."""
        directory = self.directory(user_id, thread_id)
        if directory is None:
            return
        if temporary:
            self.remove(thread_id, authenticated_id)
            return
        with self._locked(thread_id, create=False) as fd:
            if fd is None and directory.exists():
                remove_thread_directory(directory)

    def _valid(self, thread_id: str) -> bool:
        """Whether `thread_id` may name a directory (and so a note)."""
        return self.directory(DEFAULT_USER, thread_id) is not None

    def _record(self, thread_id: str) -> Path:
        return self.records / thread_id

    @contextlib.contextmanager
    def _locked(self, thread_id: str, *, create: bool) -> Iterator[int | None]:
        """The thread's note, open and locked (None when there is none and not `create`).

        A note removed while this waited for the lock is opened again, so a run's note
        never goes into a file that no longer has a name.
        """
        path = self._record(thread_id)
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            if create:
                self.records.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o600)
            except FileNotFoundError:
                yield None
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    current = os.stat(path, follow_symlinks=False)
                except FileNotFoundError:
                    current = None
                if current is not None and current.st_ino == os.fstat(fd).st_ino:
                    yield fd
                    return
            finally:
                os.close(fd)


def _read(fd: int | None) -> str:
    if fd is None:
        return ""
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 65536, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _user_ids(text: str) -> list[str]:
    return list(dict.fromkeys(line for line in text.splitlines() if line))


def _takeover(thread_id: str, user_id: str, authenticated_id: str) -> str:
    return (f"thread {thread_id}: user {user_id!r} already has files for this thread id that "
            f"no run of this thread made; a run may not take over another user's directory "
            f"by stating its identity. Start a new thread, or run as {authenticated_id!r}")


def _reason(error: ThreadDirectoryError) -> str:
    """Why a removal failed, without `remove_thread_directory`'s advice to delete again."""
    cause = error.__cause__
    if isinstance(cause, OSError) and cause.strerror:
        return f"{cause.filename or ''}: {cause.strerror}".lstrip(": ")
    return str(error)
