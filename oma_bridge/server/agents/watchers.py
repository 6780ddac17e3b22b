"""``agent/watch``: a connection follows an agent's journal, caught up from ``afterSeq``.

A :class:`Watcher` keeps a cursor (the last ``seq`` it delivered) and reads
the journal after it, so nothing is skipped or delivered twice however
entries keep arriving, and a slow reader holds no memory of its own: its
sends block, and the connection's send watchdog drops it after
``send_timeout_s`` as it drops any client that stops reading.  A watcher
the journal's retention outruns is dropped the same way; coming back, it
learns the oldest ``seq`` from ``CursorExpired``.

Live, a watcher follows the journal (:meth:`Journal.follow`): a caught-up
watcher sends each new entry from the appending task, and its own task
wakes only to catch up.  Every live watcher of an agent sends the same
``agent/event`` bytes for a new entry, encoded once
(:meth:`Journal.shared_frame`, counted against the journal's byte limit);
an entry caught up on is encoded for its send and not kept, so a replayed
journal holds no more memory than one never read (PROTOCOL §23).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from oma_bridge.errors import WireError
from oma_bridge.rpc import encode_notification
from oma_bridge.server.agents.journal import Entry, Journal
from oma_bridge.server.session import Session
from oma_bridge.waiting import Signal
from oma_bridge.wire.codes import CURSOR_EXPIRED, invalid_params

__all__ = ["Watcher", "check_cursor"]

logger = logging.getLogger("oma_bridge.server")


def _expired(journal: Journal) -> WireError:
    return WireError(
        CURSOR_EXPIRED,
        f"Cursor expired: the oldest retained entry is seq {journal.oldest_seq}",
        {"name": "CursorExpired", "oldestSeq": journal.oldest_seq},
    )


def check_cursor(journal: Journal, after_seq: int) -> None:
    """-32013 for a cursor older than the retained entries, -32602 for one beyond the last."""
    if after_seq > journal.last_seq:
        raise invalid_params(
            [
                {
                    "loc": ["afterSeq"],
                    "msg": f"afterSeq {after_seq} is beyond the latest seq {journal.last_seq}",
                    "type": "value_error",
                }
            ]
        )
    if after_seq < journal.oldest_seq - 1:
        raise _expired(journal)


def _event_frame(agent_id: str, entry: Entry) -> bytes:
    params = {"agentId": agent_id, "seq": entry.seq, "entry": entry.data}
    return encode_notification("agent/event", params)


class Watcher:
    """One connection watching one agent (``agent/watch``); see the module docstring."""

    def __init__(self, session: Session, agent_id: str, journal: Journal, cursor: int) -> None:
        self.session = session
        self.agent_id = agent_id
        self.journal = journal
        self.cursor = cursor
        self.stopped = False
        self._catching_up = False
        self._behind = Signal()
        self._scope = anyio.CancelScope()
        self._on_stop: Callable[[], None] | None = None

    async def catch_up(self) -> None:
        """Send every entry after the cursor, including those appended meanwhile."""
        journal, session = self.journal, self.session
        self._catching_up = True
        try:
            while self.cursor < journal.last_seq and not self.stopped and session.reachable:
                if self.cursor < journal.oldest_seq - 1:
                    raise _expired(journal)
                for entry in journal.after(self.cursor):
                    if self.stopped or not session.reachable:
                        return
                    journal.take(entry)
                    await session.notify_encoded(self._frame(entry))
                    self.cursor = entry.seq
        finally:
            self._catching_up = False

    def appended(self, entry: Entry) -> None:
        """The journal's hand-over (:class:`~.journal.Follower`): sent now, or the pump wakes."""
        if (
            not self._catching_up
            and entry.seq == self.cursor + 1
            and not self.stopped
            and self.session.offer(self._frame(entry))
        ):
            self.journal.take(entry)
            self.cursor = entry.seq
        else:
            self._behind.notify()

    def _frame(self, entry: Entry) -> bytes:
        """The entry's ``agent/event`` notification: the newest one's is shared by every watcher."""
        return self.journal.shared_frame(entry, lambda e: _event_frame(self.agent_id, e))

    async def pump(self) -> None:
        """Follow the journal until :meth:`stop` or the connection ends."""
        journal = self.journal
        journal.follow(self)
        try:
            with self._scope:
                while not self.stopped and self.session.reachable:
                    if self.cursor >= journal.last_seq:
                        await self._behind.wait()
                    else:
                        await self.catch_up()
        except WireError:
            logger.warning("connection %s fell behind a journal; dropping it", self.session.id)
            self.session.drop()
        finally:
            journal.unfollow(self)

    def on_stop(self, release: Callable[[], None]) -> None:
        """Call ``release`` once when the watcher stops (its connection's close callback)."""
        self._on_stop = release

    def stop(self) -> None:
        self.stopped = True
        self._scope.cancel()
        release, self._on_stop = self._on_stop, None
        if release is not None:
            release()
