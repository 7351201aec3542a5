"""Where a thread's history lives, who owns it, and who may run it right now.

The public face of the storage package: import from `antler.runtime.storage`.
Its modules import one way, each only from those above it in this list:

* `base`: the errors, the `ThreadOwners`/`ThreadLocks` interfaces, the
  backend setting (`resolve_backend`);
* `savers`: `DualSaver`, one checkpointer for sync and async runs;
* `deltas`: delta checkpoints (`storage.messages_channel: delta`);
* `postgres`: the PostgreSQL backend (pool, owners, advisory lock keys);
* `failures`: database and file-system errors as one `StorageError`;
* `owners`: owner records of the embedded backends;
* `locks`: the run locks of every backend, behind each process's line of runs;
* `sqlite`: SQLite files and the SQLite checkpointer;
* `store`: the shared store (`LazyStore`, `open_store`);
* `opening`: `Storage` and `open_storage`/`storage_for`;
* `admin`: `ThreadAdmin`, behind `antler threads`.

`tests/test_package_layers.py` holds the package to that order.
"""

from __future__ import annotations

from .admin import ThreadAdmin, ThreadInfo
from .base import (
    RunLockLostError,
    StorageError,
    ThreadBusyError,
    ThreadLocks,
    ThreadOwners,
    ThreadOwnershipError,
    resolve_backend,
)
from .deltas import delta_channel_names, use_delta_channels
from .failures import ensure_directory, storage_error, storage_errors
from .locks import FileThreadLocks, ProcessThreadLocks
from .opening import Storage, open_storage, storage_for
from .owners import MemoryOwners, SqliteOwners
from .postgres import is_postgres_url
from .savers import DualSaver
from .sqlite import CHECKPOINT_FILENAME
from .store import STORE_FILENAME, LazyStore, open_store

__all__ = [
    "CHECKPOINT_FILENAME",
    "STORE_FILENAME",
    "DualSaver",
    "FileThreadLocks",
    "LazyStore",
    "MemoryOwners",
    "ProcessThreadLocks",
    "RunLockLostError",
    "SqliteOwners",
    "Storage",
    "StorageError",
    "ThreadAdmin",
    "ThreadBusyError",
    "ThreadInfo",
    "ThreadLocks",
    "ThreadOwners",
    "ThreadOwnershipError",
    "delta_channel_names",
    "ensure_directory",
    "is_postgres_url",
    "open_storage",
    "open_store",
    "resolve_backend",
    "storage_error",
    "storage_errors",
    "storage_for",
    "use_delta_channels",
]
