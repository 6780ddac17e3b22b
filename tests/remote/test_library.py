"""A remote ACP agent from the library alone: ``Agent`` with ``AcpConfig(url=...)``, no daemon.

The server here is an in-process websockets server that hosts the demo agent
(``oma_bridge.demo.acp_agent.DemoAgent``) on one JSON-RPC message per text
frame, the ACP WebSocket transport, on plain ``ws://`` loopback.  It checks
what a server of that transport may see: the subprotocol offered and the
Bearer token; and it can misbehave on purpose (frames that are not JSON-RPC).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.server import ServerConnection, serve

from oma_bridge import Agent, AgentConfig
from oma_bridge.backends.acp import AcpConfig
from oma_bridge.backends.acp.websocket import WebSocketConnector
from oma_bridge.demo.acp_agent import DemoAgent, reply_chunks
from oma_bridge.rpc import Peer

pytestmark = pytest.mark.anyio

TOKEN = "t" * 40


class DemoServer:
    """The demo agent behind a websockets server; what each upgrade asked for is kept."""

    def __init__(self, *, junk_first: int = 0) -> None:
        self.junk_first = junk_first
        self.handshakes: list[dict[str, Any]] = []
        self.port = 0

    async def handle(self, ws: ServerConnection) -> None:
        request = ws.request
        assert request is not None
        self.handshakes.append(
            {
                "authorization": request.headers.get("Authorization"),
                "subprotocol": ws.subprotocol,
            }
        )
        for _ in range(self.junk_first):
            await ws.send("this is not JSON")

        async def receive() -> str | None:
            try:
                return str(await ws.recv())
            except Exception:
                return None

        async def send(data: bytes) -> None:
            await ws.send(data.decode())

        agent = DemoAgent()
        peer = Peer(
            send, receive, on_request=agent.on_request, on_notification=agent.on_notification
        )
        agent.peer = peer
        async with peer:
            await peer.closed.wait()


@pytest.fixture
async def demo_server() -> AsyncIterator[DemoServer]:
    server = DemoServer()
    async with serve(
        server.handle,
        "127.0.0.1",
        0,
        subprotocols=["acp.v1"],  # type: ignore[list-item]
    ) as running:
        server.port = running.sockets[0].getsockname()[1]
        yield server


def remote_agent(port: int, tmp_path: Path, **settings: Any) -> Agent:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    backend = AcpConfig(url=f"ws://127.0.0.1:{port}/acp/demo", token_file=token, **settings)
    return Agent(AgentConfig(name="far", backend=backend))


async def test_an_agent_of_the_library_reaches_a_remote_acp_agent(
    demo_server: DemoServer, tmp_path: Path
) -> None:
    async with remote_agent(demo_server.port, tmp_path, coalesce_text=True) as agent:
        with anyio.fail_after(20):
            first = await agent.run("hi there")
            texts = []
            async for event in agent.stream("again"):
                if event.type == "text":
                    texts.append(event.data)
    assert first.success, first
    assert first.output == "".join(reply_chunks("hi there", 1, "demo-1", 2))
    assert "This is turn 2 of session demo-1 " in "".join(texts)
    assert demo_server.handshakes == [{"authorization": f"Bearer {TOKEN}", "subprotocol": "acp.v1"}]


async def test_frames_that_are_not_json_rpc_are_skipped(tmp_path: Path) -> None:
    server = DemoServer(junk_first=3)
    async with serve(server.handle, "127.0.0.1", 0) as running:  # selects no subprotocol
        port = running.sockets[0].getsockname()[1]
        async with remote_agent(port, tmp_path) as agent:
            with anyio.fail_after(20):
                result = await agent.run("still fine")
    assert result.success, result
    assert result.output.startswith("You said: still fine\n")
    assert server.handshakes[0]["subprotocol"] is None


async def test_only_a_read_that_would_wait_flushes_held_text() -> None:
    """The transport's ``before_wait``: frames already received are read without it."""

    async def burst(ws: ServerConnection) -> None:
        for n in range(3):
            await ws.send(f'{{"jsonrpc": "2.0", "method": "n", "params": {n}}}')
        await anyio.sleep(0.3)
        await ws.send('{"jsonrpc": "2.0", "method": "late"}')
        await ws.wait_closed()

    async with serve(burst, "127.0.0.1", 0) as running:
        port = running.sockets[0].getsockname()[1]
        connector = WebSocketConnector(
            url=f"ws://127.0.0.1:{port}/",
            label="burst",
            token_file=None,
            ca_file=None,
            send_timeout_s=10,
            max_message_bytes=1 << 20,
        )
        transport = await connector()
        waits: list[int] = []
        received: list[object] = []

        async def before_wait() -> None:
            waits.append(len(received))

        transport.set_before_wait(before_wait)
        await anyio.sleep(0.2)  # the burst is here before the first read
        with anyio.fail_after(10):
            for _ in range(4):
                received.append(await transport.receive())
        await transport.close(1)
    assert [m["method"] for m in received] == ["n", "n", "n", "late"]  # type: ignore[index]
    assert waits == [3]  # only before the read that had to wait for "late"
    assert transport.gone


def test_a_config_names_a_command_or_a_url() -> None:
    with pytest.raises(ValueError, match="needs a command \\(or a url"):
        AcpConfig()
    with pytest.raises(ValueError, match="url and command do not go together"):
        AcpConfig(command="x", url="wss://h:1/acp/x")
    assert AcpConfig(url="ws://[::1]:9/acp/x").command is None
