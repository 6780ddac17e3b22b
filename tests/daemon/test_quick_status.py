"""``daemon/status`` from the frame's callback (docs/internals.md D25) says what the reader would.

The first status below is parsed in the same read as ``initialize``, so the
reader serves it (its handler, the slow way); the second arrives alone, and
the frame's callback answers it.  With a live child listed, both answers
must be the same but for the clocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from support.wire import wire_client
from websockets.asyncio.client import unix_connect
from websockets.frames import Frame, Opcode

from .conftest import daemon

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientInfo": {"name": "tests", "version": "0"}},
}


async def _call(ws: Any, request_id: int, params: Any = None) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "daemon/status"}
    if params is not None:
        message["params"] = params
    await ws.send(orjson.dumps(message).decode())
    with anyio.fail_after(5):
        return orjson.loads(await ws.recv())


async def test_status_answers_the_same_from_the_callback_and_from_the_reader(
    short_dir: Path,
) -> None:
    socket_path = short_dir / "bridge.sock"
    with anyio.fail_after(30):
        async with daemon(short_dir), wire_client(socket_path, name="runner") as runner:
            agent_id = (await runner.result("agent/open", {"profile": "sleeper"}))["agentId"]
            await runner.send(
                {
                    "id": "run",
                    "method": "agent/stream",
                    "params": {"agentId": agent_id, "input": "x"},
                }
            )
            await runner.wait_for(lambda w: bool(w.events("run/event")))  # its child is up
            async with unix_connect(str(socket_path)) as ws:
                frames = [
                    orjson.dumps(INIT),
                    orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "daemon/status"}),
                ]
                ws.transport.write(
                    b"".join(
                        Frame(Opcode.TEXT, data).serialize(mask=True, extensions=[])
                        for data in frames
                    )
                )
                answers = [orjson.loads(await ws.recv()) for _ in range(2)]
                assert [a["id"] for a in answers] == ["init", 1]
                by_reader = answers[1]["result"]
                by_callback = (await _call(ws, 2))["result"]
                assert [p["agentId"] for p in by_callback["processes"]] == [agent_id]
                assert by_callback.keys() == by_reader.keys()
                for clock in (by_reader, by_callback):  # the two clocks of the answer
                    clock.pop("uptimeS")
                    clock["runStats"].pop("now")
                assert by_callback == by_reader
                wrong = await _call(ws, 3, {"unexpected": 1})
                assert wrong["id"] == 3
                assert wrong["error"]["code"] == -32602
