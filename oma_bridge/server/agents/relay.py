"""An ``agent/stream``'s ``run/event`` frames to its caller, joined under back-pressure.

Adaptive, as the performance issue asks: an entry goes out at once when the
caller's connection takes the frame without waiting (an idle writer: no
latency added, D18 writes the tick's frames together).  While a frame of
the connection is in flight (its socket backed up), the next entry stays
*pending*: text events of the run that come meanwhile are joined into it
in the journal (PROTOCOL §13.1, :meth:`Journal.join_text`), so a busy
socket carries fewer, larger frames and every reader (the caller, each
watcher, the ACP facade, a resume by ``seq``) sees the same entries.  The
sender task sends a pending entry once the one before it has gone; taking
it closes it to joining (``Journal.take``).

At most one entry is in flight and one pending: an event that cannot be
joined (another type, a full entry) waits until the pending one is taken,
so the caller's socket still paces the run and order is kept.
"""

from __future__ import annotations

from typing import Any

from oma_bridge.rpc import encode_notification
from oma_bridge.server.agents.journal import Entry, Journal
from oma_bridge.server.session import Session
from oma_bridge.waiting import Signal

__all__ = ["CallerRelay"]


class CallerRelay:
    """One stream's frames to the connection that started it; see the module docstring."""

    def __init__(self, session: Session, journal: Journal, run_id: str, *, joins: bool) -> None:
        """``joins``: ``[server] join_text``; off, every entry waits its turn unjoined."""
        self._session = session
        self._joins = joins
        self._journal = journal
        self._run_id = run_id
        #: Journaled, not yet taken by the sender: later text may join it.
        self._pending: Entry | None = None
        #: The pending entry's event as ``run/event`` carries it (for a joined
        #: text entry, the very dict the journal grows).
        self._pending_event: dict[str, Any] = {}
        #: The sender is sending an entry (a frame of ours is in flight).
        self._busy = False
        self._closing = False
        #: The sender has ended (closed, or cancelled with the run's task group).
        self._ended = False
        self._to_send = Signal()
        self._taken = Signal()

    def join(self, text: str) -> bool:
        """Join a text event into the pending entry, if there is one and §13.1 allows."""
        pending = self._pending
        return (
            self._joins
            and pending is not None
            and self._journal.join_text(pending, self._run_id, text)
        )

    async def send(self, entry: Entry, event: dict[str, Any]) -> None:
        """Send ``entry``, just journaled, as ``run/event`` of ``event``, after every one before."""
        while self._pending is not None and not self._ended:
            await self._taken.wait()
        if not self._busy:
            frame = self._frame(entry, event)
            if self._session.offer(frame):
                self._journal.take(entry)
                return
        if self._ended:
            # No sender (the run's task group is being torn down): send it the plain way.
            self._journal.take(entry)
            await self._session.notify_encoded(self._frame(entry, event))
            return
        self._pending, self._pending_event = entry, event
        self._to_send.notify()

    async def run(self) -> None:
        """The sender: each pending entry, once the one before it has gone, until closed."""
        try:
            while True:
                entry = self._pending
                if entry is None:
                    if self._closing:
                        return
                    await self._to_send.wait()
                    continue
                self._busy = True
                self._pending = None
                self._journal.take(entry)  # its text is fixed from here on
                frame = self._frame(entry, self._pending_event)
                self._taken.notify()
                try:
                    await self._session.notify_encoded(frame)
                finally:
                    self._busy = False
        finally:
            self._ended = True
            self._taken.notify()

    def close(self) -> None:
        """No more entries: the sender sends what is pending and ends."""
        self._closing = True
        self._to_send.notify()

    def _frame(self, entry: Entry, event: dict[str, Any]) -> bytes:
        params = {"runId": self._run_id, "event": event, "seq": entry.seq}
        return encode_notification("run/event", params)
