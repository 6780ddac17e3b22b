"""The shim's ``oma-bridge.acp-lines`` (D24): several messages to a frame, for the shim alone.

A real daemon runs the TypeScript SDK's chunk agent (one message per write);
a turn of :data:`BURST` chunks is a burst the daemon relays while its writes
are in flight.  A client that offers ``acp.v1`` alone still reads one
message per frame; the shim's stdout carries, line for line and byte for
byte, the messages an ``acp.v1`` client attached to the same session reads
as frames; and a shim facing a daemon that selects ``acp.v1`` (one that does
not know the extension) still writes one line per frame.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import orjson
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from websockets.asyncio.client import unix_connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.typing import Subprotocol

from oma_bridge.shim import _Pending
from oma_bridge.wire.acp_lines import ACP_LINES_SUBPROTOCOL

from .harness import OMA_BRIDGE, Facade, RawClient, text

pytestmark = pytest.mark.anyio

BURST = 5_000
TEXTS = [f"{i}\n" for i in range(BURST)]  # what the chunk agent sends for `chunks BURST`
UPDATE_PREFIX = b'{"jsonrpc":"2.0","method":"session/update"'


def chunk_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [
        m["params"]["update"]["content"]["text"]
        for m in messages
        if m.get("method") == "session/update"
        and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]


async def frames_until_answer(client: RawClient, request_id: int) -> list[bytes]:
    """The raw frames ``client`` reads up to the one that holds the answer to ``request_id``."""
    frames: list[bytes] = []
    with anyio.fail_after(90):
        while True:
            frame = await client.ws.recv(decode=False)
            assert isinstance(frame, bytes)
            frames.append(frame)
            for line in frame.splitlines():
                message = orjson.loads(line)
                if message.get("id") == request_id and "method" not in message:
                    return frames


async def test_an_acp_v1_client_gets_one_message_per_frame_under_a_burst(facade: Facade) -> None:
    facade.require("chunks")
    client = await facade.raw("chunks")
    try:
        assert client.ws.subprotocol == "acp.v1"
        await client.initialize()
        session_id = await client.new(facade.work)
        request_id = await client.start_prompt(session_id, text(f"chunks {BURST}"))
        frames = await frames_until_answer(client, request_id)
    finally:
        await client.close()
    # orjson refuses a frame of two messages ("trailing characters"), and none
    # carries the newline of the shim's framing.
    messages = [orjson.loads(frame) for frame in frames]
    assert not any(frame.endswith(b"\n") for frame in frames)
    assert chunk_texts(messages) == TEXTS
    assert messages[-1]["result"] == {"stopReason": "end_turn"}


async def test_an_acp_lines_client_gets_the_burst_joined_in_order(facade: Facade) -> None:
    facade.require("chunks")
    ws = await unix_connect(
        str(facade.discovery()["socket"]),
        "ws://localhost/acp/chunks",
        subprotocols=[Subprotocol(ACP_LINES_SUBPROTOCOL), Subprotocol("acp.v1")],
        max_size=None,
    )
    client = RawClient(ws)
    try:
        assert ws.subprotocol == ACP_LINES_SUBPROTOCOL
        # Requests still go one message per frame, without a newline.
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}},
        }
        await client.send(initialize)
        [answer] = await frames_until_answer(client, 1)  # an idle connection: alone
        assert answer.endswith(b"}\n") and answer.count(b"\n") == 1
        new = {"cwd": str(facade.work), "mcpServers": []}
        await client.send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": new})
        [created] = await frames_until_answer(client, 2)
        session_id = json.loads(created)["result"]["sessionId"]
        params = {"sessionId": session_id, "prompt": [text(f"chunks {BURST}")]}
        await client.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": params})
        frames = await frames_until_answer(client, 3)
    finally:
        await client.close()
    messages = []
    for frame in frames:
        assert frame.endswith(b"\n")
        messages += [orjson.loads(line) for line in frame[:-1].split(b"\n")]
    assert chunk_texts(messages) == TEXTS
    assert messages[-1] == {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}
    # The daemon's writes were in flight during the burst: what waited was joined.
    assert len(frames) < len(messages)


async def test_the_shims_stdout_is_the_burst_line_for_line(facade: Facade) -> None:
    """Through the shim (acp-lines): the bytes an ``acp.v1`` client of the session reads."""
    facade.require("chunks")
    watcher = await facade.raw("chunks")
    shim = await anyio.open_process(facade.shim("chunks"), env=facade.env)
    assert shim.stdin is not None and shim.stdout is not None
    stdout = BufferedByteReceiveStream(shim.stdout)

    async def write(message: dict[str, Any]) -> None:
        assert shim.stdin is not None
        await shim.stdin.send(json.dumps(message).encode() + b"\n")

    async def read_until_answer(request_id: int) -> list[bytes]:
        lines = []
        while True:
            line = await stdout.receive_until(b"\n", 1 << 24)
            lines.append(line)
            message = orjson.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return lines

    try:
        with anyio.fail_after(90):
            await watcher.initialize()
            session_id = await watcher.new(facade.work)
            await write(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"protocolVersion": 1, "clientCapabilities": {}},
                }
            )
            await read_until_answer(0)
            resume = {"sessionId": session_id, "cwd": str(facade.work)}
            await write({"jsonrpc": "2.0", "id": 1, "method": "session/resume", "params": resume})
            await read_until_answer(1)
            params = {"sessionId": session_id, "prompt": [text(f"chunks {BURST}")]}
            await write({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params})
            lines = await read_until_answer(2)
            watched: list[bytes] = []
            while len(watched) < BURST:
                frame = await watcher.ws.recv(decode=False)
                assert isinstance(frame, bytes)
                watched.append(frame)
        await shim.stdin.aclose()
        with anyio.fail_after(15):
            assert await shim.wait() == 0
    finally:
        await watcher.close()
        if shim.returncode is None:
            shim.kill()
            await shim.wait()
    updates = [line for line in lines if line.startswith(UPDATE_PREFIX)]
    assert updates == watched  # byte for byte, in order
    assert chunk_texts([orjson.loads(line) for line in updates]) == TEXTS
    assert orjson.loads(lines[-1])["result"] == {"stopReason": "end_turn"}
    assert len(lines) == BURST + 1


async def test_the_shim_writes_one_line_per_frame_when_acp_v1_is_selected() -> None:
    """A daemon that does not know acp-lines selects ``acp.v1``: each frame is one message."""
    offered: list[list[str]] = []

    def choose(connection: ServerConnection, protocols: Any) -> Subprotocol | None:
        offered.append(list(protocols))
        return Subprotocol("acp.v1")

    async def handler(ws: ServerConnection) -> None:
        async for frame in ws:
            request = json.loads(frame)
            for k in range(3):
                note = {"jsonrpc": "2.0", "method": "session/update", "params": {"k": k}}
                await ws.send(json.dumps(note))
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {}}))

    async with serve(handler, "127.0.0.1", 0, select_subprotocol=choose) as server:
        port = server.sockets[0].getsockname()[1]
        argv = [OMA_BRIDGE, "acp", "--url", f"ws://127.0.0.1:{port}", "any"]
        request = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}}
        with anyio.fail_after(30):
            result = await anyio.run_process(argv, input=json.dumps(request).encode() + b"\n")
    assert offered == [[ACP_LINES_SUBPROTOCOL, "acp.v1"]]
    lines = result.stdout.decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        *({"jsonrpc": "2.0", "method": "session/update", "params": {"k": k}} for k in range(3)),
        {"jsonrpc": "2.0", "id": 7, "result": {}},
    ]


def test_the_shim_sees_an_answer_joined_among_updates() -> None:
    """The end of stdin waits for answers: one joined after updates (D24) must count."""
    pending = _Pending()
    pending.sent(b'{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{}}')
    note = b'{"jsonrpc":"2.0","method":"session/update","params":{"id":2}}\n'
    ask = b'{"jsonrpc":"2.0","id":2,"method":"session/request_permission","params":{}}\n'
    pending.received_lines(note * 3)
    pending.received_lines(note + ask + note)  # the daemon's request of the same id: no answer
    assert pending.ids and not pending.none_left.is_set()
    pending.received_lines(note * 3 + b'{"jsonrpc":"2.0","id":2,"result":{}}\n' + note)
    assert not pending.ids and pending.none_left.is_set()
