"""A raw JSON-RPC client of the daemon on one real websocket, for the session tests.

:func:`wire_client` connects to a unix socket, sends ``initialize`` (with the
capabilities asked for) and reads every frame in a task of its own: answers
go to the request that waits for them, notifications and the daemon's own
requests (``permission/request``, ``$/cancel_request``) are kept in order in
:attr:`Wire.notes` and :attr:`Wire.asks`.  Nothing here is the library's
client, so a test sees the frames exactly as the daemon sent them.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import orjson
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import ConnectionClosed

__all__ = ["Wire", "wire_client"]


@dataclass
class Wire:
    ws: ClientConnection
    notes: list[dict[str, Any]] = field(default_factory=list)
    asks: list[dict[str, Any]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _waiting: dict[Any, list[Any]] = field(default_factory=dict)
    _changed: anyio.Event = field(default_factory=anyio.Event)
    closed: bool = False
    #: ``(frames, seconds)``: sleep that long after every that many frames (a slow reader).
    pace: tuple[int, float] | None = None
    #: Awaited before each frame is read: a reader held back by the test (back-pressure).
    gate: Callable[[], Awaitable[None]] | None = None

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps({"jsonrpc": "2.0", **message}).decode())

    async def call(self, method: str, params: Any = None, *, within: float = 10) -> Any:
        """The whole answer (``{"result"}`` or ``{"error"}``) of one request."""
        ident = next(self._ids)
        slot: list[Any] = []
        self._waiting[ident] = slot
        message: dict[str, Any] = {"id": ident, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        with anyio.fail_after(within):
            while not slot:
                if self.closed:
                    raise ConnectionError(f"the connection closed before {method} was answered")
                await self._wait()
        return slot[0]

    async def result(self, method: str, params: Any = None, *, within: float = 10) -> Any:
        answer = await self.call(method, params, within=within)
        assert "result" in answer, (method, params, answer)
        return answer["result"]

    async def error(self, method: str, params: Any = None) -> dict[str, Any]:
        answer = await self.call(method, params)
        assert "error" in answer, (method, params, answer)
        return dict(answer["error"])

    async def answer(self, request: dict[str, Any], result: Any) -> None:
        await self.send({"id": request["id"], "result": result})

    async def wait_for(self, predicate: Any, *, within: float = 10) -> None:
        """Until ``predicate(self)`` holds (re-checked at every frame)."""
        with anyio.fail_after(within):
            while not predicate(self):
                if self.closed:
                    raise ConnectionError("the connection closed")
                await self._wait()

    def events(self, method: str) -> list[dict[str, Any]]:
        """The params of every notification ``method`` received so far."""
        return [note["params"] for note in self.notes if note["method"] == method]

    def abort(self) -> None:
        """Drop the connection as a crashed client does (no close handshake)."""
        self.ws.transport.abort()

    async def _wait(self) -> None:
        await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def read(self) -> None:
        try:
            count = 0
            async for frame in self.ws:
                count += 1
                if self.pace is not None and count % self.pace[0] == 0:
                    await anyio.sleep(self.pace[1])
                if self.gate is not None:
                    await self.gate()
                message = orjson.loads(frame)
                if "method" not in message:
                    slot = self._waiting.pop(message.get("id"), None)
                    if slot is not None:
                        # How many notifications came before it (what a catch-up sent first).
                        message["notesBefore"] = len(self.notes)
                        slot.append(message)
                elif "id" in message:
                    self.asks.append(message)
                else:
                    self.notes.append(message)
                self._wake()
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            self._wake()


@contextlib.asynccontextmanager
async def wire_client(
    path: Any,
    *,
    name: str = "tests",
    permissions: bool = False,
    pace: tuple[int, float] | None = None,
    gate: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[Wire]:
    """One initialized raw connection to the daemon's unix socket."""
    async with (
        await unix_connect(str(path), "ws://localhost/", max_size=None, compression=None) as ws,
        anyio.create_task_group() as tg,
    ):
        wire = Wire(ws, pace=pace, gate=gate)
        tg.start_soon(wire.read)
        capabilities = {"permissions": True} if permissions else {}
        params = {
            "protocolVersion": 1,
            "clientInfo": {"name": name, "version": "1.0"},
            "capabilities": capabilities,
        }
        await wire.result("initialize", params)
        try:
            yield wire
        finally:
            tg.cancel_scope.cancel()
