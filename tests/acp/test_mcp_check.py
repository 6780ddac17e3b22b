"""The handshake's own check of the MCP servers it gives (PROTOCOL §22.3; ``mcp_check.py``).

The facade checks a client's servers at ``session/new`` against what the
daemon knows of the agent; the handshake checks again between the agent's
``initialize`` and its session's opening, so an agent that no longer takes
a transport (or a library user's ``mcp_servers``) is refused, never given a
server it would drop.  The agent is ``acp_ts_agent.mjs`` on the TypeScript SDK.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from oma_bridge.backends.acp import AcpBackend
from oma_bridge.backends.acp.mcp_check import refusal, transports_taken
from oma_bridge.errors import BackendError

from .helpers import run_text
from .test_typescript_agent import ts_config

pytestmark = pytest.mark.anyio

HTTP = {"type": "http", "name": "docs", "url": "http://127.0.0.1:9/mcp", "headers": []}
SSE = {"type": "sse", "name": "feed", "url": "http://127.0.0.1:9/sse", "headers": []}
STDIO = {"name": "files", "command": "/bin/true", "args": [], "env": []}


def test_the_transports_an_agent_takes() -> None:
    assert transports_taken(None) == ["stdio"]
    assert transports_taken({"http": True, "sse": False, "_meta": True}) == ["stdio", "http"]
    assert refusal([STDIO, {**STDIO, "type": "stdio"}], None, "a") is None
    assert refusal([HTTP, SSE], {"http": True, "sse": True}, "a") is None
    message = refusal([HTTP, SSE], {"http": True}, "a")
    assert message is not None and message.startswith('mcpServers[1] "feed" uses the sse')
    assert refusal([{"type": "http"}], {}, "a") is not None  # no name: "(no name)"
    assert "(no name)" in (refusal([{"type": "http"}], {}, "a") or "")
    assert (refusal([STDIO, 3], {}, "a") or "").startswith("mcpServers[1] is not an object")


async def test_a_server_the_agent_cannot_take_stops_the_session_before_it_opens(
    tmp_path: Path, acp_ts_sdk: Path
) -> None:
    config = ts_config(tmp_path, acp_ts_sdk, mcp_servers=(STDIO, HTTP))
    backend = AcpBackend(config, agent_name="ts")
    try:
        with anyio.fail_after(30), pytest.raises(BackendError) as caught:
            await run_text(backend, "mcp")
        assert 'ACP agent "ts" cannot open the session: mcpServers[1] "docs"' in str(caught.value)
        assert backend.session_id is None  # no session/new was sent
        assert backend.advertised() is not None  # initialize was answered
    finally:
        await backend.aclose()


async def test_servers_the_agent_takes_reach_its_session(tmp_path: Path, acp_ts_sdk: Path) -> None:
    config = ts_config(tmp_path, acp_ts_sdk, mcp_servers=(STDIO, HTTP))
    config = config.model_copy(update={"env": {**config.env, "OMA_TS_AGENT_MCP": "http"}})
    backend = AcpBackend(config, agent_name="ts")
    try:
        with anyio.fail_after(30):
            outcome, _ = await run_text(backend, "mcp")
        assert json.loads(outcome.output.removeprefix("mcp:")) == [STDIO, HTTP]
    finally:
        await backend.aclose()
