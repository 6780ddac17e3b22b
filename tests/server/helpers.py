"""Helpers for the daemon tests: start a real daemon, speak raw HTTP and JSON-RPC to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson
from websockets.asyncio.client import ClientConnection, unix_connect

from oma_bridge.server import MethodRegistry, RunningServer, ServerConfig, parse_config, serve

UPGRADE_HEADERS = [
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Version", "13"),
]

AGENTS_TOML = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
description = "echo"

[agents.wordcount]
kind = "process"
command = "wc"
args = ["-w"]
env = { SECRET_THING = "x" }

[agents.demo]
kind = "acp"
command = "@python"
args = ["-m", "oma_bridge.demo.acp_agent"]
model = "demo-model"
"""


def make_config(
    folder: Path, server: str = "", *, tcp: bool = True, agents: str = AGENTS_TOML
) -> ServerConfig:
    """A config with a socket in ``folder`` (and a TCP listener on a free port)."""
    lines = ["[server]", f'socket = "{folder}/bridge.sock"']
    if tcp:
        lines.append('tcp = "127.0.0.1:0"')
    text = "\n".join(lines) + "\n" + server + "\n" + agents
    path = folder / "bridge.toml"
    path.write_text(text)
    return parse_config(text, source=str(path), base_dir=folder)


@contextlib.asynccontextmanager
async def running_daemon(
    config: ServerConfig, methods: MethodRegistry | None = None
) -> AsyncIterator[RunningServer]:
    """A daemon for the duration of the block, stopped cleanly at its end."""
    async with anyio.create_task_group() as tg:
        running: RunningServer = await tg.start(partial(serve, config, methods=methods))
        try:
            yield running
        finally:
            running.stop()


async def raw_http(
    running: RunningServer,
    target: str = "/",
    headers: list[tuple[str, str]] | None = None,
    *,
    via: str = "tcp",
    host: str | None = "default",
    method: str = "GET",
) -> tuple[int, str]:
    """Send one raw HTTP/1.1 request; returns (status, body).  ``host=None`` sends no Host."""
    status, _headers, body = await http_exchange(
        running, target, headers, via=via, host=host, method=method
    )
    return status, body


async def http_exchange(
    running: RunningServer,
    target: str = "/",
    headers: list[tuple[str, str]] | None = None,
    *,
    via: str = "tcp",
    host: str | None = "default",
    method: str = "GET",
) -> tuple[int, dict[str, list[str]], str]:
    """:func:`raw_http` with the answer's headers too (lower-case names, every value)."""
    if via == "tcp":
        assert running.port is not None
        stream: Any = await anyio.connect_tcp("127.0.0.1", running.port)
        default_host = f"127.0.0.1:{running.port}"
    else:
        assert running.socket_path is not None
        stream = await anyio.connect_unix(running.socket_path)
        default_host = "localhost"
    lines = [f"{method} {target} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {default_host if host == 'default' else host}")
    lines += [f"{name}: {value}" for name, value in headers or []]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    data = b""
    async with stream:
        await stream.send(request)
        with anyio.fail_after(5):
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            head, _, body = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            answer_headers: dict[str, list[str]] = {}
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                key = name.strip().lower().decode("latin-1")
                answer_headers.setdefault(key, []).append(value.strip().decode("latin-1"))
            length = int(answer_headers.get("content-length", ["0"])[0])
            while len(body) < length:
                body += await stream.receive()
    return status, answer_headers, body.decode()


async def call(ws: ClientConnection, method: str, params: Any = None, request_id: Any = 1) -> Any:
    """Send one request and return the decoded answer (a dict with result or error)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    await ws.send(orjson.dumps(message).decode())
    with anyio.fail_after(5):
        return orjson.loads(await ws.recv())


INIT_PARAMS = {"protocolVersion": 1, "clientInfo": {"name": "tests", "version": "0"}}


async def initialize(ws: ClientConnection) -> Any:
    answer = await call(ws, "initialize", INIT_PARAMS, request_id="init")
    assert "result" in answer, answer
    return answer["result"]


@contextlib.asynccontextmanager
async def unix_session(
    config: ServerConfig, methods: MethodRegistry | None = None
) -> AsyncIterator[tuple[RunningServer, ClientConnection]]:
    """A daemon and one client connected to its unix socket."""
    async with running_daemon(config, methods) as running:
        assert running.socket_path is not None
        async with unix_connect(str(running.socket_path)) as ws:
            yield running, ws
