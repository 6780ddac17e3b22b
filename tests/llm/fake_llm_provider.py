"""A fake LLM provider: a real HTTP/1.1 server on 127.0.0.1 with scripted replies.

It speaks enough of the Anthropic Messages API and of OpenAI Chat
Completions to catch a malformed request: every request is checked against
the provider's documented shapes (:mod:`provider_schemas`), answered with the
provider's own 400 when it is wrong, and recorded, so tests can assert what
went over the wire.  Replies are scripted per request: a model turn (encoded
as the provider's SSE or JSON), an error status, or a fault (a connection
reset mid-stream, a stall, a malformed SSE line).
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import orjson
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from llm_provider_schemas import validate_request

Flavor = Literal["anthropic", "openai"]
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 429: "Too Many Requests"}


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]


@dataclass
class Turn:
    """One scripted model answer."""

    text: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None
    usage: tuple[int, int] = (10, 5)

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tool_calls else "end_turn"


class Conn:
    """The server side of one connection, for responders to write to."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.closed = False

    async def send_head(self, status: int, headers: dict[str, str]) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        await self.stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def send_json(
        self, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        raw = orjson.dumps(body)
        head = {"content-type": "application/json", "content-length": str(len(raw))}
        await self.send_head(status, {**head, **(headers or {})})
        await self.stream.send(raw)

    async def start_sse(self) -> None:
        await self.send_head(
            200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}
        )

    async def send_chunk(self, data: bytes) -> None:
        await self.stream.send(b"%x\r\n%s\r\n" % (len(data), data))

    async def end_chunks(self) -> None:
        await self.stream.send(b"0\r\n\r\n")

    async def reset(self) -> None:
        """Abort with a TCP RST (SO_LINGER 0), as a dropped connection looks."""
        sock: socket.socket = self.stream.extra(SocketAttribute.raw_socket)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await self.stream.aclose()
        self.closed = True


Responder = Callable[[Recorded, Conn], Awaitable[None]]


class FakeProvider:
    """Serves scripted replies in order; records every request."""

    def __init__(self, flavor: Flavor) -> None:
        self.flavor = flavor
        self.port = 0
        self.requests: list[Recorded] = []
        self.violations: list[str] = []
        self._script: deque[Responder] = deque()

    @property
    def base_url(self) -> str:
        root = f"http://127.0.0.1:{self.port}"
        return root if self.flavor == "anthropic" else root + "/v1"

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    # -- scripting -------------------------------------------------------

    def reply(self, *responders: Responder) -> None:
        self._script.extend(responders)

    def turn(self, *turns: Turn) -> None:
        """Answer the next requests with these model turns (SSE or JSON, as asked)."""
        self.reply(*(self._turn_responder(t) for t in turns))

    def _turn_responder(self, turn: Turn) -> Responder:
        async def respond(request: Recorded, conn: Conn) -> None:
            if request.body.get("stream"):
                await sse_reply(encode_sse(self.flavor, turn))(request, conn)
            else:
                await conn.send_json(200, encode_json(self.flavor, turn))

        return respond

    # -- serving ---------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FakeProvider]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self._serve_connection)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    async def _serve_connection(self, stream: SocketStream) -> None:
        conn = Conn(stream)
        reader = BufferedByteReceiveStream(stream)
        try:
            while not conn.closed:
                request = await _read_request(reader)
                if request is None:
                    return
                self.requests.append(request)
                await self._answer(request, conn)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return
        finally:
            if not conn.closed:
                await stream.aclose()

    async def _answer(self, request: Recorded, conn: Conn) -> None:
        problems = validate_request(self.flavor, request)
        if problems:
            self.violations.extend(problems)
            await conn.send_json(400, provider_error(self.flavor, "; ".join(problems)))
            return
        if not self._script:
            self.violations.append("unscripted request")
            await conn.send_json(500, provider_error(self.flavor, "no scripted reply"))
            return
        await self._script.popleft()(request, conn)


async def _read_request(reader: BufferedByteReceiveStream) -> Recorded | None:
    try:
        head = await reader.receive_until(b"\r\n\r\n", 65536)
    except (anyio.IncompleteRead, anyio.EndOfStream):
        return None
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _ = request_line.split(" ", 2)
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    raw = await reader.receive_exactly(int(headers.get("content-length", "0")))
    return Recorded(method, path, headers, orjson.loads(raw) if raw else None)


# -- responders ----------------------------------------------------------


def sse_reply(
    events: list[bytes],
    *,
    after: Literal["end", "reset", "stall"] = "end",
    gap: float = 0.0,
) -> Responder:
    """Stream ``events`` (already framed) one chunk each, then end, reset or stall.

    ``gap`` seconds between chunks make them arrive in separate reads, as
    tokens of a live model do.
    """

    async def respond(request: Recorded, conn: Conn) -> None:
        await conn.start_sse()
        for event in events:
            await conn.send_chunk(event)
            if gap:
                await anyio.sleep(gap)
        if after == "end":
            await conn.end_chunks()
        elif after == "reset":
            await conn.reset()
        else:
            await anyio.sleep_forever()

    return respond


def error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> Responder:
    """Answer with the provider's error body for ``status``."""

    async def respond(request: Recorded, conn: Conn) -> None:
        flavor: Flavor = "anthropic" if request.path.startswith("/v1/messages") else "openai"
        await conn.send_json(status, provider_error(flavor, message), headers)

    return respond


def stall_reply() -> Responder:
    """Accept the request and never answer."""

    async def respond(request: Recorded, conn: Conn) -> None:
        await anyio.sleep_forever()

    return respond


def provider_error(flavor: Flavor, message: str) -> dict[str, Any]:
    if flavor == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


# -- encoders: a Turn in each provider's documented formats ---------------


def sse_event(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, bytes) else orjson.dumps(data)
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + payload + b"\n\n"


def encode_sse(flavor: Flavor, turn: Turn) -> list[bytes]:
    return _anthropic_sse(turn) if flavor == "anthropic" else _openai_sse(turn)


def encode_json(flavor: Flavor, turn: Turn) -> dict[str, Any]:
    return _anthropic_json(turn) if flavor == "anthropic" else _openai_json(turn)


def _split(text: str) -> list[str]:
    """JSON text in two pieces, as input_json_delta / arguments arrive."""
    middle = len(text) // 2
    return [text[:middle], text[middle:]]


def _anthropic_sse(turn: Turn) -> list[bytes]:
    def ev(kind: str, **data: Any) -> bytes:
        return sse_event({"type": kind, **data}, kind)

    inp, out = turn.usage
    events = [
        ev(
            "message_start",
            message={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "m",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": inp, "output_tokens": 1},
            },
        )
    ]
    index = 0
    if turn.thinking is not None:
        events += [
            ev(
                "content_block_start",
                index=index,
                content_block={"type": "thinking", "thinking": "", "signature": ""},
            ),
            ev(
                "content_block_delta",
                index=index,
                delta={"type": "thinking_delta", "thinking": turn.thinking},
            ),
            ev(
                "content_block_delta",
                index=index,
                delta={"type": "signature_delta", "signature": "sig-1"},
            ),
            ev("content_block_stop", index=index),
        ]
        index += 1
    if turn.text:
        events.append(
            ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
        )
        events.append(ev("ping"))
        for piece in turn.text:
            events.append(
                ev(
                    "content_block_delta",
                    index=index,
                    delta={"type": "text_delta", "text": piece},
                )
            )
        events.append(ev("content_block_stop", index=index))
        index += 1
    for call in turn.tool_calls:
        events.append(
            ev(
                "content_block_start",
                index=index,
                content_block={"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
            )
        )
        for piece in _split(orjson.dumps(call.input).decode()):
            events.append(
                ev(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
            )
        events.append(ev("content_block_stop", index=index))
        index += 1
    events.append(
        ev(
            "message_delta",
            delta={"stop_reason": turn.stop_reason, "stop_sequence": None},
            usage={"output_tokens": out},
        )
    )
    events.append(ev("message_stop"))
    return events


def _anthropic_json(turn: Turn) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.thinking is not None:
        content.append({"type": "thinking", "thinking": turn.thinking, "signature": "sig-1"})
    if turn.text:
        content.append({"type": "text", "text": "".join(turn.text)})
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in turn.tool_calls
    ]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": content,
        "stop_reason": turn.stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": turn.usage[0], "output_tokens": turn.usage[1]},
    }


def _openai_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return sse_event(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def _openai_sse(turn: Turn) -> list[bytes]:
    events = [_openai_chunk({"role": "assistant", "content": ""})]
    if turn.thinking is not None:
        events.append(_openai_chunk({"reasoning_content": turn.thinking}))
    events += [_openai_chunk({"content": piece}) for piece in turn.text]
    for i, call in enumerate(turn.tool_calls):
        head = {"index": i, "id": call.id, "type": "function"}
        events.append(
            _openai_chunk(
                {"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]}
            )
        )
        for piece in _split(orjson.dumps(call.input).decode()):
            events.append(
                _openai_chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            )
    events.append(_openai_chunk({}, "tool_calls" if turn.tool_calls else "stop"))
    usage = {
        "prompt_tokens": turn.usage[0],
        "completion_tokens": turn.usage[1],
        "total_tokens": sum(turn.usage),
    }
    events.append(
        sse_event(
            {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
        )
    )
    events.append(b"data: [DONE]\n\n")
    return events


def _openai_json(turn: Turn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(turn.text) or None}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": orjson.dumps(c.input).decode()},
            }
            for c in turn.tool_calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if turn.tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": turn.usage[0], "completion_tokens": turn.usage[1]},
    }
