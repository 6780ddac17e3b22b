"""The connection's frame writer (``server/frames.py``): fewer writes, the same frames, in order.

A burst of notifications sent without waiting leaves in a few transport
writes; the client must still read one JSON-RPC message per frame, in the
order sent, with the answer after them, whatever the frames' sizes (large
ones bypass the queue), and a close begun right after the burst must follow
it on the wire.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import orjson
import pytest
from websockets.asyncio.client import unix_connect
from websockets.asyncio.server import ServerConnection, unix_serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode, Frame, Opcode
from websockets.typing import Subprotocol

from oma_bridge.server import MethodRegistry, Session
from oma_bridge.server import frames as frames_module
from oma_bridge.server.frames import FrameConnection, FrameWriter, _text_frame_header
from oma_bridge.wire.acp_lines import ACP_LINES_SUBPROTOCOL

from .helpers import initialize, make_config, running_daemon

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 65_535, 65_536, 100_000])
def test_the_frame_header_is_websockets_own(length: int) -> None:
    payload = b"x" * length
    expected = Frame(Opcode.TEXT, payload).serialize(mask=False, extensions=[])
    assert _text_frame_header(length) + payload == expected


def _burst_methods() -> MethodRegistry:
    methods = MethodRegistry()

    async def burst(session: Session, params: Any) -> dict[str, Any]:
        # Small and large notifications mixed: the large ones (over the
        # transport's high-water mark) cannot be queued and go the slow way.
        for k in range(params["count"]):
            text = BIG if k % 500 == 7 else f"n{k}"
            await session.notify("test/n", {"k": k, "text": text})
        return {"sent": params["count"]}

    methods.add("test/burst", burst)
    return methods


BIG = "y" * 70_000


async def test_a_burst_arrives_whole_and_in_order_with_its_answer_last(short_dir: Path) -> None:
    config = make_config(short_dir, tcp=False)
    async with (
        running_daemon(config, _burst_methods()) as running,
        unix_connect(str(running.socket_path), max_size=None) as ws,
    ):
        await initialize(ws)
        for request_id in (1, 2):  # twice: the second burst follows a write just made
            request = {"jsonrpc": "2.0", "id": request_id, "method": "test/burst"}
            await ws.send(orjson.dumps({**request, "params": {"count": 3_000}}).decode())
            seen: list[int] = []
            with anyio.fail_after(20):
                while "id" not in (message := orjson.loads(await ws.recv())):
                    k = message["params"]["k"]
                    assert message["params"]["text"] == (BIG if k % 500 == 7 else f"n{k}")
                    seen.append(k)
            assert message == {"jsonrpc": "2.0", "id": request_id, "result": {"sent": 3_000}}
            assert seen == list(range(3_000))


async def test_frames_held_when_the_close_begins_go_out_before_it(short_dir: Path) -> None:
    """websockets writes the close frame itself: the queue must precede it on the wire."""

    async def handler(ws: ServerConnection) -> None:
        writer = FrameWriter(ws)
        await writer.send(b'{"k":0}', hold=True)
        await anyio.lowlevel.checkpoint()  # that frame is written: the connection streams
        for k in range(1, 200):
            await writer.send(b'{"k":%d}' % k, hold=True)  # held for the next write
        await ws.close()  # the close frame is written before the held frames were due

    path = str(short_dir / "w.sock")
    async with (
        unix_serve(handler, path, create_connection=FrameConnection, compression=None),
        unix_connect(path, compression=None) as ws,
    ):
        seen = []
        with pytest.raises(ConnectionClosed), anyio.fail_after(10):
            while True:
                seen.append(orjson.loads(await ws.recv())["k"])
        assert seen == list(range(200))
        assert ws.close_code == CloseCode.NORMAL_CLOSURE


# ------------------------------------------------ the shim's acp-lines frames (D24)


async def _lines_burst(short_dir: Path, count: int, text_of: Any) -> list[bytes]:
    """The frames a client of ``oma-bridge.acp-lines`` reads for a burst of ``count`` messages.

    The first message goes alone (the connection is idle), then the burst is
    sent without waiting, as the facade hands a turn's updates over; the
    last frame is the answer.
    """

    async def handler(ws: ServerConnection) -> None:
        writer = FrameWriter(ws)
        await writer.send(b'{"k":-1}', hold=True)
        await anyio.lowlevel.checkpoint()  # that frame is written: the connection streams
        for k in range(count):
            await writer.send(orjson.dumps({"k": k, "text": text_of(k)}), hold=True)
        await writer.send(b'{"id":1,"result":{}}')
        await ws.wait_closed()

    path = str(short_dir / "l.sock")
    frames: list[bytes] = []
    async with (
        unix_serve(
            handler,
            path,
            create_connection=FrameConnection,
            compression=None,
            subprotocols=[Subprotocol(ACP_LINES_SUBPROTOCOL)],
        ),
        unix_connect(
            path,
            compression=None,
            max_size=None,
            subprotocols=[Subprotocol(ACP_LINES_SUBPROTOCOL), Subprotocol("acp.v1")],
        ) as ws,
    ):
        assert ws.subprotocol == ACP_LINES_SUBPROTOCOL
        with anyio.fail_after(20):
            while not (frames and frames[-1].endswith(b'{"id":1,"result":{}}\n')):
                frame = await ws.recv(decode=False)
                frames.append(frame)
    return frames


def _messages(frames: list[bytes]) -> list[Any]:
    messages = []
    for frame in frames:
        assert frame.endswith(b"\n"), frame[-80:]
        lines = frame.split(b"\n")
        assert lines.pop() == b""
        messages += [orjson.loads(line) for line in lines]  # whole messages, one a line
    return messages


async def test_acp_lines_join_what_waits_in_order_never_splitting_one(short_dir: Path) -> None:
    def text_of(k: int) -> str:
        return BIG if k % 500 == 7 else f"n{k}\n"  # an escaped newline inside a message

    frames = await _lines_burst(short_dir, 3_000, text_of)
    messages = _messages(frames)
    assert messages[0] == {"k": -1}
    assert messages[1:-1] == [{"k": k, "text": text_of(k)} for k in range(3_000)]
    assert messages[-1] == {"id": 1, "result": {}}
    assert frames[0] == b'{"k":-1}\n'  # an idle connection's message leaves alone
    assert len(frames) < len(messages) / 10  # what waited was joined


async def test_acp_lines_frames_stay_under_the_bound(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frames_module, "ACP_LINES_FRAME_MAX", 200)

    def text_of(k: int) -> str:
        return "z" * 300 if k % 50 == 3 else f"n{k}"  # some larger than the bound alone

    frames = await _lines_burst(short_dir, 1_000, text_of)
    messages = _messages(frames)
    assert messages[1:-1] == [{"k": k, "text": text_of(k)} for k in range(1_000)]
    for frame in frames:
        assert len(frame) <= 200 or frame.count(b"\n") == 1, frame
    assert any(frame.count(b"\n") > 1 for frame in frames)


async def test_an_answer_leaves_when_it_is_sent_with_what_was_queued_before_it(
    short_dir: Path,
) -> None:
    """D23: an answer is written by its own send, not at the end of the tick."""
    queued: list[int] = []

    async def handler(ws: ServerConnection) -> None:
        writer = FrameWriter(ws)
        for k in range(3):
            await writer.send(b'{"k":%d}' % k, hold=True)  # queued for the end of the tick
        queued.append(len(writer._queue))  # noqa: SLF001 — what the writer holds for the tick's end
        await writer.send(b'{"k":3}')  # an answer: out now, behind the three
        queued.append(len(writer._queue))  # noqa: SLF001 — what the writer holds for the tick's end
        await ws.close()

    path = str(short_dir / "a.sock")
    async with (
        unix_serve(handler, path, create_connection=FrameConnection, compression=None),
        unix_connect(path, compression=None) as ws,
    ):
        seen = []
        with pytest.raises(ConnectionClosed), anyio.fail_after(10):
            while True:
                seen.append(orjson.loads(await ws.recv())["k"])
    assert seen == [0, 1, 2, 3]
    # The notifications were queued, and the answer's send wrote them and itself at once.
    assert queued == [3, 0]
