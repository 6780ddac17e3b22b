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
from typing import Any, NamedTuple

import orjson

from ..errors import ProviderError
from ..redaction import redact

__all__ = ["SSEDecoder", "SSEEvent", "aiter_sse", "parse_json_data"]

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


class SSEEvent(NamedTuple):
    """One dispatched event: its ``event`` name (``"message"`` by default) and raw data.

    A named tuple: one is made per token, and it is the cheapest immutable record.
    """

    event: str
    data: bytes


class SSEDecoder:
    """Turns chunks of bytes into :class:`SSEEvent` objects, as they complete."""

    __slots__ = ("_buffer", "_data", "_event")

    def __init__(self) -> None:
        self._buffer = b""
        self._event: str | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completed."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer or self._data or self._event is not None:
            return self._feed_lines(buffer)
        # Fast path for what providers send: "\n" line ends, one event per
        # "\n\n"-terminated block.  The unterminated tail waits whole.
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[SSEEvent] = []
        for block in blocks:
            event = self._simple_block(block)
            if event is not None:
                events.append(event)
            elif block:
                events += self._lines([*block.split(b"\n"), b""])
        return events

    def _simple_block(self, block: bytes) -> SSEEvent | None:
        """``data: x`` or ``event: e\ndata: x`` without parsing line by line, else None."""
        name = "message"
        if block.startswith(b"event: "):
            end = block.find(b"\n")
            if end < 0:
                return None
            raw_name, block = block[7:end], block[end + 1 :]
            name = _EVENT_NAMES.get(raw_name) or raw_name.decode("utf-8", "replace")
        if block.startswith(b"data: ") and b"\n" not in block:
            return SSEEvent(name, block[6:])
        return None

    def _feed_lines(self, buffer: bytes) -> list[SSEEvent]:
        lines = buffer.splitlines(keepends=True)
        # An unterminated last line waits for more bytes; so does a trailing
        # "\r", which may be the first half of a "\r\n" split across chunks.
        if lines and (not lines[-1].endswith((b"\n", b"\r")) or lines[-1].endswith(b"\r")):
            self._buffer = lines.pop()
        else:
            self._buffer = b""
        return self._lines(lines)

    def close(self) -> list[SSEEvent]:
        """End of stream: a pending line still counts, a pending event is dropped."""
        rest, self._buffer = self._buffer, b""
        events = self._lines([rest]) if rest else []
        self._event, self._data = None, []
        return events

    def _lines(self, lines: list[bytes]) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        for raw in lines:
            line = raw.rstrip(b"\r\n")
            if not line:
                if self._data:
                    events.append(SSEEvent(self._event or "message", b"\n".join(self._data)))
                self._event, self._data = None, []
                continue
            field, colon, value = line.partition(b":")
            if not field:  # ":" starts a comment
                continue
            if colon and value.startswith(b" "):
                value = value[1:]
            if field == b"data":
                self._data.append(value)
            elif field == b"event":
                self._event = value.decode("utf-8", "replace")
            # "id", "retry" and unknown fields do not concern a one-shot request.
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


def parse_json_data(event: SSEEvent, provider: str) -> Any:
    """Decode an event's JSON data; a malformed line is a :class:`ProviderError`."""
    try:
        return orjson.loads(event.data)
    except orjson.JSONDecodeError:
        snippet = event.data[:_SNIPPET].decode("utf-8", "replace")
        raise ProviderError(
            redact(f"{provider} sent a malformed stream event (data is not JSON): {snippet!r}"),
            provider=provider,
        ) from None
