"""One connection's outgoing frames: those sent in one event-loop tick leave in one write.

A stream relays one ``run/event`` (or ``session/update``, or ``agent/event``)
per event, and each frame written on its own costs a ``send(2)`` and a
wake-up of the client: more than everything else the daemon does for the
event (docs/benchmarks.md, "ACP relay, one message per write").
:class:`FrameWriter` queues the frames sent in one tick and writes them
together at its end; a notification sent while its connection streams
(the last write is under :data:`HOLD_S` old) may wait that long for others,
so a busy stream costs one write per millisecond instead of one per event,
and an idle connection adds no latency.  An answer (or a request) is
written by its own send, with whatever was queued before it: a loaded
daemon's iterations last milliseconds, and a request should not wait for
one more (D23).  Every frame is still one JSON-RPC
message (docs/contract.md §1): only the transport writes are fewer
(docs/internals.md D18).  The one exception is a connection that negotiated
the shim's ``oma-bridge.acp-lines`` (D24, :mod:`oma_bridge.wire.acp_lines`):
there the messages that go out in one write are joined into as few frames
as :data:`~oma_bridge.wire.acp_lines.ACP_LINES_FRAME_MAX` allows, each
message followed by ``\n``, so the shim parses one frame where it parsed
one per message.  Only what waits already is joined: an idle connection's
message still leaves alone at the end of its tick.

Only a :class:`FrameConnection` queues (the daemon's listeners create
them): before websockets writes anything of its own (a close, a pong, a
close reply) the queue goes out, so frames sent before a close always
precede it.  While the socket is backed up (the transport holds unsent
bytes) nothing is queued: :meth:`FrameWriter.send` goes through websockets'
own ``send``, which waits for the buffer to drain, and
:attr:`FrameWriter.blocked_since` tells the connection's send watchdog how
long it has waited.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from websockets.asyncio.server import ServerConnection
from websockets.frames import Frame, Opcode
from websockets.protocol import Event, State

from oma_bridge.rpc.peer import QUICK_FRAME_MAX
from oma_bridge.wire.acp_lines import ACP_LINES_FRAME_MAX, ACP_LINES_SUBPROTOCOL

__all__ = ["HOLD_S", "FrameConnection", "FrameWriter"]

#: How long a notification may wait for others while its connection streams.
HOLD_S = 0.001


class FrameConnection(ServerConnection):
    """A server connection whose :class:`FrameWriter` queue precedes websockets' own writes.

    With :attr:`quick` set, a whole text frame that arrives while no
    earlier frame waits for the reader is first offered to it, in the
    callback that parsed it: a quick read-only request is answered there,
    one loop iteration before the reader would have woken (D25).
    """

    writer: FrameWriter | None = None
    #: Takes a frame's payload if it answered it (``Peer.serve_now``).
    quick: Callable[[bytes], bool] | None = None

    def process_event(self, event: Event) -> None:
        quick = self.quick
        if (
            quick is not None
            and isinstance(event, Frame)
            and event.opcode is Opcode.TEXT
            and event.fin
            and len(event.data) <= QUICK_FRAME_MAX
            and not self.recv_messages.frames
            and self.protocol.state is State.OPEN
            and quick(bytes(event.data))
        ):
            return
        super().process_event(event)

    def send_data(self) -> None:
        if self.writer is not None:
            self.writer.flush()
        super().send_data()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        # websockets' serve() hands the protocol a select_subprotocol closed
        # over this connection (a cycle: connection, protocol, closure); the
        # handshake is long over, and a connection that is gone must not
        # wait for the cyclic collector (PROTOCOL §23).
        vars(self.protocol).pop("select_subprotocol", None)


class FrameWriter:
    """Writes one connection's text frames; see the module docstring."""

    def __init__(self, ws: ServerConnection) -> None:
        self._ws = ws
        self._loop = asyncio.get_running_loop()
        self._queue: list[bytes] = []
        self._queued_bytes = 0
        #: The transport's high-water mark when the queue started: a tick never
        #: queues more than the transport itself would hold before pausing.
        self._limit = 0
        self._flush_soon = False
        self._timer: asyncio.TimerHandle | None = None
        #: ``loop.time()`` of the last write.
        self._written_at = -math.inf
        #: ``time.monotonic()`` when the send in progress began to wait, else ``None``.
        self.blocked_since: float | None = None
        # With no extension negotiated (the daemon's listeners turn compression
        # off) a server's text frame is a header and the payload as it is, built
        # here in a fraction of what the protocol's framing costs.
        self._queues = isinstance(ws, FrameConnection) and not ws.protocol.extensions
        #: Frames of newline-terminated messages (D24): the shim's connection.
        self._lines = ws.subprotocol == ACP_LINES_SUBPROTOCOL
        if isinstance(ws, FrameConnection):
            ws.writer = self

    async def send(self, data: bytes, *, hold: bool = False) -> None:
        """Send ``data`` (UTF-8 JSON) as one text frame, in order with every other.

        ``hold``: it is a notification, which may wait up to :data:`HOLD_S`
        for others while the connection streams (or goes out at the end of
        this tick); anything else goes out now, with whatever was queued
        before it.
        """
        if self._queued(data, hold):
            if not hold:
                # An answer (or a request) goes out now, behind what was queued
                # before it: waiting for the end of the tick costs a loaded
                # daemon one more loop iteration per request (D23).
                self.flush()
            return
        self.flush()
        self.blocked_since = time.monotonic()
        try:
            await self._ws.send(data + b"\n" if self._lines else data, text=True)
        finally:
            self.blocked_since = None

    def offer(self, data: bytes) -> bool:
        """Queue a notification as :meth:`send` would, if that needs no waiting."""
        return self._queued(data, True)

    def answer_now(self, data: bytes) -> bool:
        """Write an answer at once, behind what was queued, as :meth:`send` would, if that
        needs no waiting; ``False`` (nothing written) if it would.

        An answer larger than a tick may queue (a loaded daemon's status
        lists every run and agent: ~100 KB) still goes out here, alone,
        behind the queue: websockets' own send would write it whole too
        before it waited for the buffer to drain.  Only a socket already
        backed up (or a connection closing) makes it wait.
        """
        if self._queued(data, False):
            self.flush()
            return True
        ws = self._ws
        if (
            not self._queues
            or ws.protocol.state is not State.OPEN
            or (not self._queue and ws.transport.get_write_buffer_size())
        ):
            return False
        self.flush()
        self._write([data])
        return True

    def _queued(self, data: bytes, hold: bool) -> bool:
        ws = self._ws
        queue = self._queue
        if queue:
            if self._queued_bytes + len(data) > self._limit:
                return False
        elif (
            self._queues
            and ws.protocol.state is State.OPEN
            and not ws.transport.get_write_buffer_size()
        ):
            self._limit = ws.transport.get_write_buffer_limits()[1]
            if len(data) > self._limit:
                return False
        else:
            return False  # backed up or closing: websockets' own send waits or raises
        queue.append(data)
        self._queued_bytes += len(data)
        if self._flush_soon:
            return True
        loop = self._loop
        if hold and loop.time() - self._written_at < HOLD_S:
            if self._timer is None:
                self._timer = loop.call_at(self._written_at + HOLD_S, self._flush_held)
        else:
            self._flush_soon = True
            loop.call_soon(self._flush_now)
        return True

    def _flush_now(self) -> None:
        self._flush_soon = False
        self.flush()

    def _flush_held(self) -> None:
        self._timer = None
        self.flush()

    def detach(self) -> None:
        """Write what is queued, then leave the connection: it ends, and nothing more is queued.

        The connection holds its writer until then; detached, neither is part
        of a reference cycle once the connection is gone (PROTOCOL §23).
        """
        self.flush()
        if isinstance(self._ws, FrameConnection) and self._ws.writer is self:
            self._ws.writer = None

    def flush(self) -> None:
        """Write what is queued now (a no-op when nothing is).

        The frames were queued while the connection was open, so they may go
        out even if a close has begun since: :class:`FrameConnection` calls
        this before it writes the close frame.  Only a transport already
        closing drops them, as it would any late write.
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        queue = self._queue
        if not queue:
            return
        self._queue = []
        self._queued_bytes = 0
        self._write(queue)

    def _write(self, messages: list[bytes]) -> None:
        transport = self._ws.transport
        if transport.is_closing():
            return
        parts: list[bytes] = []
        if self._lines:
            _join_lines(messages, parts)
        else:
            for data in messages:
                parts += (_text_frame_header(len(data)), data)
        transport.write(b"".join(parts))
        self._written_at = self._loop.time()


def _join_lines(queue: list[bytes], parts: list[bytes]) -> None:
    """Append to ``parts`` the frames of ``queue``'s messages, in order, each followed by ``\n``.

    As few frames as :data:`ACP_LINES_FRAME_MAX` allows; a message is never
    split (one larger than that goes alone).
    """
    start = 0
    size = 0
    for index, data in enumerate(queue):
        length = len(data) + 1
        if size and size + length > ACP_LINES_FRAME_MAX:
            parts += (_text_frame_header(size), b"\n".join(queue[start:index]), b"\n")
            start, size = index, 0
        size += length
    parts += (_text_frame_header(size), b"\n".join(queue[start:]), b"\n")


def _text_frame_header(length: int) -> bytes:
    """An unmasked, final text frame's header for a payload of ``length`` bytes (RFC 6455 §5.2)."""
    if length < 126:
        return bytes((0x81, length))
    if length < 1 << 16:
        return b"\x81\x7e" + length.to_bytes(2, "big")
    return b"\x81\x7f" + length.to_bytes(8, "big")
