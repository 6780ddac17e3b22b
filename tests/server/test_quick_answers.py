"""Quick read-only answers from the frame's callback (docs/internals.md D25).

A method registered with ``now=`` is answered in the callback that parsed
its frame, while the connection's reader is still busy or asleep, whenever
no earlier frame waits for the reader and the quick handler needs no wait.
Everything else (before ``initialize``, a frame behind others, ``NOT_NOW``,
an error, a duplicate id) is served by the method's handler exactly as
before, so the lane changes when an answer leaves, never what it says.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.frames import Frame, Opcode

from oma_bridge.errors import WireError
from oma_bridge.rpc.peer import NOT_NOW
from oma_bridge.server import MethodRegistry, Session
from oma_bridge.server.frames import FrameWriter

from .helpers import INIT_PARAMS, call, initialize, make_config, running_daemon

pytestmark = pytest.mark.anyio


class Quick:
    """A registry with ``test/quick`` (both ways of answering), and ``test/block`` (inline)."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.blocking = anyio.Event()
        self.served_by: list[str] = []
        self.methods = MethodRegistry()

        async def quick(session: Session, params: Any) -> dict[str, Any]:
            self.served_by.append("handler")
            if params and params.get("fail"):
                raise WireError(-32099, "refused by the handler")
            return {"by": "handler"}

        def quick_now(session: Session, params: Any) -> Any:
            if params and params.get("fail"):
                raise WireError(-32099, "refused at once")
            if params and params.get("wait"):
                return NOT_NOW
            self.served_by.append("now")
            if params and params.get("big"):
                return {"by": "now", "pad": "x" * BIG}
            return {"by": "now"}

        async def block(session: Session, params: Any) -> dict[str, Any]:
            self.blocking.set()
            await self.release.wait()
            return {"blocked": True}

        self.methods.add("test/quick", quick, inline=True, now=quick_now)
        self.methods.add("test/block", block, inline=True)

    async def occupy(self, ws: ClientConnection, request_id: Any) -> None:
        """Send ``test/block`` and return once the connection's reader waits inside it."""
        await ws.send(_request(request_id, "test/block").decode())
        with anyio.fail_after(5):
            await self.blocking.wait()


#: Larger than a transport's high-water mark (64 KiB): more than a tick may queue.
BIG = 200_000


def _request(request_id: Any, method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return orjson.dumps(message)


async def _answers(ws: ClientConnection, count: int) -> list[dict[str, Any]]:
    with anyio.fail_after(5):
        return [orjson.loads(await ws.recv()) for _ in range(count)]


@contextlib.asynccontextmanager
async def _connected(
    short_dir: Path, *, initialized: bool = True
) -> AsyncIterator[tuple[Quick, ClientConnection]]:
    """A daemon serving :class:`Quick`'s methods and one client on its unix socket."""
    registry = Quick()
    async with (
        running_daemon(make_config(short_dir, tcp=False), registry.methods) as running,
        unix_connect(str(running.socket_path), max_size=None) as ws,
    ):
        if initialized:
            await initialize(ws)
        yield registry, ws


async def test_a_quick_request_is_answered_while_the_reader_is_busy(short_dir: Path) -> None:
    async with _connected(short_dir) as (registry, ws):
        await registry.occupy(ws, 1)
        await ws.send(_request(2, "test/quick").decode())
        (first,) = await _answers(ws, 1)
        assert first == {"jsonrpc": "2.0", "id": 2, "result": {"by": "now"}}
        registry.release.set()
        assert await _answers(ws, 1) == [{"jsonrpc": "2.0", "id": 1, "result": {"blocked": True}}]
        assert registry.served_by == ["now"]


async def test_a_quick_answer_larger_than_a_tick_may_queue_still_leaves_at_once(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whether the writer took the answer in the frame's callback: refused, it
    # would still arrive first (sent by a task), only an iteration later.
    taken: list[bool] = []
    answer_now = FrameWriter.answer_now

    def spy(self: FrameWriter, data: bytes) -> bool:
        taken.append(answer_now(self, data))
        return taken[-1]

    monkeypatch.setattr(FrameWriter, "answer_now", spy)
    async with _connected(short_dir) as (registry, ws):
        await registry.occupy(ws, 1)
        await ws.send(_request(2, "test/quick", {"big": True}).decode())
        (first,) = await _answers(ws, 1)
        assert first == {"jsonrpc": "2.0", "id": 2, "result": {"by": "now", "pad": "x" * BIG}}
        assert taken == [True]
        registry.release.set()
        assert await _answers(ws, 1) == [{"jsonrpc": "2.0", "id": 1, "result": {"blocked": True}}]


async def test_what_the_lane_cannot_answer_the_handler_does(short_dir: Path) -> None:
    async with _connected(short_dir, initialized=False) as (registry, ws):
        before = await call(ws, "test/quick", request_id=0)
        assert before["error"]["code"] == -32002  # not initialized: the reader's gate
        await initialize(ws)
        waited = await call(ws, "test/quick", {"wait": True}, request_id=1)
        assert waited == {"jsonrpc": "2.0", "id": 1, "result": {"by": "handler"}}
        failed = await call(ws, "test/quick", {"fail": True}, request_id=2)
        assert failed["id"] == 2
        assert failed["error"]["code"] == -32099
        assert failed["error"]["message"] == "refused by the handler"
        broken = await call(ws, "test/quick", "not params", request_id=3)
        assert broken["error"]["code"] == -32600  # params must be an object: the reader's answer
        assert registry.served_by == ["handler", "handler"]


async def test_a_duplicate_id_is_left_to_the_reader(short_dir: Path) -> None:
    async with _connected(short_dir) as (registry, ws):
        await registry.occupy(ws, 7)
        await ws.send(_request(7, "test/quick").decode())  # id 7 is still pending
        with anyio.move_on_after(0.3):
            early = await ws.recv()
            pytest.fail(f"answered while id 7 was pending: {early!r}")
        registry.release.set()
        blocked, quick = await _answers(ws, 2)
        assert blocked == {"jsonrpc": "2.0", "id": 7, "result": {"blocked": True}}
        # The reader took it after test/block's answer, as it would have without the lane.
        assert quick == {"jsonrpc": "2.0", "id": 7, "result": {"by": "handler"}}


async def test_a_quick_request_behind_initialize_in_one_write_waits_for_it(
    short_dir: Path,
) -> None:
    async with _connected(short_dir, initialized=False) as (registry, ws):
        frames = [
            orjson.dumps(
                {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": INIT_PARAMS}
            ),
            _request(1, "test/quick"),
        ]
        # One transport write: both frames reach the daemon in one read, so the
        # quick one is parsed while initialize still waits for the reader.
        ws.transport.write(
            b"".join(
                Frame(Opcode.TEXT, data).serialize(mask=True, extensions=[]) for data in frames
            )
        )
        init, quick = await _answers(ws, 2)
        assert init["id"] == "init" and "result" in init
        assert quick == {"jsonrpc": "2.0", "id": 1, "result": {"by": "handler"}}
        assert registry.served_by == ["handler"]
