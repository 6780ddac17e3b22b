"""The journal: what happened on one agent, in order, bounded, and the source of every replay.

Each entry is the wire ``entry`` of ``agent/event`` (``docs/sessions.md``):
``run_start``, ``event`` (one stream event of a run), ``run_end`` (the
result), ``update`` (a raw ACP update), ``note``.  Entries get ``seq`` from 1,
strictly increasing; retention keeps the newest ``max_events`` entries and at
most ``max_bytes``, whichever is smaller, dropping the oldest first.

Under back-pressure a text event may be joined into the entry before it
(:meth:`Journal.join_text`, PROTOCOL §13.1): only into the newest entry,
only while no connection has been sent it (:meth:`Journal.take` marks an
entry sent), only a plain text event of the same run, and only up to
:data:`JOIN_MAX_BYTES` (docs/decisions.md D19).

Readers never hold a queue of their own: a watcher keeps a cursor (the last
``seq`` it delivered) and reads :meth:`Journal.after` it, so a slow reader
costs no memory beyond the journal's bound.  A reader that follows the
journal live (:meth:`Journal.follow`) is handed each new entry as it is
appended: one that is caught up sends it there and then, without a task of
its own waking for it; one that is behind, or whose connection cannot take
the frame at once, wakes its own task, which catches up from its cursor.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

__all__ = ["JOIN_MAX_BYTES", "Entry", "Follower", "Journal"]

#: What an entry costs beyond its text, for the byte limit (keys, ids, framing).
_ENTRY_OVERHEAD = 96
#: The largest a joined text entry grows: past it the next text opens an entry
#: of its own, so a reader that lags sees its backlog in entries (which the
#: journal's retention and a paced run count), never in one unbounded entry.
JOIN_MAX_BYTES = 64 * 1024


@dataclass(eq=False, slots=True)
class Entry:
    seq: int
    #: The wire ``entry``: ``{"type": ...}`` as ``agent/event`` carries it.
    data: dict[str, Any]
    size: int
    #: Sent to some connection: no more text may be joined into it.
    sent: bool = False
    #: The journal's appended bytes up to this entry's end (see :meth:`Journal.would_drop`).
    mark: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {"seq": self.seq, "entry": self.data}


def _size(data: dict[str, Any]) -> int:
    event = data.get("event")
    if (
        data["type"] == "event"
        and isinstance(event, dict)
        and event.get("type") == "text"
        and "update" not in data  # the raw update it came from counts too
    ):
        # The common entry: counted without encoding it (a stream's hot path).
        return len(event["data"]) + _ENTRY_OVERHEAD
    return len(orjson.dumps(data)) + _ENTRY_OVERHEAD


class Follower(Protocol):
    """A live reader of a journal (a watcher, an ACP facade client)."""

    def appended(self, entry: Entry) -> None:
        """``entry`` was just appended: send it now, or wake the reader's own task.

        Called from the appending task, so it must neither wait nor raise.
        """


class Journal:
    """One agent's ordered, bounded record; see the module docstring."""

    def __init__(
        self,
        *,
        max_events: int,
        max_bytes: int,
        on_append: Callable[[Entry, str | None], None] | None = None,
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        #: Called for every new entry as ``(entry, None)`` and for text joined
        #: into one as ``(entry, text)`` (persistence writes both).
        self.on_append = on_append
        self._entries: deque[Entry] = deque()
        self._bytes = 0
        #: Every byte ever appended (retained or not): readers' lags are measured in it.
        self._appended = 0
        self.last_seq = 0
        self._followers: list[Follower] = []
        #: The newest entry's encoded notification, shared by its live readers
        #: (:meth:`shared_frame`), and counted in ``_bytes`` while kept.
        self._frame: tuple[Entry, bytes] | None = None

    # -- reading ---------------------------------------------------------------

    @property
    def oldest_seq(self) -> int:
        """The ``seq`` of the oldest retained entry (``last_seq + 1`` when none is)."""
        return self._entries[0].seq if self._entries else self.last_seq + 1

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def retained_bytes(self) -> int:
        """The bytes of the retained entries, as counted against ``max_bytes``."""
        return self._bytes

    def after(self, seq: int) -> list[Entry]:
        """The retained entries with a ``seq`` above ``seq``, in order."""
        if not self._entries or seq >= self.last_seq:
            return []
        start = max(0, seq + 1 - self._entries[0].seq)
        # Seqs are contiguous within the deque, so the index is arithmetic.
        return [self._entries[i] for i in range(start, len(self._entries))]

    def entries(self) -> list[Entry]:
        return list(self._entries)

    @staticmethod
    def take(entry: Entry) -> None:
        """Mark ``entry`` sent: closed to joining (its wire form is :meth:`Entry.to_wire`)."""
        entry.sent = True

    def would_drop(self, cursor: int, size: int) -> bool:
        """Whether appending an entry of ``size`` bytes would trim one a reader has yet to send.

        The reader has sent the entries up to ``cursor``.  A writer that waits
        while this is true never trims an entry from under a reader that keeps
        reading, and the journal stays within its bounds.
        """
        behind = self.last_seq - cursor
        if behind <= 0:
            return False
        if behind + 1 > self.max_events:
            return True
        first = self._entries[0]
        index = cursor - first.seq
        sent = self._entries[index].mark if index >= 0 else first.mark - first.size
        return self._appended - sent + size > self.max_bytes

    def shared_frame(self, entry: Entry, encode: Callable[[Entry], bytes]) -> bytes:
        """``encode(entry)``, kept while ``entry`` is the newest, for every reader to share.

        The live readers of an agent (its watchers) send the same bytes for a
        new entry: encoded once, by the first.  Only the newest entry's is
        kept, and it counts against ``max_bytes`` like the entries do
        (PROTOCOL §23); an older entry (a catch-up, a replay) is encoded for
        the send and not kept, so a replayed journal costs no more than an
        unread one.
        """
        kept = self._frame
        if kept is not None and kept[0] is entry:
            return kept[1]
        frame = encode(entry)
        if entry.seq == self.last_seq:
            self._drop_frame()
            self._frame = (entry, frame)
            self._bytes += len(frame)
            self._trim()
        return frame

    def _drop_frame(self) -> None:
        if self._frame is not None:
            self._bytes -= len(self._frame[1])
            self._frame = None

    @staticmethod
    def size_of(data: dict[str, Any]) -> int:
        """What an entry of ``data`` counts for the byte limit."""
        return _size(data)

    def follow(self, follower: Follower) -> None:
        """Hand ``follower`` every entry appended from now on (:meth:`Follower.appended`)."""
        self._followers.append(follower)

    def unfollow(self, follower: Follower) -> None:
        if follower in self._followers:
            self._followers.remove(follower)

    # -- writing ---------------------------------------------------------------

    def append(self, data: dict[str, Any], size: int | None = None) -> Entry:
        """Add one entry (``size``: its :meth:`size_of`, when known); returns it."""
        # Every stream event passes here: the checks are inline, the calls
        # made only when there is something to do.
        if self._frame is not None:
            self._drop_frame()  # the entry it was encoded for is the newest no more
        if size is None:
            size = _size(data)
        seq = self.last_seq = self.last_seq + 1
        appended = self._appended = self._appended + size
        entry = Entry(seq, data, size, False, appended)
        entries = self._entries
        entries.append(entry)
        self._bytes += size
        if len(entries) > self.max_events or self._bytes > self.max_bytes:
            self._trim()
        if self.on_append is not None:
            self.on_append(entry, None)
        for follower in self._followers:
            follower.appended(entry)
        return entry

    def join_text(self, entry: Entry, run_id: str, text: str) -> bool:
        """Grow ``entry`` by ``text`` (a text event of ``run_id``) if §13.1 allows; ``True`` if so.

        It must be the newest entry, sent to no connection, a plain text
        event (not an ACP chunk, which the facade relays as it came) of the
        same run, and stay within :data:`JOIN_MAX_BYTES`.
        """
        data = entry.data
        event = data.get("event")
        if (
            entry.sent
            or entry.seq != self.last_seq
            or data["type"] != "event"
            or data.get("runId") != run_id
            or "update" in data
            or not isinstance(event, dict)
            or event.get("type") != "text"
            or entry.size + len(text) > JOIN_MAX_BYTES
        ):
            return False
        event["data"] += text
        self._drop_frame()  # encoded before the join (a watcher's refused offer): stale
        entry.size += len(text)
        self._bytes += len(text)
        self._appended += len(text)
        entry.mark = self._appended
        self._trim()
        if self.on_append is not None:
            self.on_append(entry, text)
        return True

    def restore(self, entries: list[tuple[int, dict[str, Any]]]) -> None:
        """Load entries read back from disk (their seqs kept), before anything else is added."""
        for seq, data in entries:
            entry = Entry(seq, data, _size(data), sent=True)
            self._entries.append(entry)
            self._bytes += entry.size
            self._appended += entry.size
            entry.mark = self._appended
            self.last_seq = seq
        self._trim()

    def _trim(self) -> None:
        # The newest entry always stays, however large: a replay must be able
        # to deliver what the run produced last.
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_events or self._bytes > self.max_bytes
        ):
            self._bytes -= self._entries.popleft().size
