"""What input_sanitization knows about one thread, kept so each hook works on what is new.

The provenance record compares every `HumanMessage` with the form the server
last saw, and each model request swaps the genuine user messages for
sanitized copies. Done from scratch, every hook call would fingerprint and
copy the whole history. A `Ledger` keeps, per thread, the results of the last
call: the fingerprint of every user message present, a mirror of the record,
and the last model request with its sanitized copy. A hook brings it up to
date with what changed since, and only that:

- within a run, the state's message objects stay the same objects: the new
  list is compared with the last one by identity (a C-level list comparison),
  and only the part after the first difference is looked at;
- a new run reloads the thread from its checkpoint as new, equal objects; the
  graph's journal (`antler.contracts.writes`) lists every message written or
  removed since the ledger's mark, and only those are looked at.

A hook that writes the record writes a fresh token as the journal's base and
in the record, in the same state update; the first hook of a run always
does. So a ledger is used only for the state its own write produced: a
failed step, a replay of an older checkpoint, a record written by someone
else, another process or a graph without the journal all find no ledger for
their token, and the hook starts from the state as it is (`Ledger.rebuild`,
the whole history once). A hook that writes nothing keeps the ledger under
the state's mark; a model call that wrote nothing is trusted across a reload
only once the journal lists its reply (its model node was saved). The
results are the same either way; only the work differs.
"""

from __future__ import annotations

import itertools
import uuid
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import HumanMessage

from antler.plugin_api import REINSERTED_SUFFIX, WRITES_KEY, reinserted_from, reinserted_id

__all__ = ["Ledger", "common_prefix", "keep", "new_token", "take"]

LIMIT = 256
"""Threads whose ledger is kept (the least recently used goes first)."""

_ledgers: dict[str, Ledger] = {}
"""By mark, oldest first (`take` removes, `keep` adds: single dict operations, atomic
under the interpreter lock, so hooks on several threads need no lock of their own)."""
_process = uuid.uuid4().hex[:16]
_serial = itertools.count()


def new_token() -> str:
    """A mark no other write has: this process's random half and a serial number (32 hex
    digits, shaped like a uuid, which is how tools that compare runs recognize ids)."""
    return f"{_process}{next(_serial):016x}"


def take(state: Any, record_key: str) -> Ledger | None:
    """The ledger for `state`, removed from the registry (None: start from the state).

    Found only when the journal continues from a ledger's mark, the graph keeps
    the journal, and the record is the one the ledger last wrote.
    """
    journal = state.get(WRITES_KEY) if isinstance(state, dict) else None
    if not journal:
        return None
    ledger = _ledgers.pop(journal.get("base"), None)
    if ledger is None:
        return None
    record = state.get(record_key)
    token = record.get("token") if isinstance(record, dict) else None
    if bool(record) != ledger.exists or token != ledger.record_token:
        return None
    return ledger


def keep(ledger: Ledger, token: str) -> None:
    """Register `ledger` under `token`, the journal base its hook writes."""
    ledger.token = token
    _ledgers[token] = ledger
    while len(_ledgers) > LIMIT:
        try:
            del _ledgers[next(iter(_ledgers))]
        except (KeyError, RuntimeError, StopIteration):  # another thread got there first
            break


def common_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    """How many leading messages `new` shares with `old` (the same objects, or equal ones).

    The whole-prefix test is one C-level list comparison (identity first); when
    it fails, the first difference is found by comparing ever shorter prefixes
    from the end, so a change near the end costs a few comparisons.
    """
    n = min(len(old), len(new))
    if n == 0:
        return 0
    if old[n - 1] is new[n - 1] and _equal(old, new, n):
        return n
    low, high, step = 0, n, 1
    while True:
        k = high - step
        if k <= low:
            break
        if old[k - 1] is new[k - 1] and _equal(old, new, k):
            low = k
            break
        high, step = k, step * 2
    while low < high and old[low] is new[low]:
        low += 1
    return low


def _equal(old: Sequence[Any], new: Sequence[Any], k: int) -> bool:
    a = old if len(old) == k else old[:k]
    b = new if len(new) == k else new[:k]
    return a == b


class Ledger:
    """One thread's fingerprints, record mirror and last model request (see the module doc)."""

    __slots__ = ("answer", "candidates", "exists", "gone", "ids", "messages", "present",
                 "record_token", "request", "seen", "token", "user", "watch")

    def __init__(self) -> None:
        self.token = ""
        self.record_token: str | None = None  # the record's token at this ledger's last write
        self.exists = False  # whether the record is in the state at all
        self.seen: dict[str, str] = {}
        self.user: set[str] = set()
        # Id -> fingerprint of every HumanMessage with an id in `messages`.
        self.present: dict[str, str] = {}
        self.messages: Sequence[Any] = []
        self.ids: set[str] = set()  # the ids of `messages`
        # User messages new or changed since the record was last compared, in order.
        self.candidates: list[HumanMessage] = []
        self.gone: set[str] = set()  # ids that left `present` since then
        self.watch: set[str] = set()  # re-added ids whose original may be the user's now
        self.request: Request | None = None
        # The reply of a model call that wrote no mark: until the journal lists it, what
        # that call saw may never have been saved (its model node can still fail).
        self.answer: Any = None

    # -- starting over ---------------------------------------------------------------

    @classmethod
    def rebuild(cls, messages: Sequence[Any], record: Any,
                fingerprint: Callable[[Any], str]) -> Ledger:
        """A ledger for `messages` and `record` as they are: every user message a candidate."""
        ledger = cls()
        ledger.exists = bool(record)
        raw = record if isinstance(record, dict) else {}
        seen, user = raw.get("seen"), raw.get("user")
        ledger.seen = dict(seen) if isinstance(seen, dict) else {}
        ledger.user = {i for i in user if isinstance(i, str)} if isinstance(user, list) else set()
        ledger.record_token = raw.get("token")
        ledger.messages = messages
        ledger.ids = {m.id for m in messages if m.id}
        for message in messages:
            if isinstance(message, HumanMessage) and message.id:
                ledger.present[message.id] = fingerprint(message)
                ledger.candidates.append(message)
                if reinserted_from(message.id) is not None:
                    ledger.watch.add(message.id)
        ledger.gone = {i for i in (*ledger.seen, *ledger.user) if i not in ledger.present}
        return ledger

    # -- catching up -----------------------------------------------------------------

    def follow(self, messages: Sequence[Any], fingerprint: Callable[[Any], str]) -> int:
        """Catch up with `messages`, a later list of the same run (same objects where unchanged).

        Returns how many leading messages the two lists share.
        """
        old = self.messages
        if messages is old:
            return len(old)
        p = common_prefix(old, messages)
        tail = messages[p:]
        kept = {m.id for m in tail if m.id}
        for message in old[p:]:
            if message.id and message.id not in kept:
                self._drop(message.id)
                self.ids.discard(message.id)
        self.ids.update(kept)
        for message in tail:
            self._arrived(message, fingerprint)
        self.messages = messages
        return p

    def reload(self, messages: Sequence[Any], journal: Any,
               fingerprint: Callable[[Any], str]) -> bool:
        """Catch up with a reloaded `messages` through the journal; False: it cannot say.

        Messages the journal does not list are equal to the ones the ledger saw;
        the listed ones are looked up from the end of the list, where new
        messages are.
        """
        if not (isinstance(journal, dict) and journal.get("recorded")) or journal.get("all"):
            return False
        written = [i for i in journal.get("ids") or () if isinstance(i, str)]
        removed = [i for i in journal.get("removed") or () if isinstance(i, str)]
        if self.answer is not None:
            if getattr(self.answer, "id", None) not in written:
                return False
            self.answer = None
        wanted, gone = set(written), set(removed)
        # What the journal lists must account for the whole change in length: a write it
        # cannot see (a `Command` given as graph input) shows here, and the state is
        # taken as it is. (Such a write replacing a message in place does not show.)
        if wanted & gone or len(self.ids) + len(wanted - self.ids) - len(gone & self.ids) \
                != len(messages):
            return False
        found: list[Any] = []
        for message in reversed(messages):
            if not wanted:
                break
            if message.id in wanted:
                wanted.discard(message.id)
                found.append(message)
        for message_id in (*removed, *wanted):
            self._drop(message_id)
        self.ids -= gone
        self.ids |= set(written)
        for message in reversed(found):
            self._arrived(message, fingerprint)
        request = self.request
        if request is not None and not request.still_prefix_of(
                messages, written[request.mark[0]:], removed[request.mark[1]:]):
            self.request = None
        self.messages = messages
        return True

    def _arrived(self, message: Any, fingerprint: Callable[[Any], str]) -> None:
        if isinstance(message, HumanMessage) and message.id:
            self.present[message.id] = fingerprint(message)
            self.candidates.append(message)
            if message.id.endswith(REINSERTED_SUFFIX):
                self.watch.add(message.id)
        elif message.id and message.id in self.present:
            self._drop(message.id)

    def _drop(self, message_id: str) -> None:
        if self.present.pop(message_id, None) is not None or message_id in self.seen \
                or message_id in self.user:
            self.gone.add(message_id)

    def marked(self) -> None:
        """The hook writes a fresh journal mark: the journal starts over from here."""
        self.answer = None
        if self.request is not None:
            self.request.mark = (0, 0)

    # -- the record --------------------------------------------------------------------

    def gone_ids(self) -> list[str]:
        """Ids the record holds that are no longer present (the change's ``gone``)."""
        if not self.gone:
            return []
        return [i for i in self.gone
                if i not in self.present and (i in self.seen or i in self.user)]

    def readded(self) -> list[str]:
        """Present re-added copies of user messages that are not user messages yet."""
        if not self.watch and not self.candidates:
            return []
        ids = [m.id for m in self.candidates if m.id in self.present] + [
            i for i in self.watch if i in self.present]
        out: list[str] = []
        for message_id in ids:
            if message_id not in self.user and reinserted_from(message_id) in self.user \
                    and message_id not in out:
                out.append(message_id)
        return out

    def changed(self) -> dict[str, str]:
        """Candidates whose fingerprint differs from the one the record holds."""
        changed: dict[str, str] = {}
        for message in self.candidates:
            digest = self.present.get(message.id or "")
            if digest is not None and self.seen.get(message.id or "") != digest:
                changed[message.id or ""] = digest
        return changed

    def settle(self, change: Any, token: str, *, observed: bool) -> None:
        """The record's change (None: none) goes out with `token`: compared up to here.

        `observed`: the re-added copies were looked at too (`readded`), so the
        ones watched so far need no further look.
        """
        self.candidates = []
        self.gone = set()
        if observed:
            self.watch = set()
        if not change:
            return
        self.exists = True
        self.record_token = token
        for message_id in change.get("gone") or ():
            self.seen.pop(message_id, None)
            self.user.discard(message_id)
        self.seen.update(change.get("seen") or {})
        joined = [i for i in change.get("user") or () if i not in self.user]
        self.user.update(joined)
        self.watch.update(reinserted_id(i) for i in joined)
        request = self.request
        if request is not None and (request.everyone or not request.ids.isdisjoint(joined)):
            self.request = None  # a message it passed on raw is the user's now


class Request:
    """The last model request's messages and their sanitized copies, by position.

    The input list is kept, not copied: a request's message list is never changed
    in place (middlewares give a request new messages with ``override``).
    """

    def __init__(self, everyone: bool) -> None:
        self.everyone = everyone
        self.inputs: Sequence[Any] = []
        self.outputs: list[Any] = []
        """The request's messages with the sanitized copies (a new list every call)."""
        self.ids: set[str] = set()
        self.positions: list[int] = []
        """Positions of the genuine user messages, ascending."""
        self.findings: list[Any] = []
        self.copied: list[bool] = []
        self.copies = 0
        """How many of `outputs` are copies (none: the request goes on unchanged)."""
        self.mark = (0, 0)
        """How many written and removed ids the journal listed when the request was made:
        only later writes can have touched it."""

    def still_prefix_of(self, messages: Sequence[Any], written: Sequence[str],
                        removed: Sequence[str]) -> bool:
        """After a reload: re-point the inputs at `messages` if no listed write touched them."""
        n = len(self.outputs)
        if any(i in self.ids for i in written) or any(i in self.ids for i in removed) \
                or len(messages) < n or (n and messages[n - 1].id != self.inputs[n - 1].id):
            return False
        self.inputs = messages  # its first len(outputs) messages are the ones sent
        return True

    def extend(self, messages: Sequence[Any], genuine: Callable[[Any], bool],
               sanitize: Callable[[Any], tuple[Any, Any]], journal: Any,
               shared: int | None = None) -> None:
        """Bring the request up to `messages`: keep the shared prefix, sanitize the rest.

        `journal`: the state's message-write journal; `shared`: the length of that
        prefix, when the caller already knows it.
        """
        listed = journal if isinstance(journal, dict) else {}
        self.mark = (len(listed.get("ids") or ()), len(listed.get("removed") or ()))
        p = common_prefix(self.inputs, messages) if shared is None else shared
        p = min(p, len(self.outputs))
        k = bisect_left(self.positions, p)
        if k < len(self.positions):
            self.copies -= sum(self.copied[k:])
            del self.positions[k:], self.findings[k:], self.copied[k:]
        for message in self.inputs[p:]:
            self.ids.discard(message.id)
        # A new list each time: the last one went out with a request and stays as it was.
        outputs = self.outputs[:p]
        for position in range(p, len(messages)):
            message = messages[position]
            if message.id:
                self.ids.add(message.id)
            if isinstance(message, HumanMessage) and genuine(message):
                clean, found = sanitize(message)
                self.positions.append(position)
                self.findings.append(found)
                self.copied.append(clean is not message)
                self.copies += clean is not message
                message = clean
            outputs.append(message)
        self.inputs, self.outputs = messages, outputs

    @property
    def latest(self) -> Any:
        """The findings in the last genuine user message (empty when there is none)."""
        return self.findings[-1] if self.findings else []
