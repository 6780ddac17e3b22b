"""One connection's outgoing frames: those sent in one event-loop tick leave in one write.

A stream relays one ``run/event`` (or ``session/update``, or ``agent/event``)
per event, and each frame written on its own costs a ``send(2)`` and a
wake-up of the client: more than everything else the daemon does for the
event (docs/benchmarks.md, "ACP relay, one message per write").  When an
agent's output arrives faster than it is relayed, the reader handles
several events in one tick; :class:`FrameWriter` keeps their frames until
the tick ends and writes them together.  Nothing waits beyond the tick it
was sent in, so a client that keeps up sees no added latency, and every
frame is still one JSON-RPC message (docs/contract.md §1): only the
transport writes are fewer.

Frames are built by the websockets protocol when they are written, not when
they are queued, so a close (ours or the client's) that comes first is
never followed by data.  While the socket is backed up (the transport holds
unsent bytes) nothing is queued: :meth:`FrameWriter.send` goes through
``websockets``' own ``send``, which waits for the buffer to drain, and
:attr:`FrameWriter.blocked_since` tells the connection's send watchdog how
long it has waited.
"""

from __future__ import annotations

import asyncio
import time

from websockets.asyncio.connection import Connection
from websockets.protocol import State

__all__ = ["FrameWriter"]


class FrameWriter:
    """Writes one connection's text frames; see the module docstring."""

    def __init__(self, ws: Connection) -> None:
        self._ws = ws
        self._queue: list[bytes] = []
        self._queued_bytes = 0
        #: The transport's high-water mark when the queue started: a tick never
        #: queues more than the transport itself would hold before pausing.
        self._limit = 0
        #: ``time.monotonic()`` when the send in progress began to wait, else ``None``.
        self.blocked_since: float | None = None

    async def send(self, data: bytes) -> None:
        """Send ``data`` (UTF-8 JSON) as one text frame, in order with every other."""
        ws = self._ws
        queue = self._queue
        if queue:
            if self._queued_bytes + len(data) <= self._limit:
                queue.append(data)
                self._queued_bytes += len(data)
                return
        elif ws.protocol.state is State.OPEN and not ws.transport.get_write_buffer_size():
            self._limit = ws.transport.get_write_buffer_limits()[1]
            if len(data) <= self._limit:
                asyncio.get_running_loop().call_soon(self.flush)
                queue.append(data)
                self._queued_bytes = len(data)
                return
        self.flush()
        self.blocked_since = time.monotonic()
        try:
            await ws.send(data, text=True)
        finally:
            self.blocked_since = None

    def flush(self) -> None:
        """Write what is queued now (a no-op when nothing is).

        Frames queued while the connection closed are dropped, as a send that
        raced the close would be.
        """
        queue = self._queue
        if not queue:
            return
        self._queue = []
        self._queued_bytes = 0
        protocol = self._ws.protocol
        if protocol.state is not State.OPEN:
            return
        for data in queue:
            protocol.send_text(data)
        out = protocol.data_to_send()
        self._ws.transport.write(out[0] if len(out) == 1 else b"".join(out))
