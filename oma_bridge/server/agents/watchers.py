"""Readers of an agent's journal: ``agent/watch``.

A :class:`Follower` keeps a cursor (the last ``seq`` it delivered) and reads
the journal after it, so nothing is skipped or delivered twice however
entries keep arriving, and a slow reader holds no memory of its own: its
sends block, and the connection's send watchdog drops it after
``send_timeout_s`` as it drops any client that stops reading.

* :class:`Watcher` is ``agent/watch``: ``agent/event`` notifications, caught
  up from ``afterSeq`` before the answer.  One the journal's retention
  outruns is dropped; coming back, it learns the oldest ``seq`` from
  ``CursorExpired``.
"""

from __future__ import annotations

import logging

import anyio

from oma_bridge.errors import WireError
from oma_bridge.server.agents.journal import Entry, Journal
from oma_bridge.server.session import Session
from oma_bridge.wire.codes import CURSOR_EXPIRED, invalid_params

__all__ = ["Follower", "Watcher", "check_cursor"]

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


class Follower:
    """Delivers a journal's entries after a cursor to one connection; see the module docstring."""

    #: Entries dropped by retention before they were delivered: an error, or skipped.
    skip_gaps = False

    def __init__(self, session: Session, journal: Journal, cursor: int) -> None:
        self.session = session
        self.journal = journal
        self.cursor = cursor
        self.stopped = False
        self._moved = anyio.Event()
        self._awaited = False
        self._scope = anyio.CancelScope()

    async def deliver(self, entry: Entry) -> None:
        raise NotImplementedError

    async def catch_up(self) -> None:
        """Deliver every entry after the cursor, including those appended meanwhile."""
        journal = self.journal
        while self.cursor < journal.last_seq and not self.stopped:
            if self.cursor < journal.oldest_seq - 1:
                if not self.skip_gaps:
                    raise _expired(journal)
                logger.warning(
                    "connection %s fell behind a journal; skipping to seq %d",
                    self.session.id,
                    journal.oldest_seq,
                )
                self.cursor = journal.oldest_seq - 1
            for entry in journal.after(self.cursor):
                if self.stopped:
                    return
                journal.take(entry)
                await self.deliver(entry)
                self.cursor = entry.seq
                if self._awaited:
                    self._awaited = False
                    self._moved.set()
                    self._moved = anyio.Event()

    async def pump(self) -> None:
        """Follow the journal until :meth:`stop` or the connection ends."""
        try:
            with self._scope:
                while not self.stopped and not self.session.closed:
                    await self.journal.wait_beyond(self.cursor)
                    await self.catch_up()
        except WireError:
            logger.warning("connection %s fell behind a journal; dropping it", self.session.id)
            self.session.drop()

    async def delivered(self, seq: int) -> None:
        """Return once every entry up to ``seq`` was delivered (or the reader stopped)."""
        while self.cursor < seq and not self.stopped and not self.session.closed:
            self._awaited = True
            await self._moved.wait()

    def stop(self) -> None:
        self.stopped = True
        self._scope.cancel()
        self._moved.set()


class Watcher(Follower):
    """One connection watching one agent (``agent/watch``)."""

    def __init__(self, session: Session, agent_id: str, journal: Journal, cursor: int) -> None:
        super().__init__(session, journal, cursor)
        self.agent_id = agent_id

    async def deliver(self, entry: Entry) -> None:
        params = {"agentId": self.agent_id, "seq": entry.seq, "entry": entry.data}
        await self.session.notify("agent/event", params)
