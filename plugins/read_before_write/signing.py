"""The server's key for read marks: marks a caller cannot forge, valid across restarts.

A read mark says "the agent read this version of this file". A caller that can
put a `ToolMessage` into the conversation (an operator who allows the ``tool``
role, or a mark copied from another thread) could claim any read. So each mark
carries an HMAC-SHA256 of what it claims (user, thread, tool call, path, file
digest) under a key only the server holds: ``<base>/keys/read-marks.key``,
32 random bytes in hex, created with mode 0600 on first use and kept, so marks
stay valid after a restart. A mark whose signature does not verify is ignored.

Deleting the key file invalidates every mark (the agent reads files again
before editing them). A key file that others can read is refused: whoever reads
it can forge marks.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
from pathlib import Path

from antler.plugin_api import BuildError

__all__ = ["KEY_PATH", "MarkSigner", "load_key"]

KEY_PATH = Path("keys") / "read-marks.key"
"""Where the key lives, relative to the base directory."""

_KEY_HEX = 64


def load_key(base: Path) -> bytes:
    """The key under `base`, created (mode 0600) when there is none yet."""
    path = base / KEY_PATH
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(handle, secrets.token_hex(_KEY_HEX // 2).encode("ascii"))
        os.fsync(handle)
    finally:
        os.close(handle)
    try:
        os.link(temporary, path)  # atomic: a concurrent first use keeps the first key
    except FileExistsError:
        pass
    finally:
        os.unlink(temporary)
    return _read(path)


def _read(path: Path) -> bytes:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise BuildError(
            f"read_before_write: the key file {path} can be read by other users (mode "
            f"{mode:04o}); whoever reads it can forge read marks. Run `chmod 600 {path}`.")
    with path.open("rb") as stream:  # a key and a line break; more is not a key anyway
        text = stream.read(2 * _KEY_HEX).decode("ascii", errors="replace").strip()
    if len(text) != _KEY_HEX or any(c not in "0123456789abcdef" for c in text):
        raise BuildError(
            f"read_before_write: the key file {path} is not a key (64 hex digits); delete it "
            "and a new key is made on the next start (files must then be read again before "
            "they are edited).")
    return bytes.fromhex(text)


class MarkSigner:
    """Signs and checks what a read mark claims, with the key under `base`.

    A key that exists is checked at once (a bad one fails the build); a missing
    one is made on the first mark, so a chat that reads no file writes nothing.
    """

    def __init__(self, base: Path) -> None:
        self._base = base
        self._lock = threading.Lock()
        self._key: bytes | None = None
        if (base / KEY_PATH).exists():
            self._key = _read(base / KEY_PATH)

    def key(self) -> bytes:
        if self._key is None:
            with self._lock:
                if self._key is None:
                    self._key = load_key(self._base)
        return self._key

    def sign(self, claim: tuple[str, ...]) -> str:
        payload = "\x1f".join(("read-mark-v1", *claim)).encode("utf-8", "surrogatepass")
        return hmac.new(self.key(), payload, hashlib.sha256).hexdigest()

    def verify(self, claim: tuple[str, ...], signature: object) -> bool:
        return isinstance(signature, str) and hmac.compare_digest(self.sign(claim), signature)
