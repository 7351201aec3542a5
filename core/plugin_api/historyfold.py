"""A value derived from a thread's whole history, extended by the new messages only.

Some hooks need one fact about the entire history on every call: is every
tool call answered, where are the system messages, what does memory keep.
Computed afresh, that is a pass over every message on every model call, so a
turn costs more the longer the thread. Each such fact is a left fold (a start
value and a step over the next messages), and `HistoryFold` keeps, per thread,
the value after the messages its last call saw. The next call's history is
recognised as the same one continued when it is at least as long and holds,
at both ends of the seen part, the messages seen there (equal field by field,
as a checkpoint reload gives them): then only the messages after it are folded.

Anything else starts the fold over from the first message: summarization
removed or replaced messages, `update_state` replaced or removed some (which
moves the message at the end of the seen part), the thread was forked from an
earlier checkpoint, or another conversation uses the key. A checkpoint reload
gives new message objects with the same ids, so a new run continues the fold.
The one change the check does not see is a message rewritten in place under
its own id (`update_state` with that id) strictly between the first and the
last message seen: seeing it would mean comparing every message on every call,
the very work the fold saves. An edit of the first or the latest message is
seen.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from antler.contracts.runcontext import thread_id_of

T = TypeVar("T")

__all__ = ["HistoryFold"]

DEFAULT_THREADS = 1024
"""Threads a fold remembers before it forgets the least recently used one."""
DEFAULT_SHORT = 64
"""Histories shorter than this are folded afresh: cheaper than finding the thread's record."""


_Seen = tuple[int, Any, Any, Any]
"""(how many messages were seen, the first, the last, the value after them)."""


def _same_message(kept: Any, message: Any) -> bool:
    if kept is message:
        return True
    return type(kept) is type(message) and kept.__dict__ == message.__dict__


class HistoryFold(Generic[T]):
    """`advance(start, messages, 0)`, kept per key and continued with each call's new messages.

    `advance(value, messages, done)` returns the value after all of `messages`,
    given `value`, the value after the first `done` of them, and looks only at
    the messages from position `done` on. It must not change `value` in place
    (return a new one): the kept value is handed to the next call. The answer
    is always the one `advance(start, messages, 0)` gives, save for the
    in-place rewrite the module docstring names.
    """

    def __init__(self, start: T, advance: Callable[[T, Sequence[Any], int], T], *,
                 threads: int = DEFAULT_THREADS, short: int = DEFAULT_SHORT) -> None:
        self.start = start
        self.advance = advance
        self.threads = threads
        self.short = short
        self._seen: OrderedDict[Any, _Seen] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, key: Any, messages: Sequence[Any]) -> T:
        """The value for the whole of `messages`; `key` names the thread (None: no memory)."""
        if key is None or not messages or len(messages) < self.short:
            return self.advance(self.start, messages, 0)
        seen = self._seen.get(key)
        value, done = self.start, 0
        if seen is not None and self._continues(seen, messages):
            done, value = seen[0], seen[3]
        if done < len(messages):
            value = self.advance(value, messages, done)
        with self._lock:
            self._seen[key] = (len(messages), messages[0], messages[-1], value)
            self._seen.move_to_end(key)
            if len(self._seen) > self.threads:
                self._seen.popitem(last=False)
        return value

    @staticmethod
    def _continues(seen: _Seen, messages: Sequence[Any]) -> bool:
        length, first, last, _ = seen
        if len(messages) < length:
            return False
        now = messages[length - 1]
        return getattr(now, "id", None) is not None and _same_message(last, now) \
            and _same_message(first, messages[0])

    def of_request(self, request: Any) -> T:
        """The value for a model request's messages, kept under the request's thread."""
        messages = request.messages
        if len(messages) < self.short:  # not worth looking the thread up
            return self.advance(self.start, messages, 0)
        return self(thread_id_of(getattr(request, "runtime", None)), messages)

    def forget(self, key: Any) -> None:
        """Drop what is kept for `key` (its next call folds the whole history)."""
        with self._lock:
            self._seen.pop(key, None)

    def __len__(self) -> int:
        return len(self._seen)
