"""Frames and the JSON-RPC lifecycle of PROTOCOL §1, §3 and §7, over real sockets."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from websockets.asyncio.client import connect, unix_connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from oma_bridge.errors import WireError
from oma_bridge.server import MethodRegistry, Session, parse_params
from oma_bridge.server.methods import MethodHandler
from oma_bridge.wire.params import WireParams

from .helpers import INIT_PARAMS, call, initialize, make_config, running_daemon, unix_session

pytestmark = pytest.mark.anyio

#: Every method of the wire protocol, and one that does not exist.
METHODS = [
    "agents/list",
    "agent/open",
    "agent/run",
    "agent/stream",
    "agent/prompt",
    "agent/history",
    "agent/reset",
    "agent/close",
    "agent/attach",
    "run/cancel",
    "oma/runAgent",
    "oma/runTasks",
    "oma/runTeam",
    "daemon/status",
    "no/such/method",
]


def registered(methods: MethodRegistry, name: str) -> Callable[[MethodHandler], MethodHandler]:
    """Decorator: ``methods.add(name, handler)``."""

    def register(handler: MethodHandler) -> MethodHandler:
        methods.add(name, handler)
        return handler

    return register


async def test_every_method_is_refused_before_initialize(short_dir: Path) -> None:
    async with unix_session(make_config(short_dir, tcp=False)) as (_running, ws):
        for number, method in enumerate(METHODS):
            answer = await call(ws, method, {}, request_id=number)
            assert answer == {
                "jsonrpc": "2.0",
                "id": number,
                "error": {
                    "code": -32002,
                    "message": "Not initialized",
                    "data": {"details": "Not initialized"},
                },
            }
        # The connection stayed open: initialize still works.
        await initialize(ws)


#: How every process and acp profile without a sandbox shows (PROTOCOL §19.1).
UNSANDBOXED = {"kind": "none", "network": True}


async def test_initialize_result_and_agents_list(short_dir: Path) -> None:
    async with unix_session(make_config(short_dir, tcp=False)) as (_running, ws):
        result = await initialize(ws)
        assert set(result) == {"protocolVersion", "serverInfo", "agents"}
        assert result["protocolVersion"] == 1
        assert result["serverInfo"]["name"] == "oma-bridge"
        assert isinstance(result["serverInfo"]["version"], str)
        expected = [
            {
                "name": "echo",
                "kind": "llm",
                "ready": True,
                "description": "echo",
                "model": "echo-1",
            },
            {"name": "wordcount", "kind": "process", "ready": True, "sandbox": UNSANDBOXED},
            {
                "name": "demo",
                "kind": "acp",
                "ready": True,
                "model": "demo-model",
                "sandbox": UNSANDBOXED,
            },
        ]
        assert result["agents"] == expected
        listed = await call(ws, "agents/list", request_id=2)
        assert listed["result"] == {"agents": expected}
        # Nothing about commands or environments leaks.
        text = orjson.dumps(listed).decode()
        assert "wc" not in text and "SECRET_THING" not in text and "python" not in text
        bad = await call(ws, "agents/list", {"extra": 1}, request_id=3)
        assert bad["error"]["code"] == -32602


async def test_initialize_errors(short_dir: Path) -> None:
    async with unix_session(make_config(short_dir, tcp=False)) as (_running, ws):
        answer = await call(ws, "initialize", {**INIT_PARAMS, "protocolVersion": 2})
        assert answer["error"] == {
            "code": -32003,
            "message": "Unsupported protocol version",
            "data": {"supported": [1], "details": "Unsupported protocol version"},
        }
        answer = await call(ws, "initialize", {"protocolVersion": 1})
        assert answer["error"]["code"] == -32602
        assert answer["error"]["data"]["errors"][0]["loc"] == ["clientInfo"]
        answer = await call(ws, "initialize", {**INIT_PARAMS, "surprise": True})
        assert answer["error"]["code"] == -32602
        # Still not initialized after the failures.
        assert (await call(ws, "agents/list"))["error"]["code"] == -32002
        await initialize(ws)
        again = await call(ws, "initialize", INIT_PARAMS, request_id=9)
        assert again["error"]["code"] == -32600


async def test_malformed_frames(short_dir: Path) -> None:
    async with unix_session(make_config(short_dir, tcp=False)) as (_running, ws):
        await initialize(ws)
        await ws.send("{not json")
        answer = orjson.loads(await ws.recv())
        assert (answer["id"], answer["error"]["code"]) == (None, -32700)
        for not_a_request in ("[]", "3", '{"jsonrpc": "1.0", "id": 4, "method": "x"}'):
            await ws.send(not_a_request)
            answer = orjson.loads(await ws.recv())
            assert answer["error"]["code"] == -32600, not_a_request
        answer = await call(ws, "no/such/method", request_id=5)
        assert answer["error"] == {
            "code": -32601,
            "message": "Method not found: no/such/method",
            "data": {"details": "Method not found: no/such/method"},
        }


async def test_pipelined_requests_after_initialize(short_dir: Path) -> None:
    async with unix_session(make_config(short_dir, tcp=False)) as (_running, ws):
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT_PARAMS}
        await ws.send(orjson.dumps(init).decode())
        for number in range(1, 6):
            request = {"jsonrpc": "2.0", "id": number, "method": "agents/list"}
            await ws.send(orjson.dumps(request).decode())
        answers: dict[int, Any] = {}
        with anyio.fail_after(5):
            while len(answers) < 6:
                answer = orjson.loads(await ws.recv())
                answers[answer["id"]] = answer
        assert all("result" in answer for answer in answers.values())


async def test_binary_frame_closes_with_1003(short_dir: Path) -> None:
    async with unix_session(make_config(short_dir, tcp=False)) as (_running, ws):
        await ws.send(b'{"jsonrpc": "2.0", "id": 1, "method": "agents/list"}')
        with pytest.raises(ConnectionClosed), anyio.fail_after(5):
            await ws.recv()
        assert ws.close_code == CloseCode.UNSUPPORTED_DATA


async def test_oversize_frame_closes_only_that_connection(short_dir: Path) -> None:
    config = make_config(short_dir, "max_message_bytes = 4096")
    methods = MethodRegistry()

    @registered(methods, "test/big")
    async def big_result(session: Session, params: Any) -> dict[str, str]:
        return {"text": "y" * 10_000}

    async with running_daemon(config, methods) as running:
        assert running.url is not None
        auth = [("Authorization", f"Bearer {running.token}")]
        async with (
            unix_connect(str(running.socket_path)) as big,
            connect(running.url, additional_headers=auth) as other,
        ):
            await initialize(big)
            await initialize(other)
            padding = "x" * 5000
            await big.send(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": padding}).decode())
            with pytest.raises(ConnectionClosed), anyio.fail_after(5):
                await big.recv()
            assert big.close_code == CloseCode.MESSAGE_TOO_BIG
            assert "result" in await call(other, "agents/list", request_id=2)
            # What the daemon sends is not limited by max_message_bytes.
            big_answer = await call(other, "test/big", request_id=3)
            assert len(big_answer["result"]["text"]) == 10_000


async def test_stop_closes_connections_with_going_away(short_dir: Path) -> None:
    async with unix_session(make_config(short_dir, tcp=False)) as (running, ws):
        await initialize(ws)
        running.stop()
        with pytest.raises(ConnectionClosed), anyio.fail_after(10):
            await ws.recv()
        assert ws.close_code == CloseCode.GOING_AWAY


class _EchoParams(WireParams):
    text: str


def _plugged_methods() -> MethodRegistry:
    methods = MethodRegistry()

    @registered(methods, "test/echo")
    async def echo(session: Session, params: Any) -> dict[str, Any]:
        parsed = parse_params(_EchoParams, params)
        await session.notify("test/event", {"text": parsed.text, "client": session.id})
        return {"text": parsed.text}

    @registered(methods, "test/fail")
    async def fail(session: Session, params: Any) -> None:
        raise RuntimeError("a bug with secret=hunter2 in it")

    @registered(methods, "test/refuse")
    async def refuse(session: Session, params: Any) -> None:
        raise WireError(-32012, "Forbidden: no", {"name": "Forbidden"})

    @registered(methods, "test/ask")
    async def ask(session: Session, params: Any) -> Any:
        with anyio.fail_after(5):
            return await session.request("test/question", {"q": 1})

    return methods


async def test_plugged_methods_notify_ask_and_fail_cleanly(short_dir: Path) -> None:
    config = make_config(short_dir, tcp=False)
    async with unix_session(config, _plugged_methods()) as (_running, ws):
        assert (await call(ws, "test/echo", {"text": "hi"}))["error"]["code"] == -32002
        await initialize(ws)
        event = await call(ws, "test/echo", {"text": "hi"}, request_id=1)
        assert event["method"] == "test/event" and event["params"]["text"] == "hi"
        answer = orjson.loads(await ws.recv())
        assert answer == {"jsonrpc": "2.0", "id": 1, "result": {"text": "hi"}}
        bad = await call(ws, "test/echo", {"text": 3}, request_id=2)
        assert bad["error"]["code"] == -32602
        assert bad["error"]["data"]["errors"][0]["loc"] == ["text"]
        failed = await call(ws, "test/fail", request_id=3)
        assert failed["error"] == {
            "code": -32603,
            "message": "Internal error",
            "data": {"details": "Internal error"},
        }
        refused = await call(ws, "test/refuse", request_id=4)
        error = refused["error"]
        assert error["data"] == {"name": "Forbidden", "details": error["message"]}
        # The daemon asks the client; the client answers; the method returns it.
        question = await call(ws, "test/ask", request_id=5)
        assert question["method"] == "test/question"
        reply = {"jsonrpc": "2.0", "id": question["id"], "result": {"a": 2}}
        await ws.send(orjson.dumps(reply).decode())
        answer = orjson.loads(await ws.recv())
        assert answer == {"jsonrpc": "2.0", "id": 5, "result": {"a": 2}}


async def test_requests_in_flight_are_cancelled_when_the_client_leaves(short_dir: Path) -> None:
    finished = anyio.Event()
    cancelled = anyio.Event()
    closed = anyio.Event()
    methods = MethodRegistry()

    @registered(methods, "test/wait")
    async def wait(session: Session, params: Any) -> None:
        session.on_close(lambda _: closed.set())
        try:
            await anyio.sleep(30)
            finished.set()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    async with running_daemon(make_config(short_dir, tcp=False), methods) as running:
        async with unix_connect(str(running.socket_path)) as ws:
            await initialize(ws)
            await ws.send('{"jsonrpc": "2.0", "id": 1, "method": "test/wait"}')
            await anyio.sleep(0.1)
        with anyio.fail_after(5):
            await cancelled.wait()
            await closed.wait()
        assert not finished.is_set()


async def test_a_client_that_stops_reading_is_dropped(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="oma_bridge.server")
    dropped = anyio.Event()
    methods = MethodRegistry()

    @registered(methods, "test/flood")
    async def flood(session: Session, params: Any) -> None:
        try:
            while True:
                await session.notify("test/chunk", {"data": "z" * 1_000_000})
        finally:
            dropped.set()

    config = make_config(short_dir, "send_timeout_s = 0.5", tcp=False)
    async with running_daemon(config, methods) as running:
        async with unix_connect(str(running.socket_path), max_size=None) as ws:
            await initialize(ws)
            await ws.send('{"jsonrpc": "2.0", "id": 1, "method": "test/flood"}')
            # Never read again: the daemon must give up on this client.
            with anyio.fail_after(10):
                await dropped.wait()
            assert any("stopped reading" in r.getMessage() for r in caplog.records)
        # The daemon still serves others.
        async with unix_connect(str(running.socket_path)) as other:
            await initialize(other)
