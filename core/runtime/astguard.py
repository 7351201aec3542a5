"""One `ast.parse` at a time, on the CPython versions where it is not thread-safe.

CPython 3.11 keeps the AST converter's recursion counter in interpreter-wide
state (python/cpython#106905). When two threads parse at once and a garbage
collection runs a finalizer in the middle of one conversion, the other thread
can run in between, and the first parse then fails with `SystemError: AST
constructor recursion depth mismatch`. Parsing is common in threads that have
nothing to do with parsing: `traceback` parses a source line to place its
carets, LangChain parses a lambda's source for its input schema, pydantic a
class's source for field docstrings. Antler runs sync hooks, tools and
subagents in worker threads, so a traceback logged in one could make an
unrelated thread's parse fail.

`install()` wraps `ast.parse` in a re-entrant lock on the affected versions
(a no-op from 3.12, whose converter keeps the counter per call). It is
idempotent, and `create_agent` calls it.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
from typing import Any

__all__ = ["install", "installed"]

_LOCK = threading.RLock()
_AFFECTED = sys.version_info < (3, 12)


def installed() -> bool:
    """Whether `ast.parse` is the serialized one (always false where it need not be)."""
    return getattr(ast.parse, "__antler_serialized__", False)


def install() -> None:
    """Serialize `ast.parse` across threads, once per process, where CPython needs it."""
    if not _AFFECTED or installed():
        return
    with _LOCK:
        if installed():
            return
        unguarded = ast.parse

        @functools.wraps(unguarded)
        def parse(*args: Any, **kwargs: Any) -> Any:
            with _LOCK:
                return unguarded(*args, **kwargs)

        parse.__antler_serialized__ = True  # type: ignore[attr-defined]
        ast.parse = parse
