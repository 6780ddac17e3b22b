"""An echo agent on the official Python SDK, served with the SDK's own WebSocket transport.

``python acp_sdk_ws_agent.py CERT KEY [PORT]``: the SDK's ASGI app
(``acp.http.asgi.create_asgi_app``, whose WebSocket door is ``acp.ws``)
under uvicorn, over TLS, on ``127.0.0.1:PORT`` (0: any free port).  The
port is printed on stdout once the server listens.  A server that is not
oma-bridge: it takes no token and selects no subprotocol, and it forgets a
connection's sessions when the connection ends.

The agent answers each prompt with ``echo N: TEXT`` (N counts the turns of
the session, so a client sees whether a session went on) in two chunks.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import acp
import uvicorn
from acp import schema
from acp.http.asgi import create_asgi_app


class EchoAgent:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.turns: dict[str, int] = {}

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=1,
            agent_capabilities=schema.AgentCapabilities(load_session=False),
            agent_info=schema.Implementation(name="sdk-ws-echo", version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        session_id = f"echo-{len(self.turns) + 1}"
        self.turns[session_id] = 0
        return schema.NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        self.turns[session_id] += 1
        text = "".join(getattr(block, "text", "") for block in prompt)
        for chunk in (f"echo {self.turns[session_id]}: ", text):
            await self.conn.session_update(session_id, acp.update_agent_message_text(chunk))
        return schema.PromptResponse(stop_reason="end_turn")


async def main(cert: str, key: str, port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    config = uvicorn.Config(
        create_asgi_app(EchoAgent),  # type: ignore[arg-type]
        ssl_certfile=cert,
        ssl_keyfile=key,
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    print(listener.getsockname()[1], flush=True)
    await server.serve(sockets=[listener])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0))
