"""Server-sent events: one incremental parser for every provider's token stream.

Follows the WHATWG event-stream rules that matter to LLM providers: lines end
in ``\\n``, ``\\r\\n`` or ``\\r``; a blank line dispatches the event; ``data``
lines accumulate (joined by ``\\n``); ``:`` starts a comment (keep-alive
pings); unknown fields are ignored; an event left unterminated at end of
stream is dropped.

The parser works on raw bytes and keeps ``data`` as bytes because every
provider sends JSON there and :func:`orjson.loads` takes bytes directly: no
decode-then-reencode on the hot path of a 20,000-token stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from oma_bridge.errors import ProviderError
from oma_bridge.redaction import redact

__all__ = ["SSEDecoder", "SSEEvent", "aiter_sse", "malformed_event"]

#: How much of a bad data line a ProviderError quotes.
_SNIPPET = 200
#: Event names seen on every token, decoded once.
_EVENT_NAMES = {
    name.encode(): name
    for name in (
        "content_block_delta",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_start",
        "message_stop",
        "ping",
        "error",
    )
}


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event: its ``event`` name (``"message"`` by default) and raw data.

    Read-only by convention: one is made per token, and a frozen dataclass
    costs twice as much to build.
    """

    event: str
    data: bytes


def _normalise(buffer: bytes) -> bytes:
    """``\r\n`` and lone ``\r`` line ends as ``\n`` (providers send ``\n``; this is rare)."""
    return buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


class SSEDecoder:
    """Turns chunks of bytes into :class:`SSEEvent` objects, as they complete."""

    __slots__ = ("_buffer", "_data", "_event", "_more")

    def __init__(self) -> None:
        self._buffer = b""
        self._event: str | None = None
        #: The pending event's first data line, and all of them once there are two.
        self._data: bytes | None = None
        self._more: list[bytes] | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completed."""
        buffer = self._buffer + chunk if self._buffer else chunk
        held = b""
        if b"\r" in buffer:
            # A trailing "\r" may be the first half of a "\r\n" split across chunks.
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = _normalise(buffer)
        lines = buffer.split(b"\n")
        self._buffer = lines.pop() + held  # the unterminated last line waits
        return self._lines(lines)

    def close(self) -> list[SSEEvent]:
        """End of stream: a held ``\r`` still ends its line; a pending event is dropped."""
        rest, self._buffer = self._buffer, b""
        events = self._lines(_normalise(rest).split(b"\n")[:-1]) if rest else []
        self._event, self._data, self._more = None, None, None
        return events

    def _lines(self, lines: list[bytes]) -> list[SSEEvent]:
        # One tight loop, run three times per token of a long answer: slices
        # compare faster than method calls, and a one-line data field (all a
        # provider sends) is kept as is, with no list to build and join.
        events: list[SSEEvent] = []
        name, data, more = self._event, self._data, self._more
        for line in lines:
            if not line:
                if data is not None:
                    if more is not None:
                        data, more = b"\n".join(more), None
                    events.append(SSEEvent(name or "message", data))
                    data = None
                name = None
            elif line[:5] == b"data:" or line == b"data":
                value = line[6:] if line[5:6] == b" " else line[5:]
                if data is None:
                    data = value
                elif more is None:
                    more = [data, value]
                else:
                    more.append(value)
            elif line[:6] == b"event:" or line == b"event":
                raw = line[7:] if line[6:7] == b" " else line[6:]
                name = _EVENT_NAMES.get(raw) or raw.decode("utf-8", "replace")
            # ":" comments (keep-alive pings), "id", "retry" and unknown fields:
            # nothing a one-shot request needs.
        self._event, self._data, self._more = name, data, more
        return events


async def aiter_sse(chunks: AsyncIterable[bytes]) -> AsyncIterator[list[SSEEvent]]:
    """Parse an async stream of byte chunks into events, one list per chunk read.

    Lists rather than single events: the consumer loops over a list
    synchronously, which saves one async-generator hop per token (the hop
    costs as much as parsing the event).  Nothing waits: a list holds just
    what one network read completed.
    """
    decoder = SSEDecoder()
    async for chunk in chunks:
        events = decoder.feed(chunk)
        if events:
            yield events
    events = decoder.close()
    if events:
        yield events


def malformed_event(event: SSEEvent, provider: str) -> ProviderError:
    """The error for an event whose data is not JSON, quoting its start.

    The adapters' token loops call ``orjson.loads`` inline (a call less per
    token) and raise this when it fails.
    """
    snippet = event.data[:_SNIPPET].decode("utf-8", "replace")
    return ProviderError(
        redact(f"{provider} sent a malformed stream event (data is not JSON): {snippet!r}"),
        provider=provider,
    )
